"""A deterministic judge for plumbing tests: P(yes) from word overlap, no model.

    P(yes) = 0.2 + 0.6 * |words(label) ∩ words(doc)| / |words(label)|   (plus a tiny hash jitter)

Same inputs, same answer, in any process; fast enough for any test. Not a model of anything:
use it to test caching, the method's loop and the CLI, never to measure quality.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence

import numpy as np

from xmcbench.judge.base import JudgeStats, Prompt

_WORD = re.compile(r"[a-z0-9]+")


class FakeJudge:
    backend = "fake"

    def __init__(self, model: str = "word-overlap", max_doc_chars: int = 2000):
        self.model_id = f"fake/{model}"
        self.revision = "1"
        self.max_doc_chars = max_doc_chars
        self.answer_settings = f"max_doc_chars={max_doc_chars}"  # part of the judgement cache's key
        self.stats = JudgeStats(backend=self.backend, model_id=self.model_id, revision=self.revision)

    def p_yes(self, docs: Sequence[str], label_texts: Sequence[str], prompt: Prompt) -> np.ndarray:
        start = time.perf_counter()
        out = np.empty(len(docs), dtype=np.float64)
        for i, (doc, label) in enumerate(zip(docs, label_texts, strict=False)):
            if len(doc) > self.max_doc_chars:
                doc = doc[: self.max_doc_chars]
                self.stats.truncated += 1
            prompt.render(doc, label)  # the template is checked even here
            label_words = set(_WORD.findall(label.lower()))
            overlap = len(label_words & set(_WORD.findall(doc.lower()))) / max(1, len(label_words))
            jitter = int.from_bytes(hashlib.sha256(f"{doc}\0{label}".encode()).digest()[:2], "big") / 65535 * 1e-3
            out[i] = 0.2 + 0.6 * overlap + jitter
        self.stats.asked += len(out)
        self.stats.llm_seconds += time.perf_counter() - start
        return out
