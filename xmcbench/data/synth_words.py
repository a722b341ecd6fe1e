"""Pseudo-words for the synthetic datasets: distinct, pronounceable, seeded.

Both generators use them: ``synth`` for its whole vocabulary, ``synth_english`` for the made-up
label aliases that no pre-trained encoder can know.
"""

from __future__ import annotations

import numpy as np

_ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "z",
    "br",
    "ch",
    "cl",
    "dr",
    "fl",
    "gr",
    "pl",
    "pr",
    "sh",
    "st",
    "th",
    "tr",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y"]
_SYLLABLES = np.array([o + v for o in _ONSETS for v in _VOWELS])  # 300, none ambiguous


def make_words(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct pronounceable words (object array), shorter ones first.

    Id k maps to a syllable string through a seeded affine bijection inside each length bucket
    (2, 3, 4... syllables), so words are distinct without a set and vary with the seed.
    """
    s = len(_SYLLABLES)
    syllables = _SYLLABLES[rng.permutation(s)]
    out = np.empty(n, dtype=object)
    start, length = 0, 2
    while start < n:
        bucket = s**length
        count = min(n - start, bucket)
        a = int(rng.integers(1, 1 << 20)) * 30 + 7  # coprime with 2, 3, 5: a bijection mod s**length
        b = int(rng.integers(0, bucket))
        code = (a * np.arange(count, dtype=np.int64) + b) % bucket
        words = np.full(count, "", dtype=object)
        for _ in range(length):
            words = words + syllables[code % s].astype(object)
            code //= s
        out[start : start + count] = words
        start += count
        length += 1
    return out
