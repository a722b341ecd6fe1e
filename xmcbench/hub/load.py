"""``xmcbench.hub.load(repo)``: a pushed model back as a working predictor.

The repo is downloaded with ``snapshot_download`` (cache under ``$XMCBENCH_HOME/hub``), the
method's own saved layout is rebuilt from it (the encoder folder at the root, the label arrays
from ``xmcbench/label_embeddings.safetensors``, method files as they are) and the method's own
``load`` reads it, so predictions come from exactly the code that produced the run's scores.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from xmcbench import paths
from xmcbench.encoders.hub_ref import HF_SCHEME, download_checkpoint
from xmcbench.errors import XmcbenchError
from xmcbench.hub.folder import FORMAT_VERSION, METHOD_PARTS, MODEL_JSON, MODEL_SUBDIR
from xmcbench.recipe import Recipe

NOT_ENCODER = {"README.md", "record.json", "recipe.yaml", ".gitattributes", "hub.json"}


@dataclass
class HubModel:
    """A published model: ``predict`` top-k labels, ``evaluate`` on its dataset."""

    repo: str
    commit: str | None
    path: Path  # the downloaded snapshot
    method: object  # the xmcbench method, loaded
    recipe: Recipe
    meta: dict
    label_ids: np.ndarray  # (L,) dataset label of each label row

    @property
    def encoder(self):
        return getattr(self.method, "encoder", None) or self.method.model.encoder

    @property
    def record(self) -> dict:
        return json.loads((self.path / "record.json").read_text(encoding="utf-8"))

    def predict(self, texts: Sequence[str], k: int = 10, device: str = "cpu") -> sparse.csr_matrix:
        """(N, L) CSR of the top-k scores per text; column j is the dataset's label j.

        Texts are encoded in the precision the run predicted in (its record), where ``device`` has it.
        """
        from xmcbench.methods.base import RunContext
        from xmcbench.train.precision import resolve_precision

        recorded = self.record.get("compute", {}).get("precision") or "fp32"
        # quiet: a prediction, not a run to record, and it may be called many times
        precision = resolve_precision(recorded, device, quiet=True)
        ctx = RunContext(run_dir=self.path, device=device, precision=precision, progress=False)
        pred = self.method.predict(list(texts), k, ctx).tocsr()
        pred.indices = self.label_ids[pred.indices].astype(pred.indices.dtype)
        pred.has_sorted_indices = False
        return pred

    def evaluate(
        self, dataset: str | None = None, split: str | None = None, device: str = "cpu", k: Sequence[int] | None = None
    ) -> dict[str, float]:
        """Score on ``dataset``/``split`` (default: the run's) as a run does: filter pairs removed, top-k, metrics."""
        from xmcbench import metrics
        from xmcbench.data import load_dataset
        from xmcbench.search.sparse_topk import remove_pairs, topk_csr

        ev = self.recipe.evaluation
        name = dataset or self.meta.get("dataset")
        split = split or ev.split
        data = load_dataset(name, download=False, progress=False)
        if data.n_labels != self.label_ids.size:
            raise XmcbenchError(f"{self.repo} has {self.label_ids.size} labels but dataset {name} has {data.n_labels}")
        truth, filt, texts = data.labels(split), data.filter(split), data.query_texts(split)
        if ev.max_queries is not None and ev.max_queries < truth.shape[0]:
            # the run's seeded subsample (xmcbench.run.phases.eval_rows)
            rows = np.sort(
                np.random.default_rng(self.recipe.training.seed).choice(
                    truth.shape[0], size=ev.max_queries, replace=False
                )
            )
            truth, filt = truth[rows], (filt[rows] if filt is not None else None)
            texts = [texts[int(i)] for i in rows]
        slack = int(np.diff(filt.indptr).max()) if filt is not None and filt.nnz else 0
        pred = self.predict(list(texts), min(ev.top_k + slack, data.n_labels), device)
        pred = topk_csr(remove_pairs(pred, filt), ev.top_k)
        a = ev.propensity_a if ev.propensity_a is not None else data.spec.propensity_a
        b = ev.propensity_b if ev.propensity_b is not None else data.spec.propensity_b
        use_ps = any(m in ev.metrics for m in ("PSP", "PSnDCG"))
        inv = metrics.inv_propensity(data.labels("train"), a, b) if use_ps else None
        return metrics.evaluate(pred, truth, k=tuple(k or ev.k), inv_propensity=inv, metrics=tuple(ev.metrics))


def load(repo: str | os.PathLike, *, revision: str | None = None) -> HubModel:
    """Download ``repo`` (ORG/NAME, hf://ORG/NAME[@REV], or a local folder a push built) and rebuild its predictor."""
    text = str(repo)
    if Path(text).expanduser().is_dir():
        folder, commit, name = Path(text).expanduser(), None, text
    else:
        name = text if text.lower().startswith(HF_SCHEME) else HF_SCHEME + text
        ckpt = download_checkpoint(name, revision)
        folder, commit = ckpt.path, ckpt.commit
    meta_path = folder / MODEL_SUBDIR / MODEL_JSON
    if not meta_path.is_file():
        raise XmcbenchError(
            f"{name} is not an xmcbench model (no {MODEL_SUBDIR}/{MODEL_JSON}); "
            "load a plain encoder with SentenceTransformer or an hf:// encoder in a recipe"
        )
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT_VERSION:
        raise XmcbenchError(f"{name}: model format {meta.get('format')} is not {FORMAT_VERSION}; upgrade xmcbench")
    method_name = meta.get("method")
    if method_name not in METHOD_PARTS:
        raise XmcbenchError(f"{name}: unknown method {method_name!r} in {MODEL_SUBDIR}/{MODEL_JSON}")
    recipe = _recipe(folder / "recipe.yaml")
    model_dir, label_ids = _rebuild(folder, meta, commit)

    from xmcbench.methods import METHODS

    method = METHODS.get(method_name)(recipe.method_config(), recipe)
    method.load(model_dir)
    return HubModel(name, commit, folder, method, recipe, meta, label_ids)


def _recipe(path: Path) -> Recipe:
    import yaml
    from pydantic import ValidationError

    from xmcbench.methods import METHODS

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        method = dict(data["method"])
        config = METHODS.get(method.pop("name")).Config.model_validate(method)
        return Recipe.model_validate(data).bind_method_config(config)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValidationError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise XmcbenchError(f"{path}: the published recipe cannot be read ({first})") from None


def _rebuild(folder: Path, meta: dict, commit: str | None) -> tuple[Path, np.ndarray]:
    """The method's saved layout (what ``method.save`` wrote) from the published files, cached per commit."""
    from safetensors.numpy import load_file

    key = commit or hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    target = paths.cache_dir() / "hub-models" / key
    parts = METHOD_PARTS[meta["method"]]
    tensors = load_file(str(folder / meta["label_embeddings"]["file"]))
    label_ids = np.asarray(tensors["label_ids"], dtype=np.int64)
    if (target / ".complete").exists() and commit is not None:
        return target, label_ids
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "encoder").mkdir(parents=True)
    for item in folder.iterdir():
        if item.name in NOT_ENCODER or item.name == MODEL_SUBDIR:
            continue
        dest = tmp / "encoder" / item.name
        if item.is_dir():
            shutil.copytree(item, dest)
        else:
            shutil.copyfile(item, dest)
    for npy, tensor in parts["arrays"].items():
        if tensor not in tensors:
            raise XmcbenchError(f"{folder}: {meta['label_embeddings']['file']} has no tensor {tensor!r}")
        np.save(tmp / npy, tensors[tensor])
    for name in parts["copy"]:
        shutil.copyfile(folder / MODEL_SUBDIR / name, tmp / name)
    (tmp / ".complete").touch()
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, target)
    return target, label_ids
