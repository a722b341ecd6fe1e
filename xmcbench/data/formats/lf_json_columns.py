"""A vectorised reader for blocks of LF JSON lines in the XC repository's layout, for ``prepare``.

Parsing each record into a dict (orjson) and pulling the columns back out costs several times
the decompression of the file at LF-AmazonTitles-1.3M's size; most of it is building and freeing
Python objects. The XC files are regular: every line is one flat object with the same keys in
the same order (``{"uid": .., "title": .., "content": .., "target_ind": [..], "target_rel": [..]}``,
compact or with ``json.dumps``'s spaces). ``parse_block`` checks that a whole block has that
shape with numpy passes over its bytes and cuts the columns straight out of the buffer:

- the layout (keys, order, string or list values) is taken from the block's first line;
- unescaped quotes are found (a quote after an odd run of backslashes is inside a string) and
  every line must hold exactly the layout's strings, keys byte-equal, separators ``:``/``: ``
  and ``,``/``, ``, braces at both ends; list values must be lists of JSON numbers (integers
  without leading zeros for ``target_ind``; plain decimals for ``target_rel``);
- texts without a backslash or ``&`` are copied as bytes (they are their own utf-8 encoding);
  the few others are decoded one by one exactly as the general reader does (JSON string, then
  ``html.unescape`` for texts, never for uids) and spliced in.

Anything it cannot prove to be in this shape (another layout, nulls, odd whitespace, control
bytes, invalid utf-8, exponents, a label index out of range...) makes it return None, and the
caller parses the block with the general reader, which also gives the error messages. The
output is therefore the same bytes either way (``tests/data/test_lf_json_parse.py``).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass

import numpy as np

from xmcbench.data.text_blob import EncodedTexts

try:
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - exercised only where orjson is missing
    _loads = json.loads

_QUOTE, _BACKSLASH, _AMP = 34, 92, 38
_LIST_KEYS = {"target_ind": "int", "target_rel": "number"}
_PAD = b"\x00" * 8  # reads a few bytes past a line's end never leave the array (and never match)
_POW10 = 10 ** np.arange(19, dtype=np.int64)


@dataclass
class ColumnBlock:
    """The columns of one block of records: composed texts, uids, label counts and indices."""

    texts: EncodedTexts
    uids: EncodedTexts
    counts: np.ndarray | None  # (n,) int64
    indices: np.ndarray | None  # (sum of counts,) int32, record by record, as in the file


def parse_block(
    buffer: bytes, *, text: str = "title", targets: bool = True, n_labels: int | None = None
) -> ColumnBlock | None:
    """Columns of ``buffer`` (whole lines, no trailing newline), or None if it is not in the XC layout.

    ``text``: ``"title"`` or ``"title+content"`` (title and content joined by one space when both
    are non-empty, as ``compose_query_texts``). ``targets``: read ``target_ind`` (label indices,
    each checked to be below ``n_labels`` when given).
    """
    if not buffer or not buffer.isascii():
        try:  # the general reader refuses invalid utf-8: so must this one
            buffer.decode("utf-8")
        except UnicodeDecodeError:
            return None
    a = np.frombuffer(buffer + _PAD, dtype=np.uint8)
    size = len(buffer)
    control = np.flatnonzero(a[:size] < 32)
    if control.size and not (a[control] == 10).all():  # raw control bytes: invalid JSON, or '\r'
        return None
    starts = np.concatenate(([0], control + 1))  # first byte of each line
    ends = np.append(control, size)  # one past each line's last byte
    if (ends <= starts).any():  # a blank line
        return None
    layout = _layout(buffer[: ends[0]], text, targets)
    if layout is None:
        return None
    n, per_line = len(starts), 2 * sum(2 if kind == "str" else 1 for _, kind in layout)
    quotes = _unescaped_quotes(a, size)
    if quotes is None or quotes.size != n * per_line:
        return None
    q = quotes.reshape(n, per_line)
    if not ((q[:, 0] >= starts) & (q[:, -1] < ends)).all():  # each line holds exactly its own strings
        return None
    if not ((a[starts] == ord("{")) & (q[:, 0] == starts + 1) & (a[ends - 1] == ord("}"))).all():
        return None

    strings: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # key -> (open quote, close quote) per line
    regions: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # key -> (first byte, one past last) per line
    col = 0
    cursor = starts  # last byte of the previous value ('{' at first)
    for i, (key, kind) in enumerate(layout):
        k_open, k_close = q[:, col], q[:, col + 1]
        if i and not _separator(a, cursor, k_open, ord(",")):
            return None
        if not _key_is(a, k_open, k_close, key.encode()):
            return None
        if kind == "str":
            v_open, v_close = q[:, col + 2], q[:, col + 3]
            if not _separator(a, k_close, v_open, ord(":")):
                return None
            strings[key] = (v_open, v_close)
            cursor, col = v_close, col + 4
            continue
        colon_space = a[k_close + 2] == 32
        bracket = k_close + 2 + colon_space
        if not ((a[k_close + 1] == ord(":")) & (a[bracket] == ord("["))).all():
            return None
        col += 2
        if i + 1 < len(layout):  # '],' or '], ' before the next key
            nxt = q[:, col]
            comma = nxt - 1 - (a[nxt - 1] == 32)
            close = comma - 1
            if not ((a[comma] == ord(",")) & (a[close] == ord("]"))).all():
                return None
        else:
            close = ends - 2
            if not (a[close] == ord("]")).all():
                return None
        if not (close > bracket).all():
            return None
        regions[key] = (bracket + 1, close)
        cursor = close
    if not (cursor == ends - 2).all():  # the last value ends right before the closing brace
        return None

    counts = indices = None
    # lists that repeat one number (XC's target_rel: "1.0, 1.0, ...") are checked row-wise; the
    # others all at once, in file order, item by item
    keys = [k for k in regions if not (_LIST_KEYS[k] == "number" and _repeats_one_number(a, *regions[k]))]
    if keys:
        integers = np.array([_LIST_KEYS[k] == "int" for k in keys])
        parsed = _number_lists(
            a, np.stack([regions[k][0] for k in keys], 1), np.stack([regions[k][1] for k in keys], 1), integers
        )
        if parsed is None:
            return None
        if targets:
            if integers.sum() != 1:
                return None
            counts, values = parsed[0][:, keys.index("target_ind")], parsed[1]
            if values.size and n_labels is not None and values.max() >= n_labels:
                return None  # the general reader names the line and the label file
            indices = values.astype(np.int32)
    if targets and counts is None:
        return None

    # backslashes: every escape must be valid JSON (the general reader refuses the file otherwise)
    slashes = np.flatnonzero(a[:size] == _BACKSLASH) if b"\\" in buffer else np.empty(0, dtype=np.int64)
    if slashes.size and not _escapes_valid(a, slashes):
        return None
    amps = np.flatnonzero(a[:size] == _AMP) if b"&" in buffer else np.empty(0, dtype=np.int64)
    special = (slashes, amps)
    title = _field(buffer, a, strings.get("title"), n, special, unescape=True)
    if title is None:
        return None
    if text == "title+content":
        content = _field(buffer, a, strings.get("content"), n, special, unescape=True)
        if content is None:
            return None
        texts = _join_with_space(title, content)
    else:
        texts = title
    uids = _field(buffer, a, strings.get("uid"), n, special, unescape=False)
    if uids is None:
        return None
    return ColumnBlock(texts, uids, counts, indices)


# ----------------------------------------------------------------------------------------------


def _layout(first_line: bytes, text: str, targets: bool) -> list[tuple[str, str]] | None:
    """[(key, "str" | "list")] of the first record, or None when its shape is not handled here."""
    try:
        record = _loads(first_line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("title"), str):
        return None
    if targets and "target_ind" not in record:
        return None
    layout = []
    for key, value in record.items():
        if isinstance(value, str):
            layout.append((key, "str"))
        elif isinstance(value, list) and key in _LIST_KEYS:
            layout.append((key, "list"))
        else:
            return None
    return layout


def _unescaped_quotes(a: np.ndarray, size: int) -> np.ndarray | None:
    quotes = np.flatnonzero(a[:size] == _QUOTE)
    if not quotes.size or quotes[0] == 0:
        return None
    after_backslash = np.flatnonzero(a[quotes - 1] == _BACKSLASH)
    if not after_backslash.size:
        return quotes
    # a quote is escaped when the run of backslashes before it has odd length
    slashes = np.flatnonzero(a[:size] == _BACKSLASH)
    run_start = np.r_[True, np.diff(slashes) != 1]
    first_of_run = np.maximum.accumulate(np.where(run_start, np.arange(slashes.size), 0))
    last = np.searchsorted(slashes, quotes[after_backslash] - 1)
    escaped = (last - first_of_run[last] + 1) % 2 == 1
    return np.delete(quotes, after_backslash[escaped])


def _separator(a: np.ndarray, before: np.ndarray, after: np.ndarray, char: int) -> bool:
    """Whether exactly ``char`` or ``char`` + one space lies between positions ``before`` and ``after``."""
    gap = after - before
    return bool((((gap == 2) | ((gap == 3) & (a[before + 2] == 32))) & (a[before + 1] == char)).all())


def _key_is(a: np.ndarray, k_open: np.ndarray, k_close: np.ndarray, key: bytes) -> bool:
    """Whether every line's key between quotes ``k_open`` and ``k_close`` is ``key``, 8 bytes per compare."""
    if not (k_close - k_open - 1 == len(key)).all():
        return False
    words = _words(a)
    for start in range(0, len(key), 8):
        part = key[start : start + 8]
        mask = np.uint64((1 << (8 * len(part))) - 1)  # bytes past the key (a ':' or the padding) ignored
        if not ((words[k_open + 1 + start] & mask) == np.uint64(int.from_bytes(part, "little"))).all():
            return False
    return True


def _words(a: np.ndarray) -> np.ndarray:
    """``words[i]`` = the 8 bytes ``a[i : i + 8]`` as a little-endian integer (a view, no copy)."""
    return np.ndarray(shape=(a.size - 7,), dtype="<u8", buffer=a, strides=(1,))


def _gather(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The bytes ``a[lo[i]:hi[i]]`` of every i, back to back (spans sorted and disjoint).

    Few bytes: an index per byte. Many: a byte mask over the buffer, built by repeating
    False/True over the gaps and spans, which costs 1 byte per buffer byte instead of 8 per output byte.
    """
    lengths = hi - lo
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.uint8)
    if total * 8 < a.size:
        shift = lo - (np.cumsum(lengths) - lengths)
        index = np.repeat(shift, lengths)
        index += np.arange(total)
        return a[index]
    runs = np.empty(2 * lo.size + 1, dtype=np.int64)  # gap, span, gap, span, ..., gap
    runs[0] = lo[0]
    runs[1:-1:2] = lengths
    runs[2:-1:2] = lo[1:] - hi[:-1]
    runs[-1] = a.size - hi[-1]
    inside = np.zeros(runs.size, dtype=bool)
    inside[1::2] = True
    return a[np.repeat(inside, runs)]


def _is_digit(x: np.ndarray) -> np.ndarray:
    return (x - np.uint8(48)) < 10  # uint8 wraps below '0'


def _number_lists(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, integers: np.ndarray):
    """Check lists of numbers, ``a[lo:hi]`` each (``a[hi]`` is its ']'); None unless plainly valid JSON.

    ``lo``, ``hi``: (lines, lists) in file order; ``integers[j]``: list j holds integers (digits
    without a leading zero); the others hold numbers (the same with at most one inner '.').
    Items are parted by ',' or ', '. Returns ((lines, lists) item counts, the values of the
    integer items, line by line) or None.
    """
    shape = lo.shape
    lo, hi = lo.ravel(), hi.ravel()
    lengths = hi - lo
    sub = _gather(a, lo, hi + 1)  # every list's bytes and its ']', which keeps neighbouring lists apart
    size = sub.size
    is_sep = (sub == ord(",")) | (sub == ord("]"))
    sep = np.flatnonzero(is_sep)  # the byte after each item (',' or ']'); empty lists give an empty "item"
    spaces = np.flatnonzero(sub == ord(" "))
    dot = sub == ord(".")
    n_digits = np.count_nonzero(_is_digit(sub))
    close_at = np.flatnonzero(sub[sep] == ord("]"))  # which separators close a list
    if close_at.size != lo.size or n_digits + sep.size + spaces.size + np.count_nonzero(dot) != size:
        return None  # a byte of another kind, or a stray ']'
    after = np.take(sub, sep + 1, mode="clip")  # a ']' at the very end reads itself: harmless below
    spaced = after == ord(" ")
    starts = np.empty(sep.size, dtype=np.int64)  # first byte of each item
    starts[0] = 0
    starts[1:] = sep[:-1] + 1 + spaced[:-1]
    widths = sep - starts
    item = widths > 0
    comma = np.ones(sep.size, dtype=bool)
    comma[close_at] = False
    # an empty item only as an empty list: '[]' (a ']' right after '[' or another list's ']')
    empty_ok = ~item & ~comma & ((starts == 0) | np.r_[True, ~comma[:-1]])
    if not (item | empty_ok).all():
        return None
    # items start and end with a digit; a comma is followed by a digit or by ' ' and a digit
    first, last = sub[starts], sub[sep - 1]
    if not ((_is_digit(first) & _is_digit(last)) | ~item).all():
        return None
    if spaced.any() and not (comma[spaced].all() and _is_digit(np.take(sub, sep[spaced] + 2, mode="clip")).all()):
        return None
    if spaces.size != np.count_nonzero(spaced):
        return None  # a space elsewhere
    if ((first == ord("0")) & _is_digit(np.take(sub, starts + 1, mode="clip")) & item).any():
        return None  # a leading zero
    per_list_items = np.diff(close_at, prepend=-1)  # separators (items, or the one empty "item") per list
    of_int_list = np.repeat(np.tile(integers, shape[0]), per_list_items)
    if dot.any():
        # a dot lies between digits, at most one per item, none in a list of integers: merge the
        # sorted separators (even tags) and dots (odd) and look at their neighbours
        where = np.flatnonzero(dot)
        if not (_is_digit(sub[where - 1]).all() and _is_digit(sub[where + 1]).all()):
            return None
        odd = np.sort(np.concatenate((sep * 2, where * 2 + 1)), kind="stable") & 1
        if (odd[1:] & odd[:-1]).any():
            return None
        item_of_dot = np.flatnonzero(odd) - np.arange(where.size)  # separators before each dot
        if of_int_list[item_of_dot].any():
            return None
    counts = (per_list_items - (lengths == 0)).reshape(shape).astype(np.int64)
    keep = of_int_list & item
    if not keep.all():  # all kept: XC's target_ind alone, no empty list
        ends, widths = sep[keep], widths[keep]
    else:
        ends = sep
    if widths.size and widths.max() > 18:
        return None
    if widths.size and widths.max() <= 8:
        return counts, _eight_digit_values(sub, ends, widths)
    # wider: digit by digit from the right end of each item
    values = np.zeros(ends.size, dtype=np.int64)
    shortest = int(widths.min()) if widths.size else 0
    for j in range(int(widths.max()) if widths.size else 0):
        digit = sub[ends - 1 - j].astype(np.int64) - 48  # past an item's first digit: masked out below
        values += (digit if j < shortest else np.where(widths > j, digit, 0)) * _POW10[j]
    return counts, values


_NUMBER = re.compile(rb"(0|[1-9][0-9]*)(\.[0-9]+)?")


def _repeats_one_number(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether every list ``a[lo:hi]`` (its ']' at ``a[hi]``) is empty or repeats one plain number.

    The number and the separator (',' or ', ') are read off the first list that shows them. A list
    of c items then spans c * period - len(separator) bytes; with the separator's length of bytes
    after it, each list is whole rows of ``period`` bytes. The bytes in a last row's separator place
    (']', then '}' or ',') were checked by the layout, so they are overwritten with the separator
    and all rows compared to the repeated number at once.
    """
    lengths = hi - lo
    filled = np.flatnonzero(lengths)
    if not filled.size:
        return True
    first = a[lo[filled[0]] : hi[filled[0]]].tobytes()
    token = first.split(b",")[0]
    if not _NUMBER.fullmatch(token):
        return False
    longer = filled[lengths[filled] > len(token)]
    sep = b","
    if longer.size and a[lo[longer[0]] + len(token) + 1] == 32:
        sep = b", "
    period = len(token) + len(sep)
    spans = lengths[filled] + len(sep)
    if (spans % period).any():
        return False
    rows = _gather(a, lo[filled], lo[filled] + spans).reshape(-1, period)
    rows[np.cumsum(spans // period) - 1, len(token) :] = np.frombuffer(sep, np.uint8)  # each list's ']'...
    return rows.tobytes() == (token + sep) * len(rows)  # one memcmp


_ASCII_DIGITS = 0x0F0F0F0F0F0F0F0F
# _KEEP[w]: the digit bits of a word's top w bytes (a run of w digits ending at the word's end)
_KEEP = np.array([_ASCII_DIGITS & ~((1 << (8 * (8 - w))) - 1) for w in range(9)], dtype=np.uint64)


def _eight_digit_values(sub: np.ndarray, ends: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Values of the checked digit runs ``sub[ends - widths : ends]`` (widths 1..8), 8 digits per step.

    Each run's 8 bytes ending at its end are read as one little-endian word (``ends`` ascending;
    the few runs ending within the first 8 bytes read the first word, shifted up); the bytes before
    the run are cleared (leading zeros) with the ASCII bits, and three multiply-shift steps fold
    digit pairs, then quads, then the eight (the first digit sits in the lowest byte, so each step
    weights the lower half by 10^k).
    """
    if sub.size < 8:
        sub, ends = np.concatenate((np.zeros(8, dtype=np.uint8), sub)), ends + 8
    w = _words(sub)[np.maximum(ends - 8, 0)]  # (items,) uint64
    early = int(np.searchsorted(ends, 8))  # runs that end within the first word
    w[:early] <<= (8 * (8 - ends[:early])).astype(np.uint64)
    w &= _KEEP[widths]  # one digit per byte, zeros before the run
    w = (w * np.uint64(10 * 256 + 1)) >> np.uint64(8)
    w = ((w & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(100 * 65536 + 1)) >> np.uint64(16)
    w = ((w & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(10000 * (1 << 32) + 1)) >> np.uint64(32)
    return w.astype(np.int64)


def _field(buffer: bytes, a: np.ndarray, spans, n: int, marks, unescape: bool) -> EncodedTexts | None:
    """One string column (``spans`` = open and close quotes per line; None: the key is absent, all "").

    ``marks``: positions of every backslash and every '&' in the buffer; texts holding one are decoded.
    """
    if spans is None:
        return EncodedTexts(b"", np.zeros(n, dtype=np.int64))
    v_open, v_close = spans
    lo, hi = v_open + 1, v_close
    lengths = (hi - lo).astype(np.int64)
    slashes, amps = marks
    special = _holds(slashes, lo, hi)
    if unescape:
        special |= _holds(amps, lo, hi)
    rows = np.flatnonzero(special)
    if not rows.size:
        return EncodedTexts(_gather(a, lo, hi).tobytes(), lengths)
    decoded = []
    for i in rows.tolist():
        literal = buffer[v_open[i] : v_close[i] + 1]
        try:
            value = _loads(literal)
        except ValueError:
            try:  # json accepts what orjson refuses on principle (lone surrogates), as the general reader
                value = json.loads(literal)
            except ValueError:
                return None
        if unescape and "&" in value:
            value = html.unescape(value)
        decoded.append(value.encode("utf-8", "replace"))
    plain = ~special
    fast = _gather(a, lo[plain], hi[plain])
    lengths[rows] = [len(d) for d in decoded]
    return EncodedTexts(_interleave(fast, lengths, plain, b"".join(decoded)), lengths)


def _holds(where: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether each span ``[lo, hi)`` contains one of the sorted positions ``where``."""
    if not where.size:
        return np.zeros(len(lo), dtype=bool)
    return np.searchsorted(where, hi) > np.searchsorted(where, lo)


_ESCAPABLE = np.zeros(256, dtype=bool)
_ESCAPABLE[list(b'"\\/bfnrtu')] = True
_HEX = np.zeros(256, dtype=bool)
_HEX[list(b"0123456789abcdefABCDEF")] = True


def _escapes_valid(a: np.ndarray, slashes: np.ndarray) -> bool:
    """Whether every escape (a backslash at an even offset of its run) is one JSON allows.

    Backslashes outside strings never get here: the layout checks account for every byte there.
    """
    run_start = np.r_[True, np.diff(slashes) != 1]
    first_of_run = np.maximum.accumulate(np.where(run_start, np.arange(slashes.size), 0))
    lead = slashes[(np.arange(slashes.size) - first_of_run) % 2 == 0]
    follower = a[lead + 1]
    if not _ESCAPABLE[follower].all():
        return False
    u = lead[follower == ord("u")]
    return bool(_HEX[a[u[:, None] + 2 + np.arange(4)]].all()) if u.size else True


def _interleave(fast: np.ndarray, lengths: np.ndarray, plain: np.ndarray, other: bytes) -> bytes:
    """Texts in row order: rows where ``plain`` from ``fast``, the others from ``other`` (both in row order)."""
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    mask = np.repeat(plain, lengths)
    out[mask] = fast
    out[~mask] = np.frombuffer(other, dtype=np.uint8)
    return out.tobytes()


def _join_with_space(title: EncodedTexts, content: EncodedTexts) -> EncodedTexts:
    """``f"{t} {c}"`` when both are non-empty, else whichever is (``compose_query_texts``), as bytes."""
    both = (title.lengths > 0) & (content.lengths > 0)
    pieces = np.stack([title.lengths, both.astype(np.int64), content.lengths], axis=1).ravel()
    source = np.zeros(pieces.size, dtype=np.uint8)  # 0: title bytes, 1: the space, 2: content bytes
    source[1::3], source[2::3] = 1, 2
    out = np.empty(int(pieces.sum()), dtype=np.uint8)
    which = np.repeat(source, pieces)
    out[which == 0] = np.frombuffer(title.data, dtype=np.uint8)
    out[which == 1] = 32
    out[which == 2] = np.frombuffer(content.data, dtype=np.uint8)
    return EncodedTexts(out.tobytes(), title.lengths + both + content.lengths)
