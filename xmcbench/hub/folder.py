"""The folder a push uploads, built from a finished run's ``checkpoints/model``.

Layout (one repo per trained model)::

    README.md                       model card (card.py)
    config.json, model.safetensors, tokenizer*, vocab.txt, modules.json,
    sentence_bert_config.json, config_sentence_transformers.json, 1_Pooling/, [2_Dense/], [N_Normalize/]
                                    the trained encoder as a sentence-transformers folder at the root,
                                    so ``SentenceTransformer("ORG/NAME")`` loads it as it is
    xmcbench/model.json             what xmcbench.hub.load needs: method, format, encoder settings, files
    xmcbench/label_embeddings.safetensors
                                    the label side of the search with ``label_ids`` (row i scores label
                                    label_ids[i] of the dataset's label list)
    xmcbench/heads.safetensors, xmcbench/unidec.json                      UniDEC: g1, g2 and Ψ
    xmcbench/prototype_network.safetensors, xmcbench/prototype_network.json
                                    PRIME: the prototype layer, centroids, free vectors, label->vector map
    record.json, recipe.yaml        the run's record and resolved recipe (secrets masked, local paths cut)

Arrays become safetensors (the Hub's weight format, loadable without pickle); method files that
already are safetensors are copied byte for byte so a download can be compared with the run.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import atomic_write, to_json
from xmcbench.redact import publishable

FORMAT_VERSION = 1
MODEL_SUBDIR = "xmcbench"
MODEL_JSON = "model.json"
LABEL_FILE = "label_embeddings.safetensors"

# method -> the arrays of its saved model (npy file -> tensor name) and the files copied as they are.
METHOD_PARTS: dict[str, dict] = {
    "dexml": {"arrays": {"label_embeddings.npy": "embeddings"}, "copy": []},
    "unidec": {
        "arrays": {"label_de.npy": "label_de", "label_clf.npy": "label_clf"},
        "copy": ["heads.safetensors", "unidec.json"],
    },
    "prime": {
        "arrays": {"label_prototypes.npy": "prototypes"},
        "copy": ["prototype_network.safetensors", "prototype_network.json"],
    },
}
ENCODER_DIR = "encoder"
# what TextEncoder.save writes and a sentence-transformers load needs; weights in one file or sharded
ENCODER_FILES = ("config.json", "modules.json", "tokenizer_config.json", "1_Pooling/config.json")
ENCODER_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


@dataclass
class PushFolder:
    path: Path
    files: list[str]  # relative paths, sorted

    def size(self) -> int:
        return sum((self.path / f).stat().st_size for f in self.files)


def check_model_files(model_dir: Path, method: str) -> None:
    """Refuse a run whose saved model is incomplete before anything is written or uploaded."""
    if method not in METHOD_PARTS:
        known = ", ".join(sorted(METHOD_PARTS))
        raise XmcbenchError(
            f"method {method!r} has no trained model to publish (push supports {known}): it trains nothing, "
            "so its scores alone can be shared, with `xmcbench push-results`"
        )
    parts = METHOD_PARTS[method]
    needed = [f"{ENCODER_DIR}/{name}" for name in ENCODER_FILES] + [*parts["arrays"], *parts["copy"]]
    missing = [f for f in needed if not (model_dir / f).is_file()]
    if not any((model_dir / ENCODER_DIR / name).is_file() for name in ENCODER_WEIGHTS):
        # without weights the folder would still upload, and SentenceTransformer(repo) would fail later
        missing.append(f"{ENCODER_DIR}/{ENCODER_WEIGHTS[0]}")
    if not (model_dir / ENCODER_DIR).is_dir() or missing:
        raise XmcbenchError(
            f"the run's model files are missing in {model_dir} ({', '.join(missing) or ENCODER_DIR}); "
            "re-run or resume the run to write them"
        )


def build_folder(run_dir: Path, record: dict, recipe_text: str, out: Path, card_text: str) -> PushFolder:
    """Write the upload folder for ``run_dir`` into ``out`` (new, empty, or built before: replaced)."""
    method = record["model"]["method"]
    model_dir = run_dir / "checkpoints" / "model"
    check_model_files(model_dir, method)
    with building_out_dir(out, owned=built_push_folder, keep=run_dir) as folder:
        files = _build(model_dir, method, record, recipe_text, folder, card_text)
    return PushFolder(out.absolute(), files)


def _build(model_dir: Path, method: str, record: dict, recipe_text: str, out: Path, card_text: str) -> list[str]:
    from safetensors.numpy import save_file

    _copy_tree(model_dir / ENCODER_DIR, out)
    _write_st_config(out)

    sub = out / MODEL_SUBDIR
    sub.mkdir()
    parts = METHOD_PARTS[method]
    tensors = {}
    for npy, tensor in parts["arrays"].items():
        tensors[tensor] = np.ascontiguousarray(np.load(model_dir / npy), dtype=np.float32)
    n_labels = {t.shape[0] for t in tensors.values()}
    if len(n_labels) != 1:
        raise XmcbenchError(f"{model_dir}: the label arrays disagree on the number of labels ({sorted(n_labels)})")
    (n,) = n_labels
    tensors["label_ids"] = np.arange(n, dtype=np.int64)
    # One metadata key: safetensors writes its metadata map in hash order, and a file whose bytes change
    # between two pushes of the same run would be uploaded (and committed) again.
    about = json.dumps(
        {"dataset": record["task"].get("dataset"), "dataset_version": record["task"].get("dataset_version")},
        sort_keys=True,
    )
    save_file(tensors, str(sub / LABEL_FILE), metadata={"xmcbench": about})
    for name in parts["copy"]:
        shutil.copyfile(model_dir / name, sub / name)

    recipe_enc = _recipe_encoder(recipe_text)
    meta = {
        "format": FORMAT_VERSION,
        "library": "xmcbench",
        "method": method,
        "run_id": record["run_id"],
        "dataset": record["task"].get("dataset"),
        "dataset_version": record["task"].get("dataset_version"),
        "n_labels": n,
        "encoder": {k: recipe_enc.get(k) for k in ("pooling", "normalize", "max_length", "label_max_length")},
        "label_embeddings": {
            "file": f"{MODEL_SUBDIR}/{LABEL_FILE}",
            "tensors": sorted(t for t in tensors if t != "label_ids"),
            "label_ids": "label_ids",
        },
        "files": [f"{MODEL_SUBDIR}/{name}" for name in parts["copy"]],
    }
    atomic_write(sub / MODEL_JSON, to_json(meta) + "\n")
    atomic_write(out / "record.json", to_json(publishable(record)) + "\n")
    atomic_write(out / "recipe.yaml", publishable(recipe_text))
    atomic_write(out / "README.md", card_text)
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != BUILDING)


BUILDING = ".xmcbench-building"  # in an upload folder while it is being built; never uploaded


@contextmanager
def building_out_dir(out: Path, owned: Callable[[Path], bool], keep: Path | None = None) -> Iterator[Path]:
    """``out`` emptied to build an upload in, when it is new, empty, or a folder xmcbench built.

    ``out`` comes from the user (``--out``): a typo or ``--out .`` must never delete their files, the
    run itself, or more (``--out /``); anything else that is not empty is refused untouched. The
    folder is built in place (a mount point or a folder in a read-only parent works, and keeps its
    owner and mode) under a marker file that stays if the build stops half-way (a full disk,
    Ctrl-C), so the next push knows the half-built folder as its own and builds it again.
    """
    out = out.absolute()
    resolved = out.resolve()
    if keep is not None:
        keep = keep.resolve()
        if resolved == keep or resolved in keep.parents or keep in resolved.parents:
            raise XmcbenchError(f"--out {out} overlaps the run folder {keep}; give a folder outside the run")
    try:
        if out.is_symlink() or (out.exists() and not out.is_dir()):
            raise XmcbenchError(f"--out {out} exists and is not a folder; give a new or empty folder")
        if out.is_dir() and any(out.iterdir()):
            if not ((out / BUILDING).is_file() or owned(out)):
                raise XmcbenchError(
                    f"--out {out} is not empty and is not a folder xmcbench built; "
                    "give a new or empty folder (nothing in it was touched)"
                )
        out.mkdir(parents=True, exist_ok=True)
        (out / BUILDING).touch()
        for entry in out.iterdir():  # an earlier build's files (this folder is xmcbench's)
            if entry.name == BUILDING:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        yield out
        (out / BUILDING).unlink()
    except OSError as exc:  # a full disk, a read-only --out: the user's to fix, not a bug
        raise XmcbenchError(f"cannot write the upload folder {out}: {exc.strerror or exc}") from None


def built_push_folder(folder: Path) -> bool:
    """A folder ``build_folder`` made: its model.json says so, and it is not a git clone (whose history a
    rebuild would throw away)."""
    try:
        meta = json.loads((folder / MODEL_SUBDIR / MODEL_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("library") == "xmcbench" and not (folder / ".git").exists()


def _copy_tree(src: Path, dst: Path) -> None:
    for item in src.rglob("*"):
        target = dst / item.relative_to(src)
        if item.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(item, target)


def _write_st_config(folder: Path) -> None:
    """sentence-transformers writes this file itself; xmcbench's encoder.save does not, the Hub expects it."""
    target = folder / "config_sentence_transformers.json"
    if target.exists():
        return
    from importlib import metadata

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    config = {
        "__version__": {
            "sentence_transformers": version("sentence-transformers") or "3.0.0",
            "transformers": version("transformers"),
            "pytorch": version("torch"),
        },
        "prompts": {},
        "default_prompt_name": None,
        # xmcbench's dual encoders score by inner product of (normalised) embeddings
        "similarity_fn_name": "dot",
    }
    target.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def _recipe_encoder(recipe_text: str) -> dict:
    import yaml

    try:
        data = yaml.safe_load(recipe_text) or {}
    except yaml.YAMLError:
        raise XmcbenchError("the run's recipe.yaml is damaged; it cannot be published") from None
    enc = data.get("encoder") if isinstance(data, dict) else None
    return enc if isinstance(enc, dict) else {}
