"""Tokenisation cache: texts tokenised once per (tokenizer, max length) into memory-mapped arrays.

Tokenising millions of texts every epoch (or every run) costs more than many training steps, so
each text column is tokenised once and kept under ``cache_dir()/tokens``::

    tokens/<dataset>-<split>-<field>/len<max_length>-<digest>/
        input_ids.npy   (N, max_length) int32, right-padded with the tokenizer's pad id
        lengths.npy     (N,) int32 tokens per text (special tokens included)
        meta.json       what the digest was computed from

The digest covers the tokenizer's content (its serialised vocabulary, normaliser and
post-processor, not its name or folder), the max length and the texts: either the caller's
version of them (a prepared dataset's ``version``) plus their count, or, without one, a hash of
every text. Any change gives a new folder; old folders are never reused by mistake. A cache is
built in chunks into a temporary folder and renamed into place, so an interrupted build leaves
nothing that could be loaded.

``TokenCache.batch(indices)`` gives exactly what ``tokenizer(texts, padding=True,
truncation=True, max_length=...)`` would: ``input_ids`` and ``attention_mask`` trimmed to the
batch's longest text.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xmcbench import fsutil, paths
from xmcbench.errors import XmcbenchError
from xmcbench.progress import task

__all__ = ["TokenCache", "texts_fingerprint", "tokenizer_fingerprint"]

FORMAT_VERSION = 1
# Keys of a fast tokenizer's serialisation that change with call arguments, not with content.
_CALL_STATE_KEYS = ("truncation", "padding")


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of what decides a tokenizer's output: its vocabulary and processing pipeline."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        for key in _CALL_STATE_KEYS:
            state.pop(key, None)
        h.update(json.dumps(state, sort_keys=True).encode("utf-8"))
    else:  # a slow (Python) tokenizer: its vocabulary and settings
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode("utf-8"))
        h.update(repr(sorted((k, str(v)) for k, v in tokenizer.init_kwargs.items())).encode("utf-8"))
    h.update(json.dumps(sorted((k, str(v)) for k, v in tokenizer.special_tokens_map.items())).encode("utf-8"))
    return h.hexdigest()


def texts_fingerprint(texts: Sequence[str], version: str | None = None, chunk: int = 65536) -> str:
    """sha256 of the count and ``version`` when given, else of the count and every text."""
    n = len(texts)
    h = hashlib.sha256(f"n={n}".encode())
    if version is not None:
        h.update(f"version={version}".encode())
        return h.hexdigest()
    for start in range(0, n, chunk):
        for text in texts[start : start + chunk]:
            data = text.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))  # length prefix: texts cannot run into each other
            h.update(data)
    return h.hexdigest()


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(part)).strip("_") or "_"


class TokenCache:
    """A built cache opened read-only: ``input_ids`` (N, T) int32 and ``lengths`` (N,) int32 memmaps."""

    def __init__(self, path: Path, was_built: bool = False):
        self.path = Path(path)
        self.meta: dict = json.loads((self.path / "meta.json").read_text())
        self.input_ids: np.ndarray = np.load(self.path / "input_ids.npy", mmap_mode="r")
        self.lengths: np.ndarray = np.load(self.path / "lengths.npy", mmap_mode="r")
        self.max_length: int = int(self.meta["max_length"])
        self.pad_token_id: int = int(self.meta["pad_token_id"])
        self.was_built = was_built  # True when this call tokenised the texts

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def __repr__(self) -> str:
        return f"TokenCache({str(self.path)!r}, n={len(self)}, max_length={self.max_length})"

    def batch(self, indices: np.ndarray | Sequence[int]) -> dict[str, torch.Tensor]:
        """``input_ids`` and ``attention_mask`` (b, t) int64 for the texts ``indices``.

        t is the longest text of the batch, as with ``tokenizer(..., padding=True)``.
        """
        idx = np.asarray(indices, dtype=np.int64).ravel()
        lengths = np.asarray(self.lengths[idx], dtype=np.int64)  # (b,)
        t = int(lengths.max(initial=0))
        ids = np.asarray(self.input_ids[idx, :t], dtype=np.int64)  # (b, t)
        mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int64)  # (b, t)
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}

    @classmethod
    def build_or_load(
        cls,
        texts: Sequence[str],
        tokenizer: Any,
        max_length: int,
        key: Sequence[str] | str,
        *,
        root: str | Path | None = None,
        version: str | None = None,
        chunk_size: int = 8192,
        progress: bool = True,
    ) -> TokenCache:
        """Open the cache of ``texts`` for (``tokenizer``, ``max_length``), building it if needed.

        Args:
            texts: the texts (a list, or a memory-mapped ``TextColumn``).
            tokenizer: a Hugging Face tokenizer (e.g. ``TextEncoder(...).tokenizer``).
            max_length: texts are truncated to this many tokens, special tokens included.
            key: names of the column, e.g. ``("LF-AmazonTitles-131K", "train", "text")``.
            root: cache root (default ``cache_dir()/"tokens"``).
            version: a fingerprint of the texts when the caller has one (``PreparedDataset.version``);
                saves hashing every text. Without it every text is hashed.
            chunk_size: texts tokenised per call.
        """
        if max_length < 1:
            raise XmcbenchError(f"max_length must be >= 1 token; got {max_length}")
        if len(texts) == 0:
            raise XmcbenchError(f"nothing to tokenise for {key!r}: the text column is empty")
        if tokenizer.pad_token_id is None:
            raise XmcbenchError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no pad token; set one "
                "(tokenizer.pad_token = tokenizer.eos_token) before caching its tokens"
            )
        parts = [key] if isinstance(key, str) else list(key)
        root = Path(root) if root is not None else paths.cache_dir() / "tokens"
        meta = {
            "format": FORMAT_VERSION,
            "key": parts,
            "tokenizer": getattr(tokenizer, "name_or_path", type(tokenizer).__name__),
            "tokenizer_sha256": tokenizer_fingerprint(tokenizer),
            "max_length": int(max_length),
            "texts_sha256": texts_fingerprint(texts, version),
            "texts_version": version,
            "n": len(texts),
            "pad_token_id": int(tokenizer.pad_token_id),
        }
        digest = hashlib.sha256(
            json.dumps({k: meta[k] for k in ("format", "tokenizer_sha256", "max_length", "texts_sha256")}).encode()
        ).hexdigest()[:16]
        folder = root / "-".join(_safe(p) for p in parts) / f"len{int(max_length)}-{digest}"
        if cls._is_complete(folder, meta):
            return cls(folder)
        if folder.exists():  # left by an older, incompatible or damaged build
            shutil.rmtree(folder)
        cls._build(folder, texts, tokenizer, meta, chunk_size, progress)
        return cls(folder, was_built=True)

    @staticmethod
    def _is_complete(folder: Path, meta: dict) -> bool:
        try:
            saved = json.loads((folder / "meta.json").read_text())
        except (OSError, ValueError):
            return False
        same = all(saved.get(k) == meta[k] for k in ("format", "tokenizer_sha256", "max_length", "texts_sha256", "n"))
        return same and (folder / "input_ids.npy").is_file() and (folder / "lengths.npy").is_file()

    @staticmethod
    def _build(folder: Path, texts: Sequence[str], tokenizer: Any, meta: dict, chunk_size: int, progress: bool) -> None:
        n, t = int(meta["n"]), int(meta["max_length"])
        folder.parent.mkdir(parents=True, exist_ok=True)
        fsutil.remove_stale_temps(folder.parent)  # builds a killed process left behind
        tmp = fsutil.temp_path(folder)  # its name carries our pid
        tmp.mkdir()
        try:
            ids = np.lib.format.open_memmap(tmp / "input_ids.npy", mode="w+", dtype=np.int32, shape=(n, t))
            lengths = np.lib.format.open_memmap(tmp / "lengths.npy", mode="w+", dtype=np.int32, shape=(n,))
            with task(f"tokenise {'/'.join(meta['key'])}", n, enabled=progress) as advance:
                for start in range(0, n, chunk_size):
                    chunk = list(texts[start : start + chunk_size])
                    ids[start : start + len(chunk)], lengths[start : start + len(chunk)] = _tokenize_chunk(
                        chunk, tokenizer, t, meta["pad_token_id"]
                    )
                    advance(len(chunk))
            ids.flush()
            lengths.flush()
            del ids, lengths
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            try:
                os.replace(tmp, folder)
            except OSError:
                # Another process installed the same cache first; theirs is as good as ours.
                if not TokenCache._is_complete(folder, meta):
                    raise
                shutil.rmtree(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _tokenize_chunk(texts: list[str], tokenizer: Any, max_length: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(len(texts), max_length) int32 right-padded ids and (len(texts),) int32 lengths."""
    encoded = tokenizer(
        texts,
        truncation=True,
        max_length=max_length,
        padding=False,
        return_attention_mask=False,
        return_token_type_ids=False,
    )["input_ids"]
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    flat = np.fromiter((tok for e in encoded for tok in e), dtype=np.int64, count=int(lengths.sum()))
    out = np.full((len(texts), max_length), pad_id, dtype=np.int32)
    rows = np.repeat(np.arange(len(texts)), lengths)
    cols = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, cols] = flat
    return out, lengths.astype(np.int32)
