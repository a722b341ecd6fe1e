"""The four phases of a run, in order: prepare -> train -> predict -> evaluate.

Each phase reads what the previous one left and writes its facts into the live record; the
runner times them, marks them done and saves the record between them, which is what lets a
resumed run skip what an earlier attempt finished.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from xmcbench import metrics
from xmcbench.data import PreparedDataset, load_dataset
from xmcbench.errors import XmcbenchError
from xmcbench.faults import first_line
from xmcbench.fsutil import atomic_output, install_dir, temp_path
from xmcbench.methods import METHODS
from xmcbench.methods.base import RunContext, TrainTask
from xmcbench.recipe import Recipe
from xmcbench.store.record import EVAL_ROWS_FILE, PREDICTIONS_FILE

log = logging.getLogger("xmcbench.run")

MODEL_DIR = "model"  # inside checkpoints/: the fitted model, written when fit completes


@dataclass
class EvalData:
    """What prediction and evaluation need from the dataset, after subsampling (``max_queries``)."""

    dataset: PreparedDataset
    train_truth: sparse.csr_matrix
    inv_prop: np.ndarray
    truth: sparse.csr_matrix
    filter: sparse.csr_matrix | None
    texts: Sequence[str]


def ensure_dataset(recipe: Recipe, progress: bool = True) -> PreparedDataset:
    """The recipe's prepared dataset, synthesised or downloaded first when the recipe allows."""
    ds = recipe.dataset
    synthetic = ds.synthetic.model_dump() if ds.synthetic is not None else None
    return load_dataset(ds.name, download=True, source=ds.source, synthetic=synthetic, progress=progress)


def build_train_task(
    recipe: Recipe, dataset: PreparedDataset, inv_prop: np.ndarray, with_titles: bool = False
) -> TrainTask:
    """The training side as the supervision regime lets the method see it.

    zero_shot: no label array at all (``train_labels`` and ``seen_labels`` are None).
    few_shot: ``label_fraction`` of the labels drawn with ``supervision.seed``; every training
    pair of a drawn label is kept and no other (evaluation still uses every label and the full
    test set, as MACLR's FS-XMC protocol does). ``supervision`` records what was kept.
    ``with_titles``: also hand over each training instance's raw title and body (ICT material).
    """
    sup = recipe.supervision
    labels = dataset.labels("train")
    seen = None
    if sup.mode == "zero_shot":
        labels = None
    elif sup.mode == "few_shot":
        rng = np.random.default_rng(sup.seed)
        n_keep = max(1, int(round(sup.label_fraction * dataset.n_labels)))
        seen = np.zeros(dataset.n_labels, dtype=bool)
        seen[rng.choice(dataset.n_labels, size=n_keep, replace=False)] = True
        labels = sparse.csr_matrix(labels.multiply(seen[None, :].astype(np.float32)))
        labels.eliminate_zeros()
    summary = {
        "mode": sup.mode,
        "label_fraction": sup.label_fraction,
        "labels_sampled": int(seen.sum()) if seen is not None else None,
        "train_pairs": int(labels.nnz) if labels is not None else 0,
        "train_queries_with_labels": int(np.count_nonzero(np.diff(labels.indptr))) if labels is not None else 0,
    }
    titles, contents = _titles_and_contents(dataset) if with_titles else (None, None)
    return TrainTask(
        dataset_name=dataset.name,
        train_texts=dataset.query_texts("train"),
        label_texts=dataset.label_texts(),
        train_labels=labels,
        seen_labels=seen,
        inv_propensity=inv_prop,
        dataset_version=dataset.version,
        train_titles=titles,
        train_contents=contents,
        supervision=summary,
    )


# raw records with separate title and content fields (zestxml-raw: assumed, see its module)
TITLED_FORMATS = ("lf-json", "lf-wikipedia-raw", "zestxml-raw")


def _titles_and_contents(dataset: PreparedDataset) -> tuple[list[str] | None, list[str] | None]:
    """Raw titles and bodies of the training instances, in prepared order; (None, None) without titles."""
    from xmcbench import paths
    from xmcbench.data.formats import get_format
    from xmcbench.data.formats.lf_json import read_lf_chunks
    from xmcbench.data.raw import find_raw_file

    spec = dataset.spec
    if spec.format not in TITLED_FORMATS:
        return None, None
    name = get_format(spec.format).split_files["train"]
    path = find_raw_file(paths.dataset_raw_dir(spec.raw_group), name)
    if path is None:
        raise XmcbenchError(
            f"dataset {spec.name}: the raw file {name} (instance titles) is not here; "
            f"run `xmcbench datasets download {spec.name}`"
        )
    if spec.format == "zestxml-raw":
        from xmcbench.data.formats.zestxml import read_titles_and_contents

        titles, contents = read_titles_and_contents(path)
        return (titles, contents) if any(titles) else (None, None)
    titles, contents = [], []
    for chunk in read_lf_chunks(path, targets=False):
        titles += chunk.titles
        contents += chunk.contents
    return titles, contents


def eval_rows(recipe: Recipe, n: int) -> np.ndarray | None:
    """The seeded subsample of ``max_queries`` rows to evaluate, or None for all."""
    m = recipe.evaluation.max_queries
    if m is None or m >= n:
        return None
    rng = np.random.default_rng(recipe.training.seed)
    return np.sort(rng.choice(n, size=m, replace=False))


def prepare(recipe: Recipe, record: dict[str, Any], run_dir: Path, progress: bool) -> EvalData:
    dataset = ensure_dataset(recipe, progress)
    ev = recipe.evaluation
    beyond = [k for k in ev.k if k > dataset.n_labels]
    if beyond:
        # Kept (the MACLR smoke recipes report R@100 over 40 labels: recall over every label), but
        # P@k there divides by more labels than any model can predict, so say it once up front.
        log.warning(
            "evaluation.k %s: more than the %s labels of %s; P@k and nDCG@k there count at most %s "
            "correct labels (R@k is recall over every label)",
            ", ".join(map(str, beyond)),
            f"{dataset.n_labels:,}",
            dataset.name,
            f"{dataset.n_labels:,}",
        )
    split = ev.split
    a = ev.propensity_a if ev.propensity_a is not None else dataset.spec.propensity_a
    b = ev.propensity_b if ev.propensity_b is not None else dataset.spec.propensity_b
    train_truth = dataset.labels("train")
    inv_prop = metrics.inv_propensity(train_truth, a, b)
    truth = dataset.labels(split)
    filt = dataset.filter(split)
    rows = eval_rows(recipe, truth.shape[0])
    texts = dataset.query_texts(split)
    if rows is not None:
        with atomic_output(run_dir / EVAL_ROWS_FILE) as tmp, open(tmp, "wb") as fh:
            np.save(fh, rows)  # so `compare` can rebuild the same truth
        truth = truth[rows]
        filt = filt[rows] if filt is not None else None
        texts = [texts[int(i)] for i in rows]
    record["task"].update(
        dataset=dataset.name,
        dataset_version=dataset.version,
        n_queries=int(dataset.labels(split).shape[0]),
        n_queries_evaluated=int(truth.shape[0]),
        n_labels=int(dataset.n_labels),
        propensity_a=a,
        propensity_b=b,
        filter=(f"filter_labels_{split}.txt" if filt is not None else None),
    )
    return EvalData(dataset, train_truth, inv_prop, truth, filt, texts)


def train(recipe: Recipe, data: EvalData, ctx: RunContext, done: list[str], is_main: bool):
    """Fit the method, or load the model an earlier attempt finished fitting."""
    method_cls = METHODS.get(recipe.method.name)
    if method_cls.requires_labels and recipe.supervision.mode == "zero_shot":
        raise XmcbenchError(f"method {recipe.method.name} needs training labels; it cannot run zero_shot")
    if method_cls.requires_labels and recipe.training.epochs == 0:  # the supervised methods train for epochs
        log.warning(
            "training.epochs is 0: %s takes no training step; its scores are those of the encoder it starts from",
            recipe.method.name,
        )
    method = method_cls(recipe.method_config(), recipe)
    model_dir = ctx.checkpoint_dir / MODEL_DIR
    if "train" in done and model_dir.exists():
        try:
            method.load(model_dir)
            return method
        except Exception as exc:  # noqa: BLE001 - sorted just below: damage is refitted, anything else raised
            if not _damaged_file(exc):
                raise
            log.warning(
                "the trained model in %s cannot be read (%s); fitting again from the last training checkpoint",
                model_dir,
                first_line(exc),
            )
            method = method_cls(recipe.method_config(), recipe)
    task = build_train_task(recipe, data.dataset, data.inv_prop, with_titles=getattr(method_cls, "uses_titles", False))
    ctx.accounting["supervision"] = task.supervision
    method.fit(task, ctx)
    if is_main:
        # Written whole or not at all: a run killed mid-save keeps no half model to load later.
        tmp = temp_path(model_dir)
        method.save(tmp)
        install_dir(tmp, model_dir)
    return method


def predict(recipe: Recipe, method, data: EvalData, ctx: RunContext, done: list[str]) -> sparse.csr_matrix:
    """Top-k predictions with filter pairs removed; a few extra candidates make up for the removed ones."""
    from xmcbench.search.sparse_topk import remove_pairs, topk_csr

    pred_path = ctx.run_dir / PREDICTIONS_FILE
    if "predict" in done and pred_path.exists():
        try:
            return sparse.load_npz(pred_path).tocsr()
        except Exception as exc:  # noqa: BLE001 - sorted just below: damage is predicted again
            if not _damaged_file(exc):
                raise
            log.warning(
                "%s cannot be read (%s); predicting again",
                pred_path,
                first_line(exc),
            )
    k = recipe.evaluation.top_k
    filt = data.filter
    slack = int(np.diff(filt.indptr).max()) if filt is not None and filt.nnz else 0
    preds = method.predict(data.texts, min(k + slack, data.dataset.n_labels), ctx)
    preds = topk_csr(remove_pairs(preds, filt), k)
    with atomic_output(pred_path) as tmp, open(tmp, "wb") as fh:
        sparse.save_npz(fh, preds)
    return preds


def evaluate(recipe: Recipe, preds: sparse.csr_matrix, data: EvalData, record: dict[str, Any]) -> None:
    """Scores with bootstrap CIs, and per head/torso/tail group (filter pairs are already gone)."""
    ev = recipe.evaluation
    use_ps = any(m in ev.metrics for m in ("PSP", "PSnDCG"))
    inv_prop = data.inv_prop if use_ps else None
    scored = metrics.evaluate_with_ci(
        preds,
        data.truth,
        k=tuple(ev.k),
        inv_propensity=inv_prop,
        metrics=tuple(ev.metrics),
        n_boot=ev.bootstrap,
        seed=recipe.training.seed,
    )
    record["scores"] = [
        {
            "name": name,
            "metric": name.split("@")[0],
            "k": int(name.split("@")[1]),
            "value": float(value),
            "ci_lo": None if lo is None else float(lo),
            "ci_hi": None if hi is None else float(hi),
            "higher_is_better": True,
        }
        for name, (value, lo, hi) in scored.items()
    ]
    if ev.groups:
        groups = metrics.evaluate_by_group(
            preds,
            data.truth,
            data.train_truth,
            k=tuple(ev.k),
            inv_propensity=inv_prop,
            metrics=tuple(ev.metrics),
        )
        record["groups"] = {g: info["scores"] for g, info in groups.items()}
        record["group_sizes"] = {g: {"labels": info["labels"], "rows": info["rows"]} for g, info in groups.items()}


def _damaged_file(exc: BaseException) -> bool:
    """Whether loading failed because a file is missing, cut short or overwritten (fitting or
    predicting again restores it), not because of a bug or a lack of memory, which would only
    happen again after hours of training."""
    import pickle
    import zipfile

    from safetensors import SafetensorError

    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return False
    damage = (OSError, EOFError, ValueError, KeyError, pickle.UnpicklingError, zipfile.BadZipFile, SafetensorError)
    if isinstance(exc, (*damage, XmcbenchError)):
        return True
    # torch.load of a cut-short file: "PytorchStreamReader failed reading zip archive"
    return isinstance(exc, RuntimeError) and "pytorchstreamreader" in str(exc).lower()
