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
- a column's texts are copied out as bytes (a JSON string without escapes is its own utf-8
  encoding) and their escapes decoded in place, a column at a time, to what ``json.loads`` and an
  encoding with "replace" give (``_decode_escapes``); no per-text Python loop holds the GIL, which
  the other parser thread needs;
- then titles and contents (never uids) are HTML-unescaped as ``html.unescape`` does, a column at a
  time: each distinct reference closed by ``;`` is resolved once and spliced in wherever it stands,
  and only texts holding another kind of ``&`` go through ``html.unescape`` whole
  (``_unescape_column``).

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
    # a backslash starts an escape at an even place of its run (the one after it is escaped)
    escapes = _escape_starts(np.flatnonzero(a[:size] == _BACKSLASH)) if b"\\" in buffer else np.empty(0, np.int64)
    quotes = _unescaped_quotes(a, size, escapes)
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
    if escapes.size and not _escapes_valid(a, escapes):
        return None
    title = _field(buffer, a, strings.get("title"), n, escapes, unescape=True)
    if text == "title+content":
        texts = _join_with_space(title, _field(buffer, a, strings.get("content"), n, escapes, unescape=True))
    else:
        texts = title
    uids = _field(buffer, a, strings.get("uid"), n, escapes, unescape=False)
    return ColumnBlock(texts, uids, counts, indices)


# ----------------------------------------------------------------------------------------------


def _layout(first_line: bytes, text: str, targets: bool) -> list[tuple[str, str]] | None:
    """[(key, "str" | "list")] of the first record, or None when its shape is not handled here."""
    try:
        record = _loads(first_line)
    except ValueError:
        try:  # json accepts what orjson refuses on principle (lone surrogates), as the general reader
            record = json.loads(first_line)
        except ValueError:
            return None
    if not isinstance(record, dict) or not isinstance(record.get("title"), str):
        return None
    if targets and "target_ind" not in record:
        return None
    layout = []
    for key, value in record.items():
        try:
            key.encode()  # a key with a lone surrogate (read by json alone) is not compared here
        except UnicodeEncodeError:
            return None
        if isinstance(value, str):
            layout.append((key, "str"))
        elif isinstance(value, list) and key in _LIST_KEYS:
            layout.append((key, "list"))
        else:
            return None
    return layout


def _unescaped_quotes(a: np.ndarray, size: int, escapes: np.ndarray) -> np.ndarray | None:
    """Positions of the quotes that open or close strings: all but those an escape's backslash
    (``escapes``, ``_escape_starts``) stands right before."""
    quotes = np.flatnonzero(a[:size] == _QUOTE)
    if not quotes.size or quotes[0] == 0:
        return None
    after_backslash = np.flatnonzero(a[quotes - 1] == _BACKSLASH)
    if not after_backslash.size:
        return quotes
    before = quotes[after_backslash] - 1
    at = np.minimum(np.searchsorted(escapes, before), escapes.size - 1)
    return np.delete(quotes, after_backslash[escapes[at] == before])


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


def _field(buffer: bytes, a: np.ndarray, spans, n: int, escapes: np.ndarray, unescape: bool) -> EncodedTexts:
    """One string column (``spans`` = open and close quotes per line; None: the key is absent, all "").

    ``escapes``: the backslash of every JSON escape in the buffer (checked valid). The texts are cut
    out of the buffer and their escapes decoded (``_decode_escapes``); then, with ``unescape``, their
    HTML references are resolved (``_unescape_column``; the general reader unescapes titles and
    contents, never uids).
    """
    if spans is None:
        return EncodedTexts(b"", np.zeros(n, dtype=np.int64))
    v_open, v_close = spans
    lo, hi = v_open + 1, v_close
    lengths = (hi - lo).astype(np.int64)
    data = _gather(a, lo, hi)
    row = np.searchsorted(lo, escapes, side="right") - 1  # the text each escape would be in
    inside = (row >= 0) & (escapes < hi[np.maximum(row, 0)])
    escaped = bool(inside.any())
    if escaped:
        row, at = row[inside], escapes[inside]
        starts = np.cumsum(lengths) - lengths
        data, lengths = _decode_escapes(a, data, lengths, at, at - lo[row] + starts[row], row)
    if unescape and (escaped or b"&" in buffer):  # a decoded text may hold one ("\u0026")
        data, lengths = _unescape_column(data, lengths)
    return EncodedTexts(data.tobytes(), lengths)


_SIMPLE_ESCAPE = np.zeros(256, dtype=np.uint8)  # what \" \\ \/ \b \f \n \r \t stand for
for _char, _byte in zip(b'"\\/bfnrt', b'"\\/\b\f\n\r\t'):
    _SIMPLE_ESCAPE[_char] = _byte
_HEX_VALUE = np.zeros(256, dtype=np.int32)
_HEX_VALUE[list(b"0123456789")] = np.arange(10)
_HEX_VALUE[list(b"abcdef")] = _HEX_VALUE[list(b"ABCDEF")] = np.arange(10, 16)


def _decode_escapes(a, data, lengths, at, where, row):
    """The texts with their JSON escapes decoded, as utf-8: what ``json.loads`` gives, encoded with
    "replace" (the general reader's steps), in numpy passes that leave the GIL to the other parser.

    ``at``: each escape's backslash in the buffer ``a``; ``where``: the same in ``data``; ``row``:
    its text. ``\\u`` and four hex digits is the code point's utf-8; a high surrogate escape right
    before a low one is the pair's character (as json does), any other surrogate '?' (utf-8 cannot
    hold it: "replace").
    Every escape is at least as long as what it stands for, so the texts are rewritten in place.
    """
    follower = a[at + 1]
    size = np.full(at.size, 2, dtype=np.int64)
    width = np.ones(at.size, dtype=np.int64)  # bytes it decodes to
    u = np.flatnonzero(follower == ord("u"))
    if u.size:
        at_u = at[u]
        code = _HEX_VALUE[a[at_u + 2]] << 12 | _HEX_VALUE[a[at_u + 3]] << 8 | _HEX_VALUE[a[at_u + 4]] << 4
        code |= _HEX_VALUE[a[at_u + 5]]
        high = (code >= 0xD800) & (code < 0xDC00)
        low = (code >= 0xDC00) & (code < 0xE000)
        pair = high & np.r_[(at_u[1:] == at_u[:-1] + 6) & low[1:], False]  # a high surrogate, then its low half
        lone = (high | low) & ~pair & ~np.r_[False, pair[:-1]]  # (the low half of a pair is dropped below)
        code = np.where(pair, 0x10000 + ((code - 0xD800) << 10) + (np.r_[code[1:], 0] - 0xDC00), code)
        code[lone] = ord("?")
        w = 1 + (code >= 0x80) + (code >= 0x800) + (code >= 0x10000)
        w[np.flatnonzero(pair) + 1] = 0  # a pair's low half: decoded with its high half
        size[u], width[u] = np.where(pair, 12, 6), w
    keep = width > 0
    at_out, size, width, row = where[keep], size[keep], width[keep], row[keep]
    first = np.cumsum(width) - width  # each escape's first byte in the inserted stream
    inserted = np.empty(int(width.sum()), dtype=np.uint8)
    simple = follower[keep] != ord("u")
    inserted[first[simple]] = _SIMPLE_ESCAPE[follower[keep][simple]]
    if u.size:
        code, w, first_u = code[w > 0], w[w > 0], first[~simple]
        lead = np.select([w == 1, w == 2, w == 3], [code, 0xC0 | code >> 6, 0xE0 | code >> 12], 0xF0 | code >> 18)
        inserted[first_u] = lead
        for j in range(1, 4):  # continuation bytes: six bits each, highest first
            more = w > j
            inserted[first_u[more] + j] = 0x80 | (code[more] >> (6 * (w[more] - 1 - j))) & 0x3F
    return _splice(data, lengths, at_out, size, inserted, width, row)


_REFERENCE = 16  # longest reference resolved in bulk: '&', up to 14 name bytes, ';'
_NAME_BYTE = np.zeros(256, dtype=bool)
_NAME_BYTE[list(b"#0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")] = True


def _unescape_column(data: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``html.unescape`` of every text (utf-8 bytes back to back, ``lengths`` each), the same bytes.

    ``html.unescape`` looks at each '&' on its own: its pattern never spans another '&', and what it
    matches ends at the first ';' (names, digits and hex digits exclude it). So a reference closed
    by ';' within a few bytes of plain name bytes (``&amp;``, ``&#8217;``, also ones it leaves alone
    such as ``&#x;``) becomes ``html.unescape`` of those bytes alone, wherever it stands. Each such
    distinct string is resolved once by ``html.unescape`` and spliced in everywhere; texts holding
    any other '&' (``AT&T``, ``&amp`` without ';') go through ``html.unescape`` whole.
    """
    amp = np.flatnonzero(data == _AMP)
    if not amp.size:
        return data, lengths
    ends = np.cumsum(lengths)
    row = np.searchsorted(ends, amp, side="right")  # the text each '&' is in
    window = np.concatenate((data, np.zeros(_REFERENCE, dtype=np.uint8)))[amp[:, None] + np.arange(_REFERENCE)]
    name = _NAME_BYTE[window[:, 1:]]  # (refs, 15) bytes after the '&' that may make up a name
    width = np.argmin(name, axis=1)  # name bytes before the first other byte
    closed = (window[np.arange(amp.size), width + 1] == ord(";")) & (width > 0) & (amp + width + 1 < ends[row])
    whole = np.unique(row[~closed])  # texts with another kind of '&'
    bulk = ~np.isin(row, whole)
    if bulk.any():
        data, lengths = _splice_references(data, lengths, amp[bulk], width[bulk] + 2, window[bulk], row[bulk])
    if whole.size:
        starts = np.cumsum(lengths) - lengths
        texts = [data[starts[i] : starts[i] + lengths[i]].tobytes().decode("utf-8") for i in whole.tolist()]
        resolved = [html.unescape(t).encode("utf-8", "replace") for t in texts]
        kept = np.ones(lengths.size, dtype=bool)
        kept[whole] = False
        rest = data[np.repeat(kept, lengths)]
        lengths = lengths.copy()
        lengths[whole] = [len(r) for r in resolved]
        data = _interleave(rest, lengths, kept, b"".join(resolved))
    return data, lengths


def _splice_references(data, lengths, at, size, window, row):
    """``data`` with the references at ``at`` (``size`` bytes each, their bytes the first ``size`` of
    each ``window`` row; ``row``: their texts) replaced by what ``html.unescape`` makes of each."""
    keys = np.where(np.arange(_REFERENCE) < size[:, None], window, 0)  # (refs, 16) the references, 0-padded
    distinct, which = np.unique(keys.view(f"V{_REFERENCE}").ravel(), return_inverse=True)
    resolved = [html.unescape(bytes(key).rstrip(b"\0").decode("ascii")).encode("utf-8", "replace") for key in distinct]
    table = np.frombuffer(b"".join(resolved), dtype=np.uint8)
    table_len = np.array([len(r) for r in resolved], dtype=np.int64)
    new_len = table_len[which]  # (refs,)
    # the bytes put in, reference by reference: slices of the table
    offsets = (np.cumsum(table_len) - table_len)[which]
    index = np.repeat(offsets - (np.cumsum(new_len) - new_len), new_len) + np.arange(int(new_len.sum()))
    return _splice(data, lengths, at, size, table[index], new_len, row)


def _splice(data, lengths, at, size, inserted, new_len, row):
    """``data`` (texts of ``lengths`` bytes, back to back) with ``data[at_i : at_i + size_i]``
    replaced by the next ``new_len_i`` bytes of ``inserted``, for each i (``at`` ascending, spans
    disjoint; ``row``: the text of each); returns the new bytes and lengths. ``data`` may be
    overwritten."""
    total = inserted.size
    if (new_len <= size).all():  # as nearly always ("&amp;" -> "&", "\\n" -> newline): in place, then drop the rest
        data[np.repeat(at - (np.cumsum(new_len) - new_len), new_len) + np.arange(total)] = inserted
        dropped = size - new_len
        keep = np.ones(data.size, dtype=bool)
        keep[np.repeat(at + new_len - (np.cumsum(dropped) - dropped), dropped) + np.arange(int(dropped.sum()))] = False
        out = data[keep]
    else:  # the text between spans, then each span's replacement, ...: from two streams
        cut_end = at + size
        runs = np.empty(2 * at.size + 1, dtype=np.int64)
        runs[0:-1:2] = at - np.concatenate(([0], cut_end[:-1]))  # bytes kept before each span
        runs[1::2], runs[-1] = size, data.size - int(cut_end[-1])
        keep = np.zeros(runs.size, dtype=bool)
        keep[0::2] = True
        kept = data[np.repeat(keep, runs)]
        pieces = runs.copy()
        pieces[1::2] = new_len
        out = np.empty(kept.size + total, dtype=np.uint8)
        source = np.repeat(keep, pieces)
        out[source] = kept
        out[~source] = inserted
    change = np.bincount(row, weights=new_len - size, minlength=lengths.size)  # float64: exact at these sizes
    return out, lengths + change.astype(np.int64)


_ESCAPABLE = np.zeros(256, dtype=bool)
_ESCAPABLE[list(b'"\\/bfnrtu')] = True
_HEX = np.zeros(256, dtype=bool)
_HEX[list(b"0123456789abcdefABCDEF")] = True


def _escape_starts(slashes: np.ndarray) -> np.ndarray:
    """The backslashes that start an escape: those at an even offset of their run (``\\\\`` is one)."""
    if not slashes.size:
        return slashes
    run_start = np.r_[True, np.diff(slashes) != 1]
    first_of_run = np.maximum.accumulate(np.where(run_start, np.arange(slashes.size), 0))
    return slashes[(np.arange(slashes.size) - first_of_run) % 2 == 0]


def _escapes_valid(a: np.ndarray, lead: np.ndarray) -> bool:
    """Whether every escape (``lead``: its backslash) is one JSON allows.

    Backslashes outside strings never get here: the layout checks account for every byte there.
    """
    follower = a[lead + 1]
    if not _ESCAPABLE[follower].all():
        return False
    u = lead[follower == ord("u")]
    return bool(_HEX[a[u[:, None] + 2 + np.arange(4)]].all()) if u.size else True


def _interleave(fast: np.ndarray, lengths: np.ndarray, plain: np.ndarray, other: bytes) -> np.ndarray:
    """Texts in row order: rows where ``plain`` from ``fast``, the others from ``other`` (both in row order)."""
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    mask = np.repeat(plain, lengths)
    out[mask] = fast
    out[~mask] = np.frombuffer(other, dtype=np.uint8)
    return out


_JOIN_ROW_BYTES = 512  # mean text length above which texts are joined row by row (below: byte masks)


def _join_with_space(title: EncodedTexts, content: EncodedTexts) -> EncodedTexts:
    """``f"{t} {c}"`` when both are non-empty, else whichever is (``compose_query_texts``), as bytes.

    Byte masks cost ~1.6 ns a byte, a Python join ~0.8 us a row (one block of ~1.1 KB product
    descriptions: 45-57 ms against 19-23 ms), so long texts are joined row by row.
    """
    both = (title.lengths > 0) & (content.lengths > 0)
    lengths = title.lengths + both + content.lengths
    if len(title.data) + len(content.data) >= _JOIN_ROW_BYTES * max(lengths.size, 1):
        title_ends, content_ends = np.cumsum(title.lengths).tolist(), np.cumsum(content.lengths).tolist()
        parts, t, c = [], 0, 0
        for t_end, c_end, space in zip(title_ends, content_ends, both.tolist()):
            parts += (
                (title.data[t:t_end], b" ", content.data[c:c_end])
                if space
                else (title.data[t:t_end], content.data[c:c_end])
            )
            t, c = t_end, c_end
        return EncodedTexts(b"".join(parts), lengths)
    pieces = np.stack([title.lengths, both.astype(np.int64), content.lengths], axis=1).ravel()
    source = np.zeros(pieces.size, dtype=np.uint8)  # 0: title bytes, 1: the space, 2: content bytes
    source[1::3], source[2::3] = 1, 2
    out = np.empty(int(pieces.sum()), dtype=np.uint8)
    which = np.repeat(source, pieces)
    out[which == 0] = np.frombuffer(title.data, dtype=np.uint8)
    out[which == 1] = 32
    out[which == 2] = np.frombuffer(content.data, dtype=np.uint8)
    return EncodedTexts(out.tobytes(), lengths)
