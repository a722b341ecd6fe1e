"""LF JSON-lines reader/writer: round trips, gzip detection, HTML decoding, malformed input."""

from __future__ import annotations

import gzip
import json
import zlib

import numpy as np
import pytest
from lf_json_helpers import iter_records, write_lf_json

from xmcbench.data.formats import lf_json as jsonl
from xmcbench.data.formats.lf_json import read_lf_chunks, read_name_lines, read_text_lines
from xmcbench.errors import DataFormatError

RECORDS = [
    {"uid": "a1", "title": "Mog's Kittens", "content": "Judith Kerr’s best–selling cat", "target_ind": [3, 0]},
    {"uid": "a2", "title": "", "content": "", "target_ind": []},
    {"uid": "a3", "title": "Tom & Jerry <2>", "content": "ünïcödé 😀", "target_ind": [4]},
]


def _write_raw(path, lines: list[str], compress: bool = True) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if compress else data)


def _line(**fields) -> str:
    record = {"uid": "u", "title": "t", "content": "c", "target_ind": [0]}
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not ...})


@pytest.mark.parametrize("compress", [True, False])
def test_roundtrip(tmp_path, compress):
    path = write_lf_json(tmp_path / "trn.json.gz", RECORDS, compress=compress)
    assert jsonl.is_gzip(path) == compress
    assert list(iter_records(path, n_labels=5)) == RECORDS
    raw = (gzip.decompress(path.read_bytes()) if compress else path.read_bytes()).decode()
    first = json.loads(raw.splitlines()[0])
    assert list(first) == ["uid", "title", "content", "target_ind", "target_rel"]
    assert first["target_rel"] == [1.0, 1.0]
    assert "Tom &amp; Jerry &lt;2&gt;" in raw  # escaped on write, decoded once on read


def test_gzip_detected_by_magic_bytes_not_name(tmp_path):
    plain_named_gz = tmp_path / "trn.json.gz"
    gz_named_plain = tmp_path / "trn.json"
    _write_raw(plain_named_gz, [_line()], compress=False)
    _write_raw(gz_named_plain, [_line()], compress=True)
    for path in (plain_named_gz, gz_named_plain):
        assert [r["title"] for r in iter_records(path)] == ["t"]


def test_html_entities_decoded_exactly_once(tmp_path):
    path = tmp_path / "lbl.json.gz"
    _write_raw(path, [_line(title="AT&amp;amp;T", content="Kerr&#8217;s &lt;b&gt;"), _line(title="a &amp b")])
    records = list(iter_records(path, targets=False))
    assert records[0]["title"] == "AT&amp;T"
    assert records[0]["content"] == "Kerr\u2019s <b>"
    assert records[1]["title"] == "a & b"  # html.unescape semantics for a bare entity


def test_optional_fields_and_types(tmp_path):
    path = tmp_path / "trn.json"
    _write_raw(
        path,
        [
            json.dumps({"title": "no uid no content", "target_ind": [1]}),
            json.dumps({"uid": 123, "title": "int uid", "content": None, "target_ind": []}),
        ],
        compress=False,
    )
    records = list(iter_records(path))
    assert records[0] == {"uid": "", "title": "no uid no content", "content": "", "target_ind": [1]}
    assert records[1] == {"uid": "123", "title": "int uid", "content": "", "target_ind": []}


def test_label_file_needs_no_targets(tmp_path):
    path = tmp_path / "lbl.json.gz"
    _write_raw(path, [json.dumps({"uid": "L1", "title": "label", "content": ""})])
    assert list(iter_records(path, targets=False)) == [{"uid": "L1", "title": "label", "content": ""}]


BAD = [
    ("not json", r"trn.json.gz:2: not valid JSON"),
    (_line(target_ind=...), r"trn.json.gz:2: record has no 'target_ind'"),
    (_line(target_ind=[1, 5]), r"trn.json.gz:2: label index 5 in 'target_ind' is out of range: the label file has 5"),
    (_line(target_ind=[-1]), r"trn.json.gz:2: negative label index -1"),
    (_line(target_ind=[1.5]), r"trn.json.gz:2: label index 1.5 in 'target_ind' is not an integer"),
    (_line(target_ind=["2"]), r"trn.json.gz:2: label index '2' in 'target_ind' is not an integer"),
    (_line(target_ind=[1, True]), r"trn.json.gz:2: label index True in 'target_ind' is not an integer"),
    (_line(target_ind=3), r"trn.json.gz:2: 'target_ind' must be a list"),
    (_line(title=...), r"trn.json.gz:2: record has no 'title'"),
    (_line(title=None), r"trn.json.gz:2: 'title' must be a string"),
    (_line(content=7), r"trn.json.gz:2: 'content' must be a string"),
    ("[1, 2]", r"trn.json.gz:2: expected a JSON object, got list"),
    ("", r"trn.json.gz:2: empty line"),
]


@pytest.mark.parametrize("bad,message", BAD)
def test_malformed_line_names_file_and_line(tmp_path, bad, message):
    path = tmp_path / "trn.json.gz"
    _write_raw(path, [_line(), bad, _line()])
    with pytest.raises(DataFormatError, match=message) as info:
        list(read_lf_chunks(path, n_labels=5))
    assert info.value.line == 2 and info.value.path == str(path)


@pytest.mark.parametrize(
    "bad,message",
    [
        (
            b'{"uid": "u", "title": "caf\xe9", "target_ind": [0]}',
            r"trn.json.gz:2: not valid UTF-8 \(byte 0xe9 at column 27\)",
        ),
        (_line(target_ind=[True]).encode(), r"trn.json.gz:2: label index True in 'target_ind' is not an integer"),
    ],
)
def test_prepare_reader_names_bad_bytes_and_booleans(tmp_path, bad, message):
    path = tmp_path / "trn.json.gz"
    path.write_bytes(gzip.compress(b"\n".join([_line().encode(), bad, _line().encode()]) + b"\n"))
    with pytest.raises(DataFormatError, match=message):
        list(jsonl.read_columns(path, text="title", n_labels=5, targets=True, what="t", progress=False))
    with pytest.raises(DataFormatError, match=message):
        list(read_lf_chunks(path, n_labels=5))


def test_errors_found_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl, "_CHUNK_BYTES", 64)  # many small chunks: line numbers must carry over
    monkeypatch.setattr(jsonl, "_READ_SIZE", 50)
    path = tmp_path / "trn.json.gz"
    lines = [_line(uid=str(i), target_ind=[i % 5]) for i in range(300)]
    _write_raw(path, lines)
    chunks = list(read_lf_chunks(path, n_labels=5))
    assert len(chunks) > 10
    assert sum(len(c) for c in chunks) == 300
    assert [c.first_line for c in chunks] == list(np.cumsum([1] + [len(c) for c in chunks[:-1]]))
    assert np.concatenate([c.target_indices for c in chunks]).tolist() == [i % 5 for i in range(300)]
    lines[250] = _line(target_ind=[9])
    _write_raw(path, lines)
    with pytest.raises(DataFormatError) as info:
        list(read_lf_chunks(path, n_labels=5))
    assert info.value.line == 251
    lines[250] = _line()
    lines[120] = ""
    _write_raw(path, lines)
    with pytest.raises(DataFormatError, match="empty line") as info:
        list(read_lf_chunks(path, n_labels=5))
    assert info.value.line == 121


def test_trailing_blank_lines_crlf_and_no_final_newline(tmp_path):
    path = tmp_path / "trn.json"
    path.write_bytes((_line(uid="x") + "\r\n" + _line(uid="y") + "\r\n\r\n\n").encode())
    assert [r["uid"] for r in iter_records(path)] == ["x", "y"]
    path.write_bytes((_line(uid="x") + "\n" + _line(uid="y")).encode())
    assert [r["uid"] for r in iter_records(path)] == ["x", "y"]
    path.write_bytes(b"")
    assert list(iter_records(path)) == []


@pytest.mark.parametrize("compress", [True, False])
def test_blank_lines_at_chunk_boundaries(tmp_path, monkeypatch, compress):
    monkeypatch.setattr(jsonl, "_CHUNK_BYTES", 1)  # every block is a chunk
    monkeypatch.setattr(jsonl, "_READ_SIZE", 3)
    path = tmp_path / "trn.json.gz"
    _write_raw(path, [_line(uid="a"), _line(uid="b"), "", "  ", ""], compress=compress)
    assert [r["uid"] for r in iter_records(path)] == ["a", "b"]
    _write_raw(path, ["", _line(uid="a")], compress=compress)
    with pytest.raises(DataFormatError, match="empty line") as info:
        list(iter_records(path))
    assert info.value.line == 1
    _write_raw(path, [_line(uid="a"), "", "", _line(uid="b"), ""], compress=compress)
    with pytest.raises(DataFormatError, match="empty line") as info:
        list(iter_records(path))
    assert info.value.line == 2


@pytest.fixture(params=["isal", "zlib"])
def inflate(request, monkeypatch):
    """Both decompressors: ISA-L when installed (the default), and zlib, the fallback without it."""
    if request.param == "isal":
        isal_zlib = pytest.importorskip("isal.isal_zlib")
        monkeypatch.setattr(jsonl, "inflate", isal_zlib)
    else:
        monkeypatch.setattr(jsonl, "inflate", zlib)
    return request.param


def test_both_decompressors_give_the_same_bytes(tmp_path, inflate):
    path = tmp_path / "trn.json.gz"
    lines = [_line(uid=str(i), title="t" * (i % 97)) for i in range(20000)]
    _write_raw(path, lines)
    assert b"".join(jsonl.RawReader(path)) == "".join(line + "\n" for line in lines).encode()


def test_concatenated_gzip_members(tmp_path, inflate):
    path = tmp_path / "trn.json.gz"
    path.write_bytes(gzip.compress((_line(uid="a") + "\n").encode()) + gzip.compress((_line(uid="b") + "\n").encode()))
    assert [r["uid"] for r in iter_records(path)] == ["a", "b"]


def test_truncated_and_corrupt_gzip(tmp_path, inflate):
    path = tmp_path / "trn.json.gz"
    data = gzip.compress("".join(_line(uid=str(i)) + "\n" for i in range(2000)).encode())
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match="truncated"):
        list(read_lf_chunks(path))
    path.write_bytes(data[:20] + b"\x00" * 64 + data[84:])
    with pytest.raises(DataFormatError, match="corrupt gzip"):
        list(read_lf_chunks(path))


@pytest.mark.parametrize("read_size", [1, 3, 1 << 20])  # members, padding and magic split across reads
def test_zero_padding_is_accepted_and_trailing_garbage_is_not(tmp_path, inflate, monkeypatch, read_size):
    monkeypatch.setattr(jsonl, "_READ_SIZE", read_size)
    path = tmp_path / "trn.json.gz"
    a, b = (gzip.compress((_line(uid=u) + "\n").encode()) for u in "ab")
    for ok in (a + b"\0" * 5, a + b"\0" * 3 + b, a + b + b"\0"):  # gzip and Python's gzip accept these
        path.write_bytes(ok)
        assert [r["uid"] for r in iter_records(path)] == ["a", "b"][: 1 + (b in ok)]
    for bad in (a + b"garbage", a + b"\0\0x", a + b"\x1f", a + b + b"\x1f\x8c rest"):
        path.write_bytes(bad)
        with pytest.raises(DataFormatError, match="bytes after the end of the gzip data"):
            list(read_lf_chunks(path))


def test_lone_surrogate_is_kept_not_fatal(tmp_path):
    path = tmp_path / "trn.json"
    path.write_bytes(b'{"title": "bad \\ud800 char", "target_ind": [0]}\n')
    assert [r["title"] for r in iter_records(path)] == ["bad \ud800 char"]


def test_read_text_lines(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_bytes("one &amp; two\r\n\nthree\u2028same line\n".encode())
    assert read_text_lines(path) == ["one & two", "", "three\u2028same line"]
    path.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(DataFormatError, match="texts.txt:2: not valid UTF-8"):
        read_text_lines(path)
    path.write_bytes(b"\xef\xbb\xbfair_transport\r\nbeef\r\n")  # label_map.txt as Notepad saves it
    assert read_text_lines(path) == ["air_transport", "beef"]


def test_label_names_lose_blank_lines_at_the_end_only(tmp_path):
    """A blank line at the end of labels.txt / Yf.txt is not a label with an empty name (5 labels
    for 3); a blank line between names stays, since line i is label i."""
    path = tmp_path / "labels.txt"
    path.write_bytes(b"music\nrock_band\njazz\n\n \r\n\n")
    assert read_name_lines(path) == ["music", "rock_band", "jazz"]
    path.write_bytes(b"music\n\njazz\n")
    assert read_name_lines(path) == ["music", "", "jazz"]
    path.write_bytes(b"\n\n")
    assert read_name_lines(path) == []


def test_writer_is_atomic_and_deterministic(tmp_path):
    path = tmp_path / "out.json.gz"

    def failing():
        yield RECORDS[0]
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_lf_json(path, failing())
    assert list(tmp_path.iterdir()) == []
    a = write_lf_json(tmp_path / "a.json.gz", RECORDS).read_bytes()
    b = write_lf_json(tmp_path / "b.json.gz", RECORDS).read_bytes()
    assert a == b
