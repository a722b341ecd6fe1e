"""The HTTP judge against a local OpenAI-compatible server: logprobs, text answers, failures."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_helpers import PAIRS, JudgeServer  # noqa: E402

from xmcbench.judge import JudgeError, load_prompt  # noqa: E402
from xmcbench.judge.openai_judge import OpenAIJudge  # noqa: E402

PROMPT = load_prompt("eurlex-4k")


def _score(text: str) -> float:
    return 0.8 if "usb" in text else 0.3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_p_yes_from_top_logprobs_renormalised():
    with JudgeServer(_score) as srv:
        j = OpenAIJudge(srv.base_url, "test-model", concurrency=3)
        p = j.p_yes(["a usb hub", "a garden chair"], ["computers", "computers"], PROMPT)
    np.testing.assert_allclose(p, [0.8, 0.3], atol=1e-6)  # the 10% on other tokens is renormalised away
    assert j.stats.asked == 2 and j.stats.retries == 0


def test_answer_text_when_the_server_gives_no_logprobs():
    with JudgeServer(_score, mode="no_logprobs") as srv:
        p = OpenAIJudge(srv.base_url, "m").p_yes(["a usb hub", "a chair"], ["x", "x"], PROMPT)
    np.testing.assert_array_equal(p, [1.0, 0.0])


def test_neither_yes_nor_no_is_an_error_not_a_guess():
    with JudgeServer(_score, mode="gibberish") as srv, pytest.raises(JudgeError, match="neither yes nor no"):
        OpenAIJudge(srv.base_url, "m").p_yes(["d"], ["l"], PROMPT)


def test_concurrency_is_bounded():
    with JudgeServer(_score, mode="slow", delay_s=0.1) as srv:
        OpenAIJudge(srv.base_url, "m", concurrency=2).p_yes(["d"] * 8, ["l"] * 8, PROMPT)
        assert srv.max_in_flight <= 2 and srv.requests == 8


def test_server_errors_are_retried_with_backoff():
    with JudgeServer(_score, mode="error", fail_first=2) as srv:
        j = OpenAIJudge(srv.base_url, "m", concurrency=1, retries=3, backoff_s=0.01)
        assert j.p_yes(["usb"], ["l"], PROMPT)[0] == pytest.approx(0.8)
    assert j.stats.retries == 2


def test_dropped_connections_are_retried():
    with JudgeServer(_score, mode="drop", fail_first=1) as srv:
        j = OpenAIJudge(srv.base_url, "m", concurrency=1, retries=2, backoff_s=0.01)
        assert j.p_yes(["usb"], ["l"], PROMPT)[0] == pytest.approx(0.8)
    assert j.stats.retries == 1


def test_a_slow_server_times_out_with_one_clear_error():
    with JudgeServer(_score, mode="slow", delay_s=2.0) as srv:
        j = OpenAIJudge(srv.base_url, "m", timeout_s=0.2, retries=1, backoff_s=0.01)
        start = time.monotonic()
        with pytest.raises(JudgeError, match="failed 2 times"):
            j.p_yes(["d"], ["l"], PROMPT)
        assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("mode", ["trickle", "trickle_head"])
def test_a_server_that_trickles_its_reply_meets_the_deadline(mode):
    """timeout_s bounds each try as a whole, not each read: the server here sends a byte every
    0.02 s, so every read is quick but the whole reply would take seconds."""
    key = "sk-test-trickle-0123456789"
    with JudgeServer(_score, mode=mode, delay_s=0.02) as srv:
        j = OpenAIJudge(srv.base_url, "m", api_key=key, timeout_s=0.3, retries=1, backoff_s=0.01, concurrency=1)
        start = time.monotonic()
        with pytest.raises(JudgeError, match=r"failed 2 times \(last: no whole reply within the 0.3 s deadline") as err:
            j.p_yes(["d"], ["l"], PROMPT)
        elapsed = time.monotonic() - start
        assert srv.requests == 2 and j.stats.retries == 1
    whole_reply_s = 0.02 * 300  # the reply is over 300 bytes
    assert elapsed < whole_reply_s
    assert srv.base_url in str(err.value) and key not in str(err.value)


def test_a_trickled_reply_that_ends_within_the_deadline_is_read():
    with JudgeServer(_score, mode="trickle", delay_s=0.0) as srv:
        j = OpenAIJudge(srv.base_url, "m", timeout_s=30, retries=0)
        assert j.p_yes(["usb"], ["l"], PROMPT)[0] == pytest.approx(0.8)


def test_a_whole_reply_is_kept_when_the_deadline_fires_just_after_it_was_read(monkeypatch):
    """The timer can fire after the reply's last byte was read but before the try ends (its thread
    descheduled in between): a reply whose Content-Length says it is whole is used, not retried."""
    from xmcbench.judge import openai_judge

    real_exit = openai_judge._Deadline.__exit__

    def late_exit(self, *exc):
        self._timer.join()  # the timer fires now, after the read, and shuts the finished try's socket
        assert self.cut
        return real_exit(self, *exc)

    monkeypatch.setattr(openai_judge._Deadline, "__exit__", late_exit)
    with JudgeServer(_score) as srv:
        j = OpenAIJudge(srv.base_url, "m", timeout_s=0.2, retries=0)
        assert j.p_yes(["usb"], ["l"], PROMPT)[0] == pytest.approx(0.8)
        assert srv.requests == 1


def test_a_client_error_is_not_retried():
    with JudgeServer(_score, mode="bad_request") as srv:
        with pytest.raises(JudgeError, match="HTTP 400"):
            OpenAIJudge(srv.base_url, "m", retries=3).p_yes(["d"], ["l"], PROMPT)
        assert srv.requests == 1


def test_unreachable_server():
    j = OpenAIJudge(f"http://127.0.0.1:{_free_port()}/v1", "m", retries=1, backoff_s=0.01, timeout_s=1)
    with pytest.raises(JudgeError, match="is it running"):
        j.p_yes(["d"], ["l"], PROMPT)


def test_long_documents_are_cut_and_counted():
    seen = []
    with JudgeServer(lambda text: seen.append(text) or 0.5) as srv:
        j = OpenAIJudge(srv.base_url, "m", max_doc_chars=10)
        j.p_yes(["x" * 100, "short"], ["tag", "tag"], PROMPT)
    assert j.stats.truncated == 1
    assert all(t.endswith("Is the tag tag relevant to the document? answer yes or no") for t in seen)  # question whole


@pytest.mark.slow
def test_http_judge_serving_the_real_model_agrees_with_it(qwen_judge):
    """The server wraps the transformers judge: both backends give the same P(yes)."""
    docs, labels, truth = zip(*PAIRS[:6], strict=False)
    direct = qwen_judge.p_yes(docs, labels, PROMPT)
    with JudgeServer(lambda text: float(qwen_judge.score_messages([text])[0])) as srv:
        over_http = OpenAIJudge(srv.base_url, "qwen2.5-coder-0.5b", concurrency=1).p_yes(docs, labels, PROMPT)
    # One request per pair over HTTP; directly, the pairs of a document share its prefix's cache. Each bf16
    # path is within 0.033 of float32 (mean 0.010, measured on 160 pairs), so two of them differ by up to ~0.07.
    np.testing.assert_allclose(over_http, direct, atol=0.08)
    assert np.abs(over_http - direct).mean() < 0.03
    truth = np.array(truth)
    assert over_http[truth].mean() > over_http[~truth].mean()
