"""What goes wrong around a judge: servers that misbehave, keys that must stay secret, a damaged
or unwritable judgement cache, prompt files and model paths that are not there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_helpers import JudgeServer  # noqa: E402

from xmcbench.cli import app  # noqa: E402
from xmcbench.judge import JudgeConfig, JudgeError, JudgementCache, build_judge, load_prompt  # noqa: E402
from xmcbench.judge.base import answer_word  # noqa: E402
from xmcbench.judge.cache import DamagedCacheError  # noqa: E402
from xmcbench.judge.model_files import resolve_model  # noqa: E402
from xmcbench.judge.openai_judge import OpenAIJudge  # noqa: E402

PROMPT = load_prompt("eurlex-4k")
KEY = "sk-test-0123456789abcdef"


def _score(text: str) -> float:
    return 0.8 if "usb" in text else 0.3


# --- the HTTP judge against servers that misbehave ---------------------------------------------


def test_a_reply_cut_short_is_retried_and_then_one_clear_error():
    with JudgeServer(_score, mode="truncated", fail_first=1) as srv:
        j = OpenAIJudge(srv.base_url, "m", concurrency=1, retries=1, backoff_s=0.01)
        assert j.p_yes(["usb"], ["l"], PROMPT)[0] == pytest.approx(0.8)
    assert j.stats.retries == 1
    with JudgeServer(_score, mode="truncated", fail_first=10) as srv:
        with pytest.raises(JudgeError, match="failed 2 times .*IncompleteRead"):
            OpenAIJudge(srv.base_url, "m", retries=1, backoff_s=0.01).p_yes(["d"], ["l"], PROMPT)


def test_a_reply_that_is_not_json_says_so():
    with JudgeServer(_score, mode="not_json") as srv, pytest.raises(JudgeError, match="not JSON: '<html>"):
        OpenAIJudge(srv.base_url, "m", retries=1, backoff_s=0.01).p_yes(["d"], ["l"], PROMPT)


@pytest.mark.parametrize(
    "reply",
    [
        {"choices": [5]},
        {"choices": [{"logprobs": {"content": ["x"]}, "message": {"content": "Yes"}}]},
        {"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "Yes"}]}]}}]},
        {"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "Yes", "logprob": None}]}]}}]},
        {"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "Yes", "logprob": float("nan")}]}]}}]},
        {"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "Yes", "logprob": 5.0}]}]}}]},
    ],
    ids=[
        "choice-not-an-object",
        "content-not-objects",
        "no-logprob",
        "null-logprob",
        "nan-logprob",
        "positive-logprob",
    ],
)
def test_a_reply_of_the_wrong_shape_is_one_clear_error_never_a_guess(reply):
    with JudgeServer(_score, reply_json=reply) as srv, pytest.raises(JudgeError, match="cannot read"):
        OpenAIJudge(srv.base_url, "m", retries=0).p_yes(["d"], ["l"], PROMPT)


@pytest.mark.parametrize("reply", [[1, 2], {"error": {"message": "model not loaded"}}, {"choices": []}])
def test_a_reply_without_choices_is_one_clear_error(reply):
    with JudgeServer(_score, reply_json=reply) as srv, pytest.raises(JudgeError, match="no choices"):
        OpenAIJudge(srv.base_url, "m", retries=0).p_yes(["d"], ["l"], PROMPT)


@pytest.mark.parametrize(
    ("answer", "p"), [("**Yes**", 1.0), ("Yes, it is relevant.", 1.0), ("`no`", 0.0), ("\u2581No", 0.0)]
)
def test_answer_text_with_markup_or_more_words_is_read_by_its_first_word(answer, p):
    with JudgeServer(_score, mode="no_logprobs", answer=answer) as srv:
        assert OpenAIJudge(srv.base_url, "m").p_yes(["d"], ["l"], PROMPT)[0] == p


def test_an_answer_that_only_mentions_yes_later_is_still_an_error():
    with JudgeServer(_score, mode="no_logprobs", answer="Answer: yes") as srv:
        with pytest.raises(JudgeError, match="neither yes nor no"):
            OpenAIJudge(srv.base_url, "m").p_yes(["d"], ["l"], PROMPT)


def test_raw_token_spellings_count_as_yes_and_no():
    assert [answer_word(t) for t in ("\u0120Yes", "\u2581no", " YES.", "Yes!", "yesterday", "")] == [
        "yes",
        "no",
        "yes",
        "yes",
        None,
        None,
    ]


# --- the API key: in the header, nowhere else ----------------------------------------------------


def test_the_key_is_sent_but_masked_in_an_error_that_echoes_it():
    with JudgeServer(_score, mode="echo_auth") as srv:
        with pytest.raises(JudgeError, match="HTTP 401") as err:
            OpenAIJudge(srv.base_url, "m", api_key=KEY).p_yes(["d"], ["l"], PROMPT)
        assert srv.authorization == f"Bearer {KEY}"
    assert KEY not in str(err.value) and "Bearer ***" in str(err.value)


def test_a_key_that_cannot_be_a_header_is_refused_without_showing_it():
    with pytest.raises(JudgeError, match="control character") as err:
        OpenAIJudge("http://127.0.0.1:8000/v1", "m", api_key=KEY + "\nX-Other: 1")
    assert KEY not in str(err.value)
    assert OpenAIJudge("http://127.0.0.1:8000/v1", "m", api_key=f" {KEY}\n").api_key == KEY  # a key file's newline


@pytest.mark.parametrize(
    "url",
    [
        "http://user:hunter2secret@127.0.0.1:8000/v1",
        "http://127.0.0.1:8000/v1?api_key=hunter2secret",
        "http://127.0.0.1:8000/v1;key=hunter2secret",
        "HTTP://user:hunter2secret@127.0.0.1:8000/v1",
    ],
)
def test_a_base_url_carrying_a_secret_is_refused_masked(url):
    # the base URL is the recorded revision and part of the cache's model key
    with pytest.raises(JudgeError, match="must not carry credentials") as err:
        OpenAIJudge(url, "m")
    assert "hunter2secret" not in str(err.value)
    with pytest.raises(ValueError, match="must not carry credentials") as err:
        JudgeConfig(backend="openai", base_url=url)
    assert "hunter2secret" not in str(err.value).replace(f"input_value='{url}'", "")


@pytest.mark.parametrize("url", ["", "127.0.0.1:8000/v1", "ftp://host/v1", "http://", "http://[::1"])
def test_a_base_url_that_is_not_an_http_url_is_a_clear_error(url):
    with pytest.raises(JudgeError, match="base_url"):
        OpenAIJudge(url, "m")


def test_api_key_env_must_be_set_and_must_be_a_name(monkeypatch):
    monkeypatch.delenv("XMCB_TEST_JUDGE_KEY", raising=False)
    cfg = JudgeConfig(backend="openai", base_url="http://127.0.0.1:8000/v1", api_key_env="XMCB_TEST_JUDGE_KEY")
    with pytest.raises(JudgeError, match="XMCB_TEST_JUDGE_KEY, but it is not set"):
        build_judge(cfg)
    monkeypatch.setenv("XMCB_TEST_JUDGE_KEY", KEY + "\n")
    assert build_judge(cfg).api_key == KEY
    with pytest.raises(ValueError, match="never the key itself") as err:
        JudgeConfig(backend="openai", api_key_env=KEY)
    assert "never the key itself" in str(err.value)


def test_the_key_reaches_neither_the_output_nor_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XMCB_TEST_JUDGE_KEY", KEY)
    with JudgeServer(_score) as srv:
        result = CliRunner().invoke(
            app,
            ["judge", "eval", "--dataset", "synth-judge-key", "--synth", "30,60,10,0", "--backend", "openai"]
            + ["--base-url", srv.base_url, "--model", "m", "--api-key-env", "XMCB_TEST_JUDGE_KEY"]
            + ["--sample", "4", "--no-injection", "--json"],
        )
        assert srv.authorization == f"Bearer {KEY}"
    assert result.exit_code == 0, result.output
    assert KEY not in result.output
    home = Path(os.environ["XMCBENCH_HOME"])
    assert all(KEY.encode() not in f.read_bytes() for f in home.rglob("*") if f.is_file())


def test_cli_judge_options_are_checked_in_one_line():
    args = ["judge", "eval", "--dataset", "d", "--model", "m"]
    bad_backend = CliRunner().invoke(app, args + ["--backend", "bogus"])
    assert bad_backend.exit_code == 1 and "--backend:" in bad_backend.output and "Traceback" not in bad_backend.output
    assert CliRunner().invoke(app, args + ["--backend", "fake", "--sample", "0"]).exit_code == 2


# --- the judgement cache ----------------------------------------------------------------------


def _filled(path: Path) -> JudgementCache:
    cache = JudgementCache(path, timeout_s=5)
    cache.store("v1", "eurlex-4k", "m@1", np.arange(10), np.arange(10), np.linspace(0, 1, 10))
    return cache


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _bad_checksum(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[12288 + 100 : 12288 + 110] = b"X" * 10  # inside the first data block (after the 3 headers)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    [lambda p: p.write_bytes(b"not a database" * 100), lambda p: p.write_bytes(b""), _truncate, _bad_checksum],
    ids=["garbage", "empty", "truncated", "checksum"],
)
def test_a_damaged_cache_is_moved_aside_and_judging_goes_on(tmp_path, damage, caplog):
    path = tmp_path / "judgements.duckdb"
    cache = _filled(path)
    damage(path)
    damaged = path.read_bytes()
    with pytest.raises(DamagedCacheError, match="is damaged"):
        cache.stats()
    # a cache: what it cannot answer is asked again, with a warning
    assert np.isnan(cache.lookup("v1", "eurlex-4k", "m@1", np.arange(3), np.arange(3))).all()
    assert "is damaged" in caplog.text
    cache.store("v1", "eurlex-4k", "m@1", np.arange(3), np.arange(3), np.full(3, 0.5))
    assert cache.stats() == [("v1", "eurlex-4k", "m@1", 3, 0.5)]
    (aside,) = tmp_path.glob("judgements.duckdb.damaged-*")
    assert aside.read_bytes() == damaged  # kept as it was
    result = CliRunner().invoke(app, ["judge", "cache", "stats", "--path", str(path)])
    assert result.exit_code == 0 and "3 judgements" in result.output


def test_a_damaged_cache_is_one_clear_line_in_the_cli(tmp_path):
    path = tmp_path / "judgements.duckdb"
    path.write_bytes(b"not a database" * 100)
    for cmd in (["stats"], ["export", str(tmp_path / "out.csv")]):
        result = CliRunner().invoke(app, ["judge", "cache", *cmd, "--path", str(path)])
        assert result.exit_code == 1 and "is damaged" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out.csv").exists()


def test_a_cache_that_cannot_be_written_is_a_clear_error_and_keeps_what_it_had(tmp_path, monkeypatch):
    path = tmp_path / "judgements.duckdb"
    cache = _filled(path)

    def full_disk(self):
        raise duckdb.IOException('IO Error: Could not write file "judgements.duckdb.wal": No space left on device')

    monkeypatch.setattr(JudgementCache, "_connect_for_write", full_disk)
    with pytest.raises(JudgeError, match="cannot write the judgement cache .*No space left.*--no-cache"):
        cache.store("v1", "eurlex-4k", "m@1", np.arange(20, 23), np.arange(3), np.full(3, 0.5))
    monkeypatch.undo()
    assert not list(tmp_path.glob("*.damaged-*"))  # full, not damaged: nothing moved aside
    assert cache.stats()[0][3] == 10


def test_a_cache_whose_folder_cannot_be_made_is_a_clear_error(tmp_path):
    (tmp_path / "a-file").write_text("in the way")
    cache = JudgementCache(tmp_path / "a-file" / "judgements.duckdb")
    with pytest.raises(JudgeError, match="cannot write the judgement cache .*a-file"):
        cache.store("v1", "p", "m@1", np.arange(2), np.arange(2), np.full(2, 0.5))
    assert np.isnan(cache.lookup("v1", "p", "m@1", np.arange(2), np.arange(2))).all()


def test_a_cache_path_that_is_a_folder_is_a_clear_error(tmp_path):
    cache = JudgementCache(tmp_path)
    with pytest.raises(JudgeError, match="is a folder"):
        cache.store("v1", "p", "m@1", np.arange(2), np.arange(2), np.full(2, 0.5))
    with pytest.raises(JudgeError, match="is a folder"):
        cache.lookup("v1", "p", "m@1", np.arange(2), np.arange(2))


def test_export_writes_the_whole_file_or_nothing(tmp_path):
    cache = _filled(tmp_path / "judgements.duckdb")
    quoted = tmp_path / "it's here.csv"
    assert cache.export(quoted) == 10 and len(quoted.read_text().splitlines()) == 11
    assert cache.export(tmp_path / "j.PARQUET") == 10
    with pytest.raises(JudgeError, match=r"name a \.csv or \.parquet file"):
        cache.export(tmp_path / "j.json")
    with pytest.raises(JudgeError, match="does not exist"):
        cache.export(tmp_path / "no" / "j.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["it's here.csv", "j.PARQUET", "judgements.duckdb"] + [
        "judgements.duckdb.lock"
    ]


WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from xmcbench.judge import JudgementCache
    cache = JudgementCache(sys.argv[1])
    for i in range(10_000):
        ids = np.arange(i * 200, (i + 1) * 200)
        cache.store("v1", "eurlex-4k", "m@1", ids, ids % 97, np.full(ids.size, 0.25))
        print(i, flush=True)
    """
)


@pytest.mark.slow
def test_a_cache_killed_mid_write_keeps_whole_chunks_and_is_reused(tmp_path):
    path = tmp_path / "judgements.duckdb"
    for _ in range(2):  # the second writer starts on the file the first was killed writing
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
        for _ in range(3):  # a few chunks stored, the next one under way
            assert proc.stdout.readline()
        time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    cache = JudgementCache(path, timeout_s=10)
    (row,) = cache.stats()
    n = row[3]
    assert n >= 600 and n % 200 == 0  # whole chunks only: each store is one transaction
    assert (cache.lookup("v1", "eurlex-4k", "m@1", np.arange(n), np.arange(n) % 97) == 0.25).all()
    cache.store("v1", "eurlex-4k", "m@1", np.array([10**9]), np.array([1]), np.array([0.5]))
    assert cache.stats()[0][3] == n + 1


# --- prompt files and model paths ---------------------------------------------------------------


def test_a_prompt_files_id_changes_with_its_text(tmp_path):
    # the id keys the cache: an edited template must not be answered from the old one's judgements
    f = tmp_path / "mine.txt"
    f.write_text("Doc: {doc}\nTag: {label_text}\nyes or no?\n")
    first = load_prompt(str(f)).id
    f.write_text("Document: {doc}\nIs {label_text} right? yes or no\n")
    assert first.startswith("mine@") and load_prompt(str(f)).id.startswith("mine@")
    assert load_prompt(str(f)).id != first


def test_prompt_files_that_cannot_be_read_are_clear_errors(tmp_path):
    with pytest.raises(JudgeError, match="prompt file .*nope.txt does not exist"):
        load_prompt(str(tmp_path / "nope.txt"))
    with pytest.raises(JudgeError, match="is a folder"):
        load_prompt(str(tmp_path))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Dokument: {doc} – {label_text}".encode("cp1252"))
    with pytest.raises(JudgeError, match="not UTF-8"):
        load_prompt(str(latin))


def test_a_missing_model_folder_and_a_malformed_parts_spec_say_what_is_wrong(tmp_path):
    with pytest.raises(JudgeError, match=r"judge model folder .*gone does not exist"):
        resolve_model(str(tmp_path / "gone"))
    with pytest.raises(JudgeError, match=r"parts:<distribution prefix>#sha256=<64 hex digits>"):
        resolve_model("parts:some-dist#sha256=abc")


@pytest.mark.slow
def test_the_transformers_judge_on_a_missing_folder_is_one_clear_error(tmp_path):
    result = CliRunner().invoke(
        app,
        ["judge", "eval", "--dataset", "synth-judge-gone", "--synth", "30,60,10,0", "--model", str(tmp_path / "gone")],
    )
    assert result.exit_code == 1 and "does not exist" in result.output and "Traceback" not in result.output


def test_a_model_folder_changed_in_place_gets_a_new_revision(tmp_path):
    folder = tmp_path / "my-judge"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\0" * 64)
    os.utime(weights, ns=(1_000_000_000, 1_000_000_000))
    first = resolve_model(str(folder))
    assert first == resolve_model(str(folder))  # stable while nothing changes
    assert first[1].startswith("my-judge@")
    (folder / "tokenizer.json").write_text("{}")  # not the model's weights: same answers
    assert resolve_model(str(folder)) == first
    weights.write_bytes(b"\1" * 64)  # fine-tuned again in place, same size
    os.utime(weights, ns=(2_000_000_000, 2_000_000_000))
    assert resolve_model(str(folder))[1] != first[1]
    (folder / "revision").write_text("abc123\n")  # an explicit revision wins
    assert resolve_model(str(folder))[1] == "abc123"


@pytest.mark.parametrize(
    ("header", "waits"), [("2", [2.0]), ("7200", [60.0]), ("Wed, 21 Oct 2026 07:28:00 GMT", [0.01])]
)
def test_a_busy_server_is_waited_for_as_long_as_it_asks_within_a_minute(monkeypatch, header, waits):
    import xmcbench.judge.openai_judge as openai_judge

    slept = []
    monkeypatch.setattr(openai_judge.time, "sleep", slept.append)  # the waits asked for, without waiting
    with JudgeServer(_score, mode="busy", fail_first=1, retry_after=header) as srv:
        j = OpenAIJudge(srv.base_url, "m", concurrency=1, retries=2, backoff_s=0.01)
        assert j.p_yes(["usb"], ["l"], PROMPT)[0] == pytest.approx(0.8)
    assert slept == waits  # a date or nonsense falls back to the plain backoff
