"""The longest text of a column in tokens, capped at ``max_length``: what a batch padded to its
longest text (``padding=True``, as xmcbench's and the authors' loaders do) is at its widest.

``xmcbench plan`` sizes activations with it: a step's memory follows its widest batch, and over an
epoch every text is in some batch, so the peak is set by the longest text of the dataset.

Tokenising millions of texts to find one maximum is avoided: a text of ``b`` utf-8 bytes has at most
``b + specials + 1`` tokens (every WordPiece, byte-level BPE or byte-fallback SentencePiece token
covers at least one byte; SentencePiece may add one bare word-start piece), so texts are tokenised
longest-first and the scan stops once no shorter text could beat the longest found, or the cap is
reached. Batches grow from 64 texts, so a long-text column stops after tokenising its 64 longest;
a titles column after the few texts longer than the cap.
"""

from __future__ import annotations

import json

import numpy as np

from xmcbench import fsutil
from xmcbench.progress import task

__all__ = ["byte_bound", "longest_prepared", "longest_tokenized"]

CACHE_NAME = "token_lengths.json"  # in the prepared dataset's folder: a new prepare starts it afresh

FIRST_BATCH, LAST_BATCH = 64, 65536


def byte_bound(byte_lengths: np.ndarray, specials: int, cap: int) -> int:
    """An upper bound on the longest text's token count from its utf-8 length alone (no tokenizer)."""
    longest = int(byte_lengths.max()) if len(byte_lengths) else 0
    return min(cap, longest + specials + 1)


def longest_tokenized(texts, tokenizer, cap: int, progress: bool = False, what: str = "texts") -> int:
    """Tokens in the longest of ``texts`` (a ``TextColumn``) with its special tokens, at most ``cap``.

    ``tokenizer`` is a ``transformers`` tokenizer; the result equals
    ``max(len(tokenizer(t, truncation=True, max_length=cap)["input_ids"]) for t in texts)``.
    ``progress``: a bar over the texts (the scan usually stops well before the end).
    """
    byte_lengths = np.asarray(texts.byte_lengths())
    if len(byte_lengths) == 0:
        return 0
    specials = int(tokenizer.num_special_tokens_to_add(pair=False))
    longest_of = _longest_of(tokenizer, cap)
    order = np.argsort(-byte_lengths, kind="stable")  # longest first
    best, start, size = 0, 0, FIRST_BATCH
    with task(f"longest {what} in tokens", len(order), enabled=progress) as advance:
        while start < len(order):
            idx = order[start : start + size]
            if int(byte_lengths[idx[0]]) + specials + 1 <= best:  # no text from here on can be longer
                break
            best = max(best, longest_of(texts[idx]))
            advance(len(idx))
            if best >= cap:
                break
            start, size = start + size, min(2 * size, LAST_BATCH)
    return min(best, cap)


def longest_prepared(dataset, column: str, tokenizer, cap: int, progress: bool = False) -> int:
    """``longest_tokenized`` of a prepared dataset's ``column`` ("train" queries or "labels"),
    remembered in the dataset's folder by tokenizer and cap (tens of seconds for a million texts
    that are all shorter than the cap). A folder that cannot be written only loses the memo."""
    from xmcbench.data.tokenized import tokenizer_fingerprint

    texts = dataset.label_texts() if column == "labels" else dataset.query_texts(column)
    key = f"{column}:{cap}:{tokenizer_fingerprint(tokenizer)}"
    path = dataset.path / CACHE_NAME
    try:
        memo = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    if isinstance(memo.get(key), int):
        return memo[key]
    longest = longest_tokenized(texts, tokenizer, cap, progress=progress, what=f"{dataset.name} {column} texts")
    try:
        fsutil.write_json(path, {**memo, key: longest})
    except OSError:
        pass
    return longest


def _longest_of(tokenizer, cap: int):
    """A function: a batch of texts -> its longest in tokens. A fast tokenizer's Rust backend counts
    3x faster than ``tokenizer(...)``, which turns every id into a Python int."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow (Python) tokenizer

        def longest(batch: list[str]) -> int:
            return max(len(ids) for ids in tokenizer(batch, truncation=True, max_length=cap)["input_ids"])

        return longest
    from tokenizers import Tokenizer

    counter = Tokenizer.from_str(backend.to_str())  # a copy: its truncation must not reach the caller's
    counter.no_padding()
    counter.enable_truncation(cap)
    return lambda batch: max(len(encoding) for encoding in counter.encode_batch(batch))
