"""A run of texts already encoded as utf-8: one byte string plus the byte length of each text.

Readers that parse raw files at the byte level (``lf_json_columns``) hand their texts to
``prepare`` in this form, so millions of texts never become Python ``str`` objects only to be
encoded back into the cache's blob. ``from_strings`` is the one place where decoded texts are
encoded, so both paths give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class EncodedTexts:
    data: bytes  # the texts' utf-8 bytes back to back
    lengths: np.ndarray  # (n,) int64 byte length of each text

    @classmethod
    def from_strings(cls, texts: list[str]) -> EncodedTexts:
        # "replace": a lone surrogate (accepted by the json fallback) becomes '?' instead of failing
        encoded = [t.encode("utf-8", "replace") for t in texts]
        return cls(b"".join(encoded), np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))

    def __len__(self) -> int:
        return len(self.lengths)

    def to_list(self) -> list[str]:
        ends = np.cumsum(self.lengths).tolist()
        starts = [0, *ends[:-1]]
        return [self.data[a:b].decode("utf-8") for a, b in zip(starts, ends)]
