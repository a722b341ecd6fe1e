"""The vectorised LF JSON reader (``lf_json_columns.parse_block``) gives the general reader's bytes, or declines.

Every block it accepts must give exactly what the record-by-record reader gives (texts HTML- and
JSON-decoded, utf-8 bytes, label counts and indices); every block it cannot prove to be plain
must be declined (None), so the general reader parses it and reports its errors.
"""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from xmcbench.data.formats import lf_json
from xmcbench.data.formats.lf_json import iter_blocks, read_lf_chunks
from xmcbench.data.formats.lf_json_columns import parse_block
from xmcbench.errors import DataFormatError

TEXTS = ("title", "title+content")


def _general(block: bytes, text: str, targets: bool = True, n_labels: int | None = None):
    return lf_json._general_columns(Path("x.json"), 1, block, text, n_labels, targets)


def _same(fast, slow) -> None:
    assert fast is not None
    assert fast.texts.data == slow.texts.data
    assert fast.texts.lengths.tolist() == slow.texts.lengths.tolist()
    assert fast.uids.data == slow.uids.data
    assert fast.uids.lengths.tolist() == slow.uids.lengths.tolist()
    if slow.counts is None:
        assert fast.counts is None and fast.indices is None
    else:
        assert fast.counts.tolist() == slow.counts.tolist()
        assert fast.indices.dtype == np.int32 and fast.indices.tolist() == slow.indices.tolist()


def _lines(records, **dumps) -> bytes:
    # a lone surrogate cannot be utf-8: it is written as the JSON escape \\ud800 (backslashreplace)
    return b"\n".join(json.dumps(r, **dumps).encode("utf-8", "backslashreplace") for r in records)


TRICKY = [
    {
        "uid": "a1",
        "title": 'say "hi" \\ back\\slash',
        "content": "x &amp; y",
        "target_ind": [0, 3],
        "target_rel": [1.0, 0.5],
    },
    {"uid": "b\u00e9", "title": "caf\u00e9 \u2019 \U0001f600", "content": "", "target_ind": [], "target_rel": []},
    {"uid": "", "title": "", "content": "only content &#8217;s", "target_ind": [12], "target_rel": [1]},
    {
        "uid": "c",
        "title": "lone \ud800 surrogate",
        "content": "tab\there/slash",
        "target_ind": [7, 0, 7],
        "target_rel": [1.0, 1.0, 12.25],
    },
    {
        "uid": "d",
        "title": "&lt;b&gt; &amp;amp; & plain",
        "content": "ends with backslash \\",
        "target_ind": [123456789],
        "target_rel": [0.0],
    },
]


@pytest.mark.parametrize("style", ["compact", "spaced", "ascii"])
@pytest.mark.parametrize("text", TEXTS)
def test_tricky_records_match_the_general_reader(style, text):
    dumps = {
        "compact": {"separators": (",", ":"), "ensure_ascii": False},
        "spaced": {"ensure_ascii": False},  # json.dumps's default ', ' and ': '
        "ascii": {},  # and \\u escapes for everything outside ASCII, as the XC files
    }[style]
    block = _lines(TRICKY, **dumps)
    _same(parse_block(block, text=text, n_labels=123456790), _general(block, text))


def test_optional_and_extra_fields():
    records = [{"title": "t", "target_ind": [1]}, {"title": "u", "target_ind": [2, 3]}]
    block = _lines(records, separators=(",", ":"))
    for text in TEXTS:
        _same(parse_block(block, text=text), _general(block, text))
    extra = [{"uid": "1", "title": "t", "lang": "en", "content": "c", "target_ind": [1], "target_rel": [1.0]}] * 3
    block = _lines(extra)
    _same(parse_block(block, text="title+content"), _general(block, "title+content"))


def test_label_file_without_targets():
    records = [{"uid": f"L{i}", "title": f"label &amp; {i}", "content": "c"} for i in range(5)]
    block = _lines(records, separators=(",", ":"))
    _same(parse_block(block, targets=False), _general(block, "title", targets=False))


def test_synthetic_files_are_parsed_fast_and_identically(synth_raw_dir, synth_params):
    n = synth_params["n_labels"]
    for name, targets in (("trn.json.gz", True), ("tst.json.gz", True), ("lbl.json.gz", False)):
        for first, block in iter_line_numbers(iter_blocks(synth_raw_dir / name)):
            for text in TEXTS:
                slow = lf_json._general_columns(
                    synth_raw_dir / name, first, block, text, n if targets else None, targets
                )
                _same(parse_block(block, text=text, targets=targets, n_labels=n if targets else None), slow)


# pieces of texts around HTML references: ones resolved in bulk, ones html.unescape leaves alone or
# reads without ';', and neighbours that may or may not continue a reference
REFERENCE_PIECES = [
    "&amp;", "&lt;", "&gt;", "&quot;", "&#39;", "&#8217;", "&#x41;", "&#X2019;", "&#0;", "&#128;", "&#150;",
    "&#xD800;", "&#1114112;", "&#x;", "&#;", "&;", "&", "&amp", "&ampx;", "&notit;", "&nbsp;", "&Aacute;",
    "&NotANameAtAll;", "&aaaaaaaaaaaaaaaaaaaaaa;", "&#12ab;", "&#xZZ;", "&aacute", "AT&T", "&&amp;", "&#65",
    "&#65;;", "&lt", "&#x1F600;", "&copy;", "&#11;", "&#13;", "&#x80;", "&nGt;", ";", "#", "a", "b c", "\u00e9",
    "\u2019", "\U0001f600", " ", "\n", '"', "\\",
]  # fmt: skip


def test_references_are_resolved_as_html_unescape_resolves_them():
    import html
    import random

    from xmcbench.data.formats.lf_json_columns import _unescape_column

    rng = random.Random(0)
    for _ in range(2000):
        texts = ["".join(rng.choices(REFERENCE_PIECES, k=rng.randint(0, 12))) for _ in range(rng.randint(1, 8))]
        encoded = [t.encode("utf-8") for t in texts]
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        out, lengths = _unescape_column(data, np.array([len(e) for e in encoded], dtype=np.int64))
        want = [html.unescape(t).encode("utf-8") for t in texts]
        assert out.tobytes() == b"".join(want), texts
        assert lengths.tolist() == [len(w) for w in want]


@pytest.mark.parametrize("words", [3, 300])  # short texts joined with byte masks, long ones row by row
def test_references_and_escapes_in_long_and_short_texts(words):
    rng = np.random.default_rng(1)
    lines = []
    for i in range(60):
        title = "".join(rng.choice(REFERENCE_PIECES, size=4))
        content = " ".join(rng.choice(REFERENCE_PIECES + ["word"] * 20, size=words)) if i % 7 else ""
        content = json.dumps(content, ensure_ascii=bool(i % 2))
        if i % 5 == 0:  # '&' written as a JSON escape: html.unescape sees it after the JSON decoding
            content = content.replace("&", "\\u0026")
        lines.append(f'{{"uid":"u{i}","title":{json.dumps(title)},"content":{content},"target_ind":[{i}]}}')
    block = "\n".join(lines).encode("utf-8")
    for text in TEXTS:
        _same(parse_block(block, text=text, n_labels=100), _general(block, text))


def test_an_ampersand_written_only_as_a_json_escape_is_unescaped():
    """No raw '&' in the block: the reference appears only once the JSON escape is decoded."""
    block = b'{"uid":"u","title":"a \\u0026amp; b","content":"c \\u0026#8217;s","target_ind":[0]}'
    assert b"&" not in block
    for text in TEXTS:
        fast = parse_block(block, text=text, n_labels=1)
        _same(fast, _general(block, text))
    assert fast.texts.data == "a & b c \u2019s".encode()


# pieces of JSON string literals: every escape JSON has, surrogate pairs, lone and doubled halves,
# upper- and lower-case hex, a '&' escaped, raw non-ASCII
ESCAPE_PIECES = [
    "a", "é", " ", "\\n", '\\"', "\\\\", "\\/", "\\b", "\\f", "\\r", "\\t", "\\u0041", "\\u00e9", "\\u20AC",
    "\\u007f", "\\u0080", "\\u07ff", "\\u0800", "\\uffff", "\\uD83D\\uDE00", "\\ud83d", "\\ude00", "\\uDBFF\\uDFFF", "\\u0000",
    "\\u0026amp;", "&amp;", "\\uD800\\uD800\\uDC00", "\\udc00\\ud800", "\\\\u0041", "\\\\\\n",
]  # fmt: skip


def test_json_escapes_are_decoded_as_json_decodes_them():
    rng = np.random.default_rng(2)
    for _ in range(300):
        lines = []
        for i in range(int(rng.integers(1, 6))):
            title, content, uid = ("".join(rng.choice(ESCAPE_PIECES, size=int(rng.integers(0, 8)))) for _ in range(3))
            lines.append(f'{{"uid":"{uid}","title":"{title}","content":"{content}","target_ind":[{i}]}}')
        block = "\n".join(lines).encode("utf-8")
        for text in TEXTS:
            _same(parse_block(block, text=text, n_labels=10), _general(block, text))


@pytest.mark.parametrize("hex_format", ["04x", "04X"])
def test_every_unicode_escape_is_decoded_as_json_decodes_it(hex_format):
    lines = [
        f'{{"uid":"\\u{c:{hex_format}}","title":"a\\u{c:{hex_format}}b","target_ind":[0]}}' for c in range(1 << 16)
    ]
    block = "\n".join(lines).encode()
    _same(parse_block(block, n_labels=1), _general(block, "title"))


def iter_line_numbers(blocks):
    line = 1
    for block in blocks:
        yield line, block
        line += block.count(b"\n") + 1


GOOD = '{"uid":"1","title":"t","content":"c","target_ind":[1,2],"target_rel":[1.0,1.0]}'


@pytest.mark.parametrize(
    "line",
    [
        '{"uid":"1","title":"t","content":null,"target_ind":[1],"target_rel":[1.0]}',  # null content
        '{"uid":1,"title":"t","content":"c","target_ind":[1],"target_rel":[1.0]}',  # numeric uid
        '{"uid":"1","title":"t","content":"c","target_ind":[01],"target_rel":[1.0]}',  # leading zero
        '{"uid":"1","title":"t","content":"c","target_ind":[-1],"target_rel":[1.0]}',  # negative
        '{"uid":"1","title":"t","content":"c","target_ind":[1.0],"target_rel":[1.0]}',  # float index
        '{"uid":"1","title":"t","content":"c","target_ind":[1,],"target_rel":[1.0]}',  # trailing comma
        '{"uid":"1","title":"t","content":"c","target_ind":[,1],"target_rel":[1.0]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[1,,2],"target_rel":[1.0]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[1 ,2],"target_rel":[1.0]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[ 1],"target_rel":[1.0]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[[1]],"target_rel":[1.0]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[1e0]}',  # exponent
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[1..0]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[1.0.0]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[.5]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[00.5]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[1.0}',  # unclosed
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[1.0]} ',  # trailing space
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[1.0]}\r',  # CRLF
        '{ "uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[1.0]}',
        '{"uid":"1","title":"t","content":"c","target_ind":[1],"target_rel":[1.0],}',
        '{"uid":"1","title":"t\\x","content":"c","target_ind":[1],"target_rel":[1.0]}',  # bad escape
        '{"uid":"1","title":"t","content":"c\\u12G4","target_ind":[1],"target_rel":[1.0]}',
        '{"uid":"1","title":"t","content":"c\u0001","target_ind":[1],"target_rel":[1.0]}',  # raw control
        '{"uid":"1","content":"c","title":"t","target_ind":[1],"target_rel":[1.0]}',  # other key order
        '{"uid":"1","title":"t","title":"u","content":"c","target_ind":[1],"target_rel":[1.0]}',  # repeated key
        '{"uid":"1","titl\\u0065":"t","content":"c","target_ind":[1],"target_rel":[1.0]}',  # escaped key
        '{"uid":"1","title":"t","\\ud800":"c","target_ind":[1],"target_rel":[1.0]}',  # a key json alone reads
        '{"uid":"1","title":"t","content":"c","target_ind":[9],"target_rel":[1.0]}',  # out of range (n_labels=5)
        '["uid","title"]',
        "",  # blank line
    ],
)
def test_blocks_it_cannot_prove_plain_are_declined(line, tmp_path):
    block = (GOOD + "\n" + line + "\n" + GOOD).encode()
    assert parse_block(block, text="title+content", n_labels=5) is None
    # and prepare's reader still gives the general reader's answer, or its error
    path = tmp_path / "f.json"
    path.write_bytes(block + b"\n")
    try:
        slow = [
            (c.titles, c.contents, c.uids, c.target_counts.tolist(), c.target_indices.tolist())
            for c in read_lf_chunks(path, n_labels=5)
        ]
    except DataFormatError as exc:
        with pytest.raises(DataFormatError) as caught:
            list(lf_json.read_columns(path, text="title+content", n_labels=5, targets=True, what="x", progress=False))
        assert str(caught.value) == str(exc)  # same file, line and problem
        return
    (fast,) = lf_json.read_columns(path, text="title+content", n_labels=5, targets=True, what="x", progress=False)
    ((titles, contents, uids, counts, indices),) = slow
    assert fast.texts.to_list() == [f"{t} {c}" if t and c else t or c for t, c in zip(titles, contents)]
    assert fast.uids.to_list() == uids
    assert fast.counts.tolist() == counts and fast.indices.tolist() == indices


def test_a_first_line_json_alone_reads_sets_no_layout_it_cannot_check():
    block = b'{"uid":"u","title":"t","\\ud800":"x","target_ind":[0]}\n' + GOOD.encode()
    assert parse_block(block, n_labels=5) is None  # declined, not an error: the general reader reads it
    assert _general(block, "title", n_labels=5).texts.data == b"tt"


def test_invalid_utf8_is_declined():
    block = GOOD.replace('"t"', '"t\xff"').encode("latin-1")
    assert parse_block(block) is None


def test_prepare_cache_is_byte_identical_with_and_without_the_fast_reader(
    tmp_path, synth_raw_dir, synth_params, monkeypatch
):
    from xmcbench.data.prepared import prepare
    from xmcbench.data.synth import make_synthetic_spec

    for text in TEXTS:
        spec = make_synthetic_spec("synth-parse", query_text=text, **synth_params)
        fast = prepare(spec, synth_raw_dir, tmp_path / f"fast-{text}", progress=False)
        with monkeypatch.context() as m:
            m.setattr(lf_json, "parse_block", lambda *a, **k: None)  # every block through the general reader
            slow = prepare(spec, synth_raw_dir, tmp_path / f"slow-{text}", progress=False)
        names = sorted(p.name for p in fast.iterdir())
        assert names == sorted(p.name for p in slow.iterdir())
        for name in names:
            if name == "meta.json":
                a, b = (json.loads((d / name).read_text()) for d in (fast, slow))
                for meta in (a, b):
                    del meta["prepared_at"], meta["prepare_seconds"]
                assert a == b
            else:
                assert filecmp.cmp(fast / name, slow / name, shallow=False), name
        shutil.rmtree(slow)


def test_error_in_a_later_block_names_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(lf_json, "_CHUNK_BYTES", 200)  # many blocks, most parsed fast
    monkeypatch.setattr(lf_json, "_READ_SIZE", 100)
    lines = [GOOD] * 40
    lines[33] = GOOD.replace("[1,2]", "[1,-2]")
    path = tmp_path / "f.json"
    path.write_text("\n".join(lines) + "\n")
    assert len(list(iter_blocks(path))) > 10
    with pytest.raises(DataFormatError) as slow:
        list(read_lf_chunks(path, n_labels=5))
    with pytest.raises(DataFormatError) as fast:
        list(lf_json.read_columns(path, text="title", n_labels=5, targets=True, what="x", progress=False))
    assert str(fast.value) == str(slow.value) and fast.value.line == 34


def _records(rels, inds=None):
    inds = inds if inds is not None else [[i, i + 1][: len(r)] if r else [] for i, r in enumerate(rels)]
    return [
        {"uid": str(i), "title": f"t{i}", "target_ind": ind, "target_rel": rel}
        for i, (ind, rel) in enumerate(zip(inds, rels))
    ]


@pytest.mark.parametrize("dumps", [{"separators": (",", ":")}, {}], ids=["compact", "spaced"])
@pytest.mark.parametrize(
    "rels",
    [
        [[1.0, 1.0], [1.0], [], [1.0, 1.0, 1.0]],  # XC's shape, with an empty list
        [[1.0], [1.0, 1.0]],  # the separator is read off a later, longer list
        [[], [], [1]],  # integers repeat too
        [[0.5, 0.5], [0.5]],
    ],
)
def test_lists_repeating_one_number_take_the_row_check(rels, dumps, monkeypatch):
    """Accepted by the row check (``_repeats_one_number``), with the general reader's columns."""

    block = _lines(_records(rels), **dumps)
    seen = _watch_row_check(monkeypatch)
    _same(parse_block(block, n_labels=10), _general(block, "title"))
    assert seen == [True]


def _watch_row_check(monkeypatch) -> list[bool]:
    """The answers of ``_repeats_one_number``, in call order."""
    from xmcbench.data.formats import lf_json_columns

    seen = []
    check = lf_json_columns._repeats_one_number
    monkeypatch.setattr(lf_json_columns, "_repeats_one_number", lambda *a: seen.append(check(*a)) or seen[-1])
    return seen


@pytest.mark.parametrize(
    "rels",
    [
        [[1.0, 2.0], [1.0]],  # two numbers
        [[1.0], [1, 1]],  # "1.0" then "1"
        [[1.0, 1.0], [1.0]],  # one number, but the next lines are spaced differently (below)
    ],
)
def test_lists_not_repeating_one_number_are_checked_item_by_item(rels, monkeypatch):

    lines = _lines(_records(rels), separators=(",", ":")) + b"\n" + _lines(_records(rels))  # compact, then spaced
    seen = _watch_row_check(monkeypatch)
    _same(parse_block(lines, n_labels=10), _general(lines, "title"))
    assert seen == [False]


@pytest.mark.parametrize(
    "rel",
    ["[1.0,,1.0]", "[1.0, 1.0, ]", "[1.0 1.0]", "[1.0,  1.0]", "[01.0,01.0]", "[1.0,1.0,]", "[,1.0]", "[1.0,1.0"],
)
def test_malformed_repeats_are_declined(rel):
    good = '{"uid":"1","title":"t","target_ind":[1,2],"target_rel":[1.0,1.0]}'
    bad = good.replace("[1.0,1.0]", rel)
    assert parse_block(f"{good}\n{bad}\n{good}".encode(), n_labels=5) is None
    assert parse_block(f"{bad}\n{good}".encode(), n_labels=5) is None


def test_target_rel_before_target_ind():
    records = [{"uid": str(i), "title": "t", "target_rel": [1.0] * i, "target_ind": list(range(i))} for i in range(4)]
    for dumps in ({"separators": (",", ":")}, {}):
        block = _lines(records, **dumps)
        _same(parse_block(block, n_labels=10), _general(block, "title"))


def test_label_indices_of_every_width():
    """1 to 8 digits are read a word at a time, 9 and 10 digit by digit: both as the general reader."""
    widths = [0, 7, 10, 99, 100, 4321, 65536, 999999, 1234567, 99999999, 10000000, 123456789, 2147483647]
    records = [
        {"title": "t", "target_ind": widths[i:] + widths[:i], "target_rel": [1.0] * len(widths)} for i in range(5)
    ]
    block = _lines(records, separators=(",", ":"))
    _same(parse_block(block), _general(block, "title"))
    block = _lines([{"title": "t", "target_ind": widths[:10]}] * 3)  # all within 8 digits
    _same(parse_block(block), _general(block, "title"))


@pytest.mark.parametrize("lists", [[[5]], [[12], [3]], [[1, 2]], [[], [7]], [[0, 1, 2, 3]], [[123, 4567890]]])
def test_label_lists_shorter_than_a_word(lists):
    """All of a block's label bytes in fewer than 8: the word reads must not leave them."""
    block = _lines([{"title": "t", "target_ind": ind} for ind in lists], separators=(",", ":"))
    _same(parse_block(block, n_labels=10**7), _general(block, "title"))
