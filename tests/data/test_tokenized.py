"""The tokenisation cache against direct tokenizer output, its reuse and its invalidation."""

from __future__ import annotations

import os

import numpy as np
import pytest

from xmcbench import paths
from xmcbench.data import tokenized
from xmcbench.data.tokenized import TokenCache, texts_fingerprint
from xmcbench.errors import XmcbenchError

TEXTS = [
    "Harry Potter and the Philosopher's Stone",
    "",
    "a",
    "Über-naïve café crème brûlée — “quoted” text with emoji 🙂 and 日本語",
    "a very long title " * 20,
    "USB-C cable, 2 m (6.6 ft), braided",
    "   leading and trailing spaces   ",
    "Mixed CASE and numbers 12345 67.89",
] * 3 + [f"product number {i}" for i in range(40)]


@pytest.fixture(scope="module")
def tokenizer():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    from xmcbench.encoders import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))


def _direct(tokenizer, texts, max_length):
    return tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")


@pytest.mark.parametrize("max_length", [8, 32])
def test_batches_equal_direct_tokenizer_output(tokenizer, max_length):
    cache = TokenCache.build_or_load(
        TEXTS, tokenizer, max_length, ("synth", "train", "title"), progress=False, chunk_size=7
    )
    assert cache.was_built and len(cache) == len(TEXTS)
    assert cache.input_ids.shape == (len(TEXTS), max_length) and cache.input_ids.dtype == np.int32
    rng = np.random.default_rng(0)
    for idx in [np.arange(len(TEXTS)), np.array([1]), np.array([2, 1]), rng.choice(len(TEXTS), 9, replace=False)]:
        got = cache.batch(idx)
        want = _direct(tokenizer, [TEXTS[i] for i in idx], max_length)
        assert got["input_ids"].dtype == want["input_ids"].dtype
        assert got["input_ids"].tolist() == want["input_ids"].tolist()
        assert got["attention_mask"].tolist() == want["attention_mask"].tolist()
    assert cache.path.is_relative_to(paths.cache_dir() / "tokens")


def test_second_call_reuses_the_cache(tokenizer, monkeypatch):
    first = TokenCache.build_or_load(TEXTS, tokenizer, 16, ("synth", "train", "title"), progress=False)

    def no_tokenising(*args, **kwargs):
        raise AssertionError("the cache was rebuilt")

    monkeypatch.setattr(tokenized, "_tokenize_chunk", no_tokenising)
    second = TokenCache.build_or_load(list(TEXTS), tokenizer, 16, ("synth", "train", "title"), progress=False)
    assert not second.was_built and second.path == first.path
    np.testing.assert_array_equal(second.input_ids, first.input_ids)


def test_max_length_texts_and_version_change_the_key(tokenizer):
    key = ("synth", "train", "title")
    a = TokenCache.build_or_load(TEXTS, tokenizer, 16, key, progress=False)
    b = TokenCache.build_or_load(TEXTS, tokenizer, 24, key, progress=False)
    assert b.was_built and b.path != a.path
    changed = list(TEXTS)
    changed[30] = "a different middle text"
    c = TokenCache.build_or_load(changed, tokenizer, 16, key, progress=False)
    assert c.was_built and c.path != a.path
    assert c.batch([30])["input_ids"].tolist() == _direct(tokenizer, [changed[30]], 16)["input_ids"].tolist()
    v1 = TokenCache.build_or_load(TEXTS, tokenizer, 16, key, version="v1", progress=False)
    v1_again = TokenCache.build_or_load(TEXTS, tokenizer, 16, key, version="v1", progress=False)
    v2 = TokenCache.build_or_load(TEXTS, tokenizer, 16, key, version="v2", progress=False)
    assert v1.was_built and not v1_again.was_built and v2.was_built and len({a.path, v1.path, v2.path}) == 3


def test_texts_fingerprint_sees_every_text_and_boundaries():
    assert texts_fingerprint(["ab", "c"]) != texts_fingerprint(["a", "bc"])
    assert texts_fingerprint(["x"] * 100) != texts_fingerprint(["x"] * 99 + ["y"])
    assert texts_fingerprint(["a"], version="1") != texts_fingerprint(["a"], version="2")


def test_interrupted_build_leaves_nothing(tokenizer, monkeypatch, tmp_path):
    calls = {"n": 0}
    real = tokenized._tokenize_chunk

    def fail_on_second_chunk(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(tokenized, "_tokenize_chunk", fail_on_second_chunk)
    root = tmp_path / "tokens"
    with pytest.raises(KeyboardInterrupt):
        TokenCache.build_or_load(TEXTS, tokenizer, 16, "col", root=root, chunk_size=10, progress=False)
    assert list((root / "col").iterdir()) == []
    monkeypatch.setattr(tokenized, "_tokenize_chunk", real)
    cache = TokenCache.build_or_load(TEXTS, tokenizer, 16, "col", root=root, chunk_size=10, progress=False)
    assert cache.was_built


def test_bad_arguments_are_errors(tokenizer):
    with pytest.raises(XmcbenchError, match="max_length"):
        TokenCache.build_or_load(TEXTS, tokenizer, 0, "col", progress=False)
    with pytest.raises(XmcbenchError, match="empty"):
        TokenCache.build_or_load([], tokenizer, 8, "col", progress=False)
