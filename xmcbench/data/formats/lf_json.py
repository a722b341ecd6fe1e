"""The ``lf-json`` format: the XC repository's JSON-lines files (``trn.json.gz``, ``lbl.json.gz``, ...).

One record per line: ``{"uid", "title", "content", "target_ind": [...], "target_rel": [...]}``;
``target_ind`` indexes the lines of the label file. Files may be gzip-compressed or plain; which
one is told by the gzip magic bytes, never by the file name.

Texts in the raw files carry HTML entities (``&#8217;``). They are decoded here, exactly once, at
read time (``html.unescape``), for queries and labels alike; nothing downstream decodes again.
``write_lines`` writes such files (gzip with a fixed header, atomically) for the synthetic generator.

The reader is built for 1M+-line files: a background thread reads and decompresses while the
main thread parses. ``prepare`` reads through ``read_columns``: blocks in the XC layout are cut
into columns straight from their bytes (``lf_json_columns``, several times faster); other blocks,
and ``read_lf_chunks``, parse records with orjson when it is installed (else the standard json
module) and hand them out in column-wise chunks (``LFChunk``), so only one chunk of dicts is alive
at a time. Malformed input raises ``DataFormatError`` naming the file, the line and the problem.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import gzip
import html
import itertools
import json
import queue
import threading
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import NoReturn

import numpy as np

from xmcbench import fsutil
from xmcbench.data.formats import Format, QueryChunk, compose_query_texts
from xmcbench.data.formats.lf_json_columns import ColumnBlock, parse_block
from xmcbench.data.text_blob import EncodedTexts
from xmcbench.errors import DataFormatError
from xmcbench.progress import task

try:  # orjson is several times faster than json on these files; json is the fallback.
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - exercised only where orjson is missing
    orjson = None
    _loads = json.loads

_TRAILING = "bytes after the end of the gzip data that are not gzip data: the file is damaged; download it again"

try:  # ISA-L's inflate gives the same bytes about twice as fast as zlib's; zlib is the fallback.
    from isal import isal_zlib as inflate
except ImportError:  # pragma: no cover - exercised only where isal is missing
    inflate = zlib

GZIP_MAGIC = b"\x1f\x8b"
# Blocks of ~3 MB (1 MB compressed): a block's many numpy passes then run in the core's L2 cache
# more often; 12 MB blocks cost prepare ~10% more CPU at LF-AmazonTitles-1.3M's size
_READ_SIZE = 1 << 20  # compressed bytes per read in the reader thread
_CHUNK_BYTES = 2 << 20  # decompressed bytes parsed per chunk (at least)
_PARSERS = 2  # blocks parsed at once by read_columns


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_maybe_gzip(path: Path):
    """A binary file object over the decompressed content of ``path`` (gzip detected by magic bytes)."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def read_text_lines(path: Path) -> list[str]:
    """A plain-text file (gzip or not) with one text per line, HTML-unescaped; line i is text i.

    Only ``\n`` separates lines (a stray ``\r`` or Unicode line separator inside a text must not
    shift the row alignment); a trailing ``\r`` is dropped; empty lines are empty texts.
    Raises DataFormatError naming the line if the file is not valid UTF-8.
    """
    try:
        with open_maybe_gzip(path) as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as exc:  # truncated or corrupt gzip
        raise DataFormatError(path, None, f"cannot read the file ({exc}); download it again") from None
    if not data:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataFormatError(
            path, line, f"not valid UTF-8 (byte 0x{data[exc.start]:02x}); re-save the file as UTF-8"
        ) from None
    text = text.removeprefix("\ufeff")  # the byte order mark Windows editors write: not part of text 0
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return unescape_texts([line[:-1] if line.endswith("\r") else line for line in lines])


def read_name_lines(path: Path) -> list[str]:
    """``read_text_lines`` of a file of label names, one per line: blank lines at its end (an editor's,
    or a writer's extra newline) are dropped, since a label has a name. Blank lines before the last
    name stay: line i is label i."""
    lines = read_text_lines(path)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def unescape_texts(texts: list[str]) -> list[str]:
    """``html.unescape`` each text; the '&' test skips the call for the many texts without entities."""
    return [html.unescape(t) if "&" in t else t for t in texts]


class RawReader:
    """Iterate the decompressed bytes of a (possibly gzipped) file in blocks.

    Reading and decompression (ISA-L, or zlib) run in a background thread (both release the GIL),
    overlapping with parsing in the caller. ``bytes_read`` counts the raw bytes read so far, out
    of ``size`` (for progress bars).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.size = self.path.stat().st_size
        self.bytes_read = 0

    def __iter__(self) -> Iterator[bytes]:
        blocks: queue.Queue = queue.Queue(maxsize=4)
        stop = threading.Event()
        thread = threading.Thread(target=self._produce, args=(blocks, stop), daemon=True)
        thread.start()
        try:
            while True:
                item = blocks.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            while thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    blocks.get(timeout=0.05)
                except queue.Empty:
                    pass
            thread.join()

    def _produce(self, blocks: queue.Queue, stop: threading.Event) -> None:
        def put(item) -> bool:
            while not stop.is_set():
                try:
                    blocks.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            with open(self.path, "rb") as f:
                compressed = f.read(2) == GZIP_MAGIC
                f.seek(0)
                gz, held = None, b""  # the member being inflated (None between members), bytes held back
                while True:
                    raw = f.read(_READ_SIZE)
                    if not raw:
                        break
                    self.bytes_read += len(raw)
                    if compressed:
                        out, gz, held = self._inflate_members(gz, held + raw)
                    else:
                        out = raw
                    if out and not put(out):
                        return
                if gz is not None:
                    raise DataFormatError(
                        self.path, None, "gzip data ends early (the file is truncated); download it again"
                    )
                if held:
                    raise DataFormatError(self.path, None, _TRAILING)
            put(None)
        except (zlib.error, inflate.error) as exc:
            put(DataFormatError(self.path, None, f"corrupt gzip data ({exc}); download the file again"))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put(exc)

    def _inflate_members(self, gz, data: bytes):
        """Inflate ``data`` into the member in progress and the members after it (a gzip file may
        hold several, with zero padding between them, as gzip and Python's gzip accept).

        Returns (output, the member still in progress or None, bytes held back: fewer than the two
        magic bytes that must start the next member). Anything else after a member is an error:
        zlib called it a bad header, and ISA-L would wait for more data and call it truncated.
        """
        out = []
        while data:
            if gz is None:  # between members
                data = data.lstrip(b"\0")
                if len(data) < len(GZIP_MAGIC):
                    return b"".join(out), None, data
                if data[: len(GZIP_MAGIC)] != GZIP_MAGIC:
                    raise DataFormatError(self.path, None, _TRAILING)
                gz = inflate.decompressobj(wbits=31)
            out.append(gz.decompress(data))
            data = gz.unused_data if gz.eof else b""
            if gz.eof:
                gz = None
        return b"".join(out), gz, b""


def iter_line_chunks(path: Path, reader: RawReader | None = None) -> Iterator[tuple[int, list[bytes]]]:
    """Yield ``(line number of the first line, lines)`` over the file, a few MB of lines at a time.

    Blank lines at the very end of the file are dropped. Any other blank line is yielded like a
    record line, so that the parser reports it (it would shift every later record's index).
    """
    next_line = 1
    for block in iter_blocks(path, reader):
        lines = block.split(b"\n")
        yield next_line, lines
        next_line += len(lines)


def iter_blocks(path: Path, reader: RawReader | None = None) -> Iterator[bytes]:
    """Yield blocks of a few MB of whole lines, each without its last newline.

    Blank lines at the very end of the file are dropped (``iter_line_chunks``).
    """
    reader = reader if reader is not None else RawReader(path)
    rest = b""
    pieces: list[bytes] = []
    pending = 0
    for block in reader:
        pieces.append(block)
        pending += len(block)
        if pending < _CHUNK_BYTES:
            continue
        buffer = rest + b"".join(pieces)
        pieces, pending = [], 0
        cut = _end_of_last_record(buffer)
        if cut < 0:
            rest = buffer
            continue
        rest = buffer[cut + 1 :]
        yield buffer[:cut]
    buffer = (rest + b"".join(pieces)).rstrip()
    if buffer:
        yield buffer


def _end_of_last_record(buffer: bytes) -> int:
    """Index of the newline ending the last complete non-blank line of ``buffer``, or -1.

    Blank lines after it are held back: they may turn out to be the harmless end of the file.
    """
    end = buffer.rfind(b"\n")
    if end < 0:
        return -1
    if end > 0 and not buffer[end - 1 : end].isspace():
        return end
    content_end = len(buffer[:end].rstrip())
    return buffer.find(b"\n", content_end) if content_end else -1


def _blank_line_error(path: Path, line: int) -> DataFormatError:
    return DataFormatError(path, line, "empty line; every line must hold one JSON record (remove blank lines)")


@dataclass
class LFChunk:
    """Consecutive records of an LF JSON-lines file, column-wise, texts already HTML-decoded."""

    first_line: int  # 1-based line number of the first record
    uids: list[str]
    titles: list[str]
    contents: list[str]
    target_counts: np.ndarray | None  # (n,) int64 labels per record; None when targets are not read
    target_indices: np.ndarray | None  # (sum of counts,) int64, record by record, as in the file

    def __len__(self) -> int:
        return len(self.titles)


def read_lf_chunks(
    path: Path,
    *,
    n_labels: int | None = None,
    targets: bool = True,
    reader: RawReader | None = None,
) -> Iterator[LFChunk]:
    """Stream an LF JSON-lines file as ``LFChunk``s.

    ``targets=False`` reads a label file (``lbl.json.gz``), whose records need no ``target_ind``.
    With ``n_labels`` every label index is checked to lie in ``[0, n_labels)``.
    Raises DataFormatError (file, line, problem) on: invalid JSON, a record that is not an
    object, a missing or non-string ``title``, a missing or non-list ``target_ind``, a label
    index that is not an integer, negative, or ``>= n_labels``.
    """
    path = Path(path)
    for first, lines in iter_line_chunks(path, reader):
        with _gc_paused():
            chunk = _columns(path, first, _parse_lines(path, first, lines), n_labels, targets)
        yield chunk


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while a chunk's dicts are built.

    Millions of fresh containers trigger collection after collection (parsing is 2-3x slower
    with it on); the records hold no reference cycles, so nothing is lost by pausing it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _parse_lines(path: Path, first: int, lines: list[bytes]) -> list:
    try:
        return list(map(_loads, lines))
    except ValueError:
        pass
    records = []
    for offset, line in enumerate(lines):
        if not line.strip():
            raise _blank_line_error(path, first + offset)
        try:
            records.append(_loads(line))
            continue
        except ValueError as exc:
            fast_error = exc
        try:  # json accepts what orjson refuses on principle (lone surrogates); keep such records
            records.append(json.loads(line))
        except ValueError:
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:  # say so: "not valid JSON (surrogates …)" misleads
                raise DataFormatError(
                    path,
                    first + offset,
                    f"not valid UTF-8 (byte 0x{line[exc.start]:02x} at column {exc.start + 1}); "
                    "re-save the file as UTF-8",
                ) from None
            raise DataFormatError(path, first + offset, f"not valid JSON ({fast_error})") from None
    return records


def _columns(path: Path, first: int, records: list, n_labels: int | None, targets: bool) -> LFChunk:
    try:  # map + itemgetter/methodcaller: C-level loops over the records
        titles = list(map(itemgetter("title"), records))
        contents = list(map(methodcaller("get", "content"), records))
        uids = list(map(methodcaller("get", "uid"), records))
        target_lists = list(map(itemgetter("target_ind"), records)) if targets else None
    except (KeyError, TypeError, AttributeError):
        _raise_record_error(path, first, records, n_labels, targets)
    if not set(map(type, titles)) <= {str}:
        _raise_record_error(path, first, records, n_labels, targets)
    if not set(map(type, contents)) <= {str}:
        if not set(map(type, contents)) <= {str, type(None)}:
            _raise_record_error(path, first, records, n_labels, targets)
        contents = ["" if c is None else c for c in contents]
    if not set(map(type, uids)) <= {str}:
        uids = ["" if u is None else u if isinstance(u, str) else str(u) for u in uids]
    counts = indices = None
    if target_lists is not None:
        if not set(map(type, target_lists)) <= {list}:
            _raise_record_error(path, first, records, n_labels, targets)
        counts = np.fromiter(map(len, target_lists), dtype=np.int64, count=len(target_lists))
        flat = list(itertools.chain.from_iterable(target_lists))
        if not set(map(type, flat)) <= {int}:  # numpy would read [true, 2] as [1, 2]
            _raise_record_error(path, first, records, n_labels, targets)
        try:
            indices = np.array(flat) if flat else np.empty(0, dtype=np.int64)
        except (ValueError, TypeError):  # a nested list among the indices: named below
            _raise_record_error(path, first, records, n_labels, targets)
        if indices.dtype.kind not in "iu" or (
            indices.size and (indices.min() < 0 or (n_labels is not None and indices.max() >= n_labels))
        ):
            _raise_record_error(path, first, records, n_labels, targets)
        indices = indices.astype(np.int64, copy=False)
    return LFChunk(first, uids, unescape_texts(titles), unescape_texts(contents), counts, indices)


def _raise_record_error(path: Path, first: int, records: list, n_labels: int | None, targets: bool) -> NoReturn:
    """Find the first bad record of a chunk and raise a DataFormatError naming its line."""
    for offset, r in enumerate(records):
        line = first + offset
        if not isinstance(r, dict):
            raise DataFormatError(path, line, f"expected a JSON object, got {type(r).__name__}")
        if "title" not in r:
            raise DataFormatError(path, line, "record has no 'title'")
        if not isinstance(r["title"], str):
            raise DataFormatError(path, line, f"'title' must be a string, got {type(r['title']).__name__}")
        if r.get("content") is not None and not isinstance(r["content"], str):
            raise DataFormatError(path, line, f"'content' must be a string, got {type(r['content']).__name__}")
        if not targets:
            continue
        if "target_ind" not in r:
            raise DataFormatError(path, line, "record has no 'target_ind' (the list of its label indices)")
        ind = r["target_ind"]
        if not isinstance(ind, list):
            raise DataFormatError(path, line, f"'target_ind' must be a list of label indices, got {type(ind).__name__}")
        for value in ind:
            if type(value) is not int:
                raise DataFormatError(path, line, f"label index {value!r} in 'target_ind' is not an integer")
            if value < 0:
                raise DataFormatError(path, line, f"negative label index {value} in 'target_ind'")
            if n_labels is not None and value >= n_labels:
                raise DataFormatError(
                    path,
                    line,
                    f"label index {value} in 'target_ind' is out of range: the label file has {n_labels} labels "
                    f"(valid indices 0..{n_labels - 1}); is this the label file of the same dataset?",
                )
    raise DataFormatError(path, first, "malformed records in this part of the file")  # pragma: no cover


def write_lines(path: Path, lines: Iterable[bytes], *, compress: bool = True, compresslevel: int = 6) -> Path:
    """Write byte lines (each ending in a newline) to ``path`` atomically, gzip with mtime 0 if ``compress``.

    Compression and writing run in a second thread (zlib releases the GIL), beside whatever
    produces ``lines``.
    """
    path = Path(path)
    with fsutil.atomic_output(path) as tmp, open(tmp, "wb") as raw, ThreadPoolExecutor(max_workers=1) as writer:
        out = (
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=compresslevel)
            if compress
            else raw
        )
        pending = None
        for batch in _batches(lines):
            if pending is not None:
                pending.result()  # one batch in flight: bounded memory, order kept
            pending = writer.submit(out.write, batch)
        if pending is not None:
            pending.result()
        if compress:
            out.close()
    return path


def _batches(lines: Iterable[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """Join lines into ~1 MB blocks (GzipFile.write per short line is slow)."""
    batch: list[bytes] = []
    pending = 0
    for line in lines:
        batch.append(line)
        pending += len(line)
        if pending >= size:
            yield b"".join(batch)
            batch, pending = [], 0
    if batch:
        yield b"".join(batch)


def read_columns(
    path: Path, *, text: str, n_labels: int | None, targets: bool, what: str, progress: bool
) -> Iterator[ColumnBlock]:
    """The columns ``prepare`` stores, block by block: texts (``text``: title or title+content) and
    uids as utf-8 bytes, label counts and indices.

    Blocks in the XC layout are cut out of the bytes by ``lf_json_columns.parse_block``; any other
    block goes through the general reader (``read_lf_chunks``'s parser), which raises the errors.
    Both give the same bytes.
    """
    reader = RawReader(path)
    next_line = 1  # of the next block to finish (error messages name lines)

    def finish(block: bytes, parsing) -> ColumnBlock:
        nonlocal next_line
        columns = parsing.result()
        if columns is None:
            columns = _general_columns(path, next_line, block, text, n_labels, targets)
        next_line += len(columns.texts)  # one record per line
        return columns

    # Two blocks are parsed at once: numpy releases the GIL in its passes over the bytes, so the
    # parsers overlap with each other and with the reader's decompression.
    with (
        task(f"{what} ({path.name}, MB)", total=round(reader.size / 1e6), enabled=progress) as advance,
        ThreadPoolExecutor(max_workers=_PARSERS) as pool,
    ):
        done = 0
        pending: collections.deque = collections.deque()
        for block in iter_blocks(path, reader):
            pending.append((block, pool.submit(parse_block, block, text=text, targets=targets, n_labels=n_labels)))
            if len(pending) > _PARSERS:
                yield finish(*pending.popleft())
            now = round(reader.bytes_read / 1e6)
            advance(now - done)
            done = now
        while pending:
            yield finish(*pending.popleft())


def _general_columns(
    path: Path, first: int, block: bytes, text: str, n_labels: int | None, targets: bool
) -> ColumnBlock:
    lines = block.split(b"\n")
    with _gc_paused():
        chunk = _columns(path, first, _parse_lines(path, first, lines), n_labels, targets)
    texts = compose_query_texts(chunk.titles, chunk.contents, text)
    indices = chunk.target_indices.astype(np.int32) if targets else None
    return ColumnBlock(
        EncodedTexts.from_strings(texts), EncodedTexts.from_strings(chunk.uids), chunk.target_counts, indices
    )


def read_query_chunks(spec, path: Path, split: str, n_labels: int, progress: bool) -> Iterator[QueryChunk]:
    """The queries of one LF JSON-lines split file, texts composed as ``spec.query_text`` says.

    Texts and uids come as ``EncodedTexts`` (utf-8 bytes), which ``prepare`` writes as they are.
    """
    for block in read_columns(
        path, text=spec.query_text, n_labels=n_labels, targets=True, what=f"{spec.name}: {split}", progress=progress
    ):
        yield QueryChunk(block.texts, block.uids, block.counts, block.indices)


def _read_labels(spec, files: dict[str, Path], progress: bool) -> Iterator[tuple[EncodedTexts, EncodedTexts]]:
    path = files["lbl.json.gz"]
    for block in read_columns(
        path, text="title", n_labels=None, targets=False, what=f"{spec.name}: labels", progress=progress
    ):
        yield block.texts, block.uids


def _read_split(spec, files: dict[str, Path], split: str, n_labels: int, progress: bool) -> Iterator[QueryChunk]:
    return read_query_chunks(spec, files[FORMAT.split_files[split]], split, n_labels, progress)


FORMAT = Format(
    name="lf-json",
    split_files={"train": "trn.json.gz", "test": "tst.json.gz"},
    required_files=("trn.json.gz", "tst.json.gz", "lbl.json.gz"),
    query_texts=("title", "title+content"),
    label_text="title",
    read_labels=_read_labels,
    read_split=_read_split,
)
