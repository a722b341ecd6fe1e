"""The longest text of a column in tokens, capped at ``max_length``: what a batch padded to its
longest text (``padding=True``, as xmcbench's and the authors' loaders do) is at its widest.

``xmcbench plan`` sizes activations with it: a step's memory follows its widest batch, and over an
epoch every text is in some batch, so the peak is set by the longest text of the dataset.

Tokenising millions of texts to find one maximum is avoided with a per-text bound ``u`` on its tokens
(less the specials and one), read from the tokenizer's own config:

* WordPiece behind a BERT-style pre-tokenizer (BERT, DistilBERT, MiniLM, MPNet, E5): every token
  covers at least one character of the normalized text, so ``u`` is its utf-8 length;
* any other model (byte-level BPE, SentencePiece): 3 x that length (a Metaspace "▁" of 3 bytes may
  stand for a 1-byte space and fall back to 3 byte tokens; a word-start piece may open each segment
  between added tokens);
* normalizers that can lengthen text (NFKC: "½" -> "1⁄2", "ﷺ" -> 18 letters; NFC/NFD; Lowercase;
  BertNormalizer in front of a byte-level model; Replace, Prepend, precompiled maps) are applied to
  every text first;
* a Python tokenizer, or a template that repeats the text, has no bound: every text is tokenised.

Texts are tokenised in decreasing ``u`` and the scan stops once no remaining text could beat the
longest found, or the cap is reached. Batches grow from 64 texts, so a long-text column stops after
tokenising its 64 longest; a titles column after the few texts longer than the cap.
"""

from __future__ import annotations

import json
import unicodedata

import numpy as np

from xmcbench import fsutil
from xmcbench.errors import XmcbenchError
from xmcbench.progress import task

__all__ = ["generous_byte_lengths", "longest_prepared", "longest_tokenized"]

CACHE_NAME = "token_lengths.json"  # in the prepared dataset's folder: a new prepare starts it afresh

FIRST_BATCH, LAST_BATCH = 64, 65536
CHUNK = 65536  # texts decoded at once when a length needs the text itself


def longest_tokenized(texts, tokenizer, cap: int, progress: bool = False, what: str = "texts") -> int:
    """Tokens in the longest of ``texts`` (a ``TextColumn``) with its special tokens, at most ``cap``.

    ``tokenizer`` is a ``transformers`` tokenizer; the result equals
    ``max(len(tokenizer(t, truncation=True, max_length=cap)["input_ids"]) for t in texts)``.
    ``progress``: a bar over the texts (the scan usually stops well before the end).
    """
    specials = int(tokenizer.num_special_tokens_to_add(pair=False))
    if cap <= specials:  # the tokenizer would not truncate at all: no length it could pad to is known
        raise XmcbenchError(
            f"max_length {cap} leaves no room for text next to the tokenizer's {specials} special tokens; "
            f"use a max_length above {specials}"
        )
    if len(texts) == 0:
        return 0
    bound = _bytes_bounding_tokens(texts, tokenizer)  # None: no bound known, every text is tokenised
    order = np.arange(len(texts)) if bound is None else np.argsort(-bound, kind="stable")  # longest first
    longest_of = _longest_of(tokenizer, cap)
    best, start, size = 0, 0, FIRST_BATCH
    with task(f"longest {what} in tokens", len(order), enabled=progress) as advance:
        while start < len(order):
            idx = order[start : start + size]
            if bound is not None and int(bound[idx[0]]) + specials + 1 <= best:  # none left can be longer
                break
            best = max(best, longest_of(texts[idx]))
            advance(len(idx))
            if best >= cap:
                break
            start, size = start + size, min(2 * size, LAST_BATCH)
    return min(best, cap)


def generous_byte_lengths(texts) -> np.ndarray:
    """Per text, utf-8 bytes of its longest form under the normalizations tokenizers apply (as is,
    NFKC, NFKD, lowercased): a bound on its tokens (less the specials and one) for a tokenizer that
    cannot be read here. ASCII texts are their own bound."""

    def longest_form(text: str) -> int:
        if text.isascii():
            return 0
        return max(len(unicodedata.normalize(form, text).lower().encode("utf-8")) for form in ("NFKC", "NFKD"))

    return _lengths_after(texts, longest_form)


def _lengths_after(texts, normalized_bytes) -> np.ndarray:
    """Per text, the larger of its utf-8 length and ``normalized_bytes(text)``."""
    raw = np.asarray(texts.byte_lengths())
    out = raw.copy()
    for start in range(0, len(texts), CHUNK):
        for i, text in enumerate(texts[start : start + CHUNK], start):
            out[i] = max(int(raw[i]), normalized_bytes(text))
    return out


def longest_prepared(dataset, column: str, tokenizer, cap: int, progress: bool = False) -> int:
    """``longest_tokenized`` of a prepared dataset's ``column`` ("train" queries or "labels"),
    remembered in the dataset's folder by the prepared data's version, tokenizer and cap (tens of
    seconds for a million texts that are all shorter than the cap). The memo is written only while
    the folder still holds the data measured; one that cannot be written is only lost."""
    from xmcbench.data.tokenized import tokenizer_fingerprint

    texts = dataset.label_texts() if column == "labels" else dataset.query_texts(column)
    stamp = f"{dataset.version}:{dataset.meta.get('prepared_at', '')}"
    key = f"{column}:{cap}:{tokenizer_fingerprint(tokenizer)}"
    path = dataset.path / CACHE_NAME
    memo = _read_json(path)
    if memo.get("prepared") != stamp:  # another preparation of the data: nothing in it holds
        memo = {"prepared": stamp}
    if isinstance(memo.get(key), int):
        return memo[key]
    longest = longest_tokenized(texts, tokenizer, cap, progress=progress, what=f"{dataset.name} {column} texts")
    # Measuring can take a while: a dataset prepared again meanwhile must not get this figure.
    if _read_json(dataset.path / "meta.json") == dataset.meta:
        try:
            fsutil.write_json(path, {**memo, key: longest})
        except OSError:
            pass
    return longest


def _read_json(path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# A WordPiece model splits normalized text on whitespace and punctuation into pieces of at least one
# character each: tokens <= bytes. BertNormalizer qualifies only in front of WordPiece (checked over
# every code point and flag setting): for byte-level models its Chinese-character spacing, NFD accent
# stripping and lowercasing add bytes that become tokens.
_WORDPIECE_PRE = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits"}
_KEEPS_LENGTH = {"Strip", "StripAccents"}
# Other models: a Metaspace "▁" (3 bytes) may replace a 1-byte space and fall back to 3 byte tokens,
# and a word-start piece may be added to each segment between added tokens: at most 3 tokens a byte.
OTHER_TOKENS_PER_BYTE = 3


def _types(node: dict | None, key: str) -> list[str]:
    """The component types of a normalizer / pre-tokenizer config, through Sequences."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [t for child in node.get(key, []) for t in _types(child, key)]
    return [node.get("type", "")]


def _text_repeats(processor: dict | None) -> bool:
    """Whether the post-processor emits the text more than once (a template with $A twice)."""
    if not processor:
        return False
    if processor.get("type") == "Sequence":
        return any(_text_repeats(p) for p in processor.get("processors", []))
    single = processor.get("single", []) if processor.get("type") == "TemplateProcessing" else []
    return sum(1 for item in single if "Sequence" in item) > 1


def _bytes_bounding_tokens(texts, tokenizer) -> np.ndarray | None:
    """Per text, a number its tokens cannot exceed (less the specials and one), or None when no bound
    is known and every text must be tokenised (a Python tokenizer; a template repeating the text).

    WordPiece behind a BERT-style pre-tokenizer: the text's utf-8 bytes (after its normalizer when
    that is not BertNormalizer, Strip or StripAccents). Any other model: 3 x the normalized bytes."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    config = json.loads(backend.to_str())
    if _text_repeats(config.get("post_processor")):
        return None
    wordpiece = (config.get("model") or {}).get("type") == "WordPiece" and set(
        _types(config.get("pre_tokenizer"), "pretokenizers")
    ) <= _WORDPIECE_PRE
    safe = _KEEPS_LENGTH | ({"BertNormalizer"} if wordpiece else set())
    if set(_types(config.get("normalizer"), "normalizers")) <= safe:
        out = np.asarray(texts.byte_lengths())
    else:
        normalize = backend.normalizer.normalize_str
        out = _lengths_after(texts, lambda text: len(normalize(text).encode("utf-8")))
    return out if wordpiece else OTHER_TOKENS_PER_BYTE * out


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
