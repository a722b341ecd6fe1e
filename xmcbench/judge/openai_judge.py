"""Any OpenAI-compatible chat server as judge (vLLM, llama.cpp's server, TGI), by base URL and model.

Each pair is one ``POST {base_url}/chat/completions`` asking for one token at temperature 0 with
``logprobs: true, top_logprobs: 20``. P(yes) comes from the returned top log-probabilities (the
yes / no variants' mass, renormalised) where the server gives them; otherwise from the answer
text (yes -> 1.0, no -> 0.0). An answer that is neither, with no yes/no in its top tokens, is
an error, never a guess.

Requests run ``concurrency`` at a time; a connection error, a timeout, HTTP 429 or 5xx is
retried ``retries`` times with exponential backoff (``backoff_s`` doubling); other HTTP errors
and a server that stays unreachable raise ``JudgeError``. Standard library only.
Documents longer than ``max_doc_chars`` are cut (the question is kept whole) and counted.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from xmcbench.judge.base import JudgeError, JudgeStats, Prompt, answer_word, yes_no_mass

log = logging.getLogger(__name__)

_RETRYABLE_HTTP = {408, 429, 500, 502, 503, 504}


class OpenAIJudge:
    backend = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        concurrency: int = 4,
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_doc_chars: int = 3000,
        revision: str = "",
    ):
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.revision = revision or self.base_url
        self.api_key = api_key
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_doc_chars = max_doc_chars
        self.stats = JudgeStats(backend=self.backend, model_id=model, revision=self.revision)
        self._lock = threading.Lock()

    def _post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/chat/completions"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                with self._lock:
                    self.stats.retries += 1
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code} {exc.reason}"
                if exc.code not in _RETRYABLE_HTTP:
                    detail = exc.read()[:300].decode(errors="replace")
                    raise JudgeError(f"judge server {url} answered {last}: {detail}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError, OSError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        raise JudgeError(
            f"judge server {url} failed {self.retries + 1} times (last: {last}); is it running, "
            f"and is the base URL right (it usually ends in /v1)?"
        )

    def _one(self, text: str) -> float:
        body = {
            "model": self.model_id,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 20,
        }
        reply = self._post(body)
        try:
            choice = reply["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise JudgeError(f"judge server reply has no choices: {str(reply)[:200]}") from None
        content = ((choice.get("logprobs") or {}).get("content")) or []
        if content and content[0].get("top_logprobs"):
            mass = {"yes": 0.0, "no": 0.0}
            for item in content[0]["top_logprobs"]:
                word = answer_word(item.get("token", ""))
                if word:
                    mass[word] += math.exp(item["logprob"])
            if mass["yes"] + mass["no"] > 0:
                return yes_no_mass(mass["yes"], mass["no"])
        answer = (choice.get("message") or {}).get("content") or ""
        word = answer_word(answer.split()[0] if answer.split() else "")
        if word is None:
            raise JudgeError(
                f"judge {self.model_id!r} answered {answer[:40]!r}, neither yes nor no, and gave no "
                "yes/no among its top log-probabilities"
            )
        return 1.0 if word == "yes" else 0.0

    def p_yes(self, docs: Sequence[str], label_texts: Sequence[str], prompt: Prompt) -> np.ndarray:
        start = time.perf_counter()
        texts = []
        for doc, label in zip(docs, label_texts, strict=False):
            if len(doc) > self.max_doc_chars:
                doc = doc[: self.max_doc_chars]
                self.stats.truncated += 1
            texts.append(prompt.render(doc, label))
        with ThreadPoolExecutor(self.concurrency) as pool:
            out = np.fromiter(pool.map(self._one, texts), dtype=np.float64, count=len(texts))
        self.stats.asked += len(texts)
        self.stats.llm_seconds += time.perf_counter() - start
        return out
