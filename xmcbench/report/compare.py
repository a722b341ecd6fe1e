"""Comparing two runs on the same queries: paired bootstrap differences with 95% intervals.

    from xmcbench.report.compare import compare_runs
    with Store.open(read_only=True) as store:
        result = compare_runs(store, "20261121-1015", "20261121-1120")
    for row in result.rows:
        print(row.name, row.diff, row.lo, row.hi, row.significant)

Both runs' saved top-k predictions (``predictions.npz``) are scored again against the dataset's
ground truth, resampling the *same* queries for both runs in every bootstrap replicate, so the
interval is about the difference itself (much narrower than comparing two separate CIs). A
difference whose interval excludes 0 is marked significant.

The runs must have been evaluated under the same conditions — dataset, split, dataset version,
propensity A/B and filter file — or the comparison is refused. Runs evaluated on a sample of the
test queries can be compared when both sampled the same queries, listed in ``eval_rows.npy`` in
the run directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xmcbench.errors import XmcbenchError
from xmcbench.store import Store
from xmcbench.store.record import EVAL_ROWS_FILE, PREDICTIONS_FILE

_SAME = ("dataset", "split", "dataset_version", "propensity_a", "propensity_b", "filter")
_DEFAULT_K = (1, 3, 5)


@dataclass(frozen=True)
class Difference:
    name: str  # "P@1"
    value_a: float  # each run's metric, recomputed from its predictions (percent)
    value_b: float
    diff: float  # a - b, percentage points
    lo: float  # 95% paired bootstrap interval of the difference
    hi: float

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.lo > 0 or self.hi < 0


@dataclass(frozen=True)
class Comparison:
    run_a: str
    run_b: str
    dataset: str
    split: str
    n_queries: int
    n_boot: int
    seed: int
    rows: list[Difference]
    one_sided: list[str] = field(default_factory=list)  # metrics only one run's record reports: not compared


def compare_runs(store: Store, run_a: str, run_b: str, n_boot: int = 1000, seed: int = 0) -> Comparison:
    """Paired bootstrap of every metric both runs report (ids or unique prefixes)."""
    from xmcbench import metrics
    from xmcbench.data.formats.xc_sparse import load_sparse

    a, b = store.get_run(run_a), store.get_run(run_b)
    if a["run_id"] == b["run_id"]:
        raise XmcbenchError(f"both arguments name run {a['run_id']}; give two different runs")
    _check_same_conditions(a, b)
    task = a["record"]["task"]

    dataset = _prepared(a["dataset"])
    if a["dataset_version"] and dataset.version != a["dataset_version"]:
        raise XmcbenchError(
            f"the runs were evaluated on version {a['dataset_version']} of {a['dataset']}, but the dataset prepared "
            f"here is version {dataset.version}; their queries and labels may differ, so compare them where they ran"
        )
    split = a["split"]
    truth = dataset.labels(split)
    filt = dataset.filter(split) if task.get("filter") else None
    preds_a, preds_b = (_load_predictions(load_sparse, run) for run in (a, b))
    rows = _evaluated_rows(a, b, preds_a.shape[0], truth.shape[0])
    if rows is not None:
        truth = truth[rows]
        filt = filt[rows] if filt is not None else None
    for run, preds in ((a, preds_a), (b, preds_b)):
        if preds.shape != truth.shape:
            raise XmcbenchError(
                f"{_predictions_path(run)} has shape {preds.shape} but {a['dataset']} {split} has {truth.shape} "
                f"(queries × labels); the predictions do not belong to this dataset version"
            )

    inv_prop = None
    if a["propensity_a"] is not None and a["propensity_b"] is not None:
        inv_prop = metrics.inv_propensity(dataset.labels("train"), a["propensity_a"], a["propensity_b"])
    # the metrics both records list; if none, the usual families at k = 1, 3, 5
    names = _shared_metrics(a["record"], b["record"], inv_prop is not None) or None
    k = _DEFAULT_K
    diffs = metrics.paired_bootstrap(
        preds_a, preds_b, truth, k=k, inv_propensity=inv_prop, filter=filt, metrics=names, n_boot=n_boot, seed=seed
    )
    values_a = metrics.evaluate(preds_a, truth, k=k, inv_propensity=inv_prop, filter=filt, metrics=names)
    values_b = metrics.evaluate(preds_b, truth, k=k, inv_propensity=inv_prop, filter=filt, metrics=names)
    return Comparison(
        run_a=a["run_id"],
        run_b=b["run_id"],
        dataset=a["dataset"],
        split=split,
        n_queries=int(truth.shape[0]),
        n_boot=n_boot,
        seed=seed,
        rows=[Difference(name, values_a[name], values_b[name], *diffs[name]) for name in diffs],
        one_sided=_one_sided(a["record"], b["record"]),
    )


def _prepared(name: str):
    """The dataset's prepared cache, read without the preparation lock when it is current.

    Comparing only reads: on a read-only home (or while a run holds the lock) taking the lock
    would fail or wait, so it is taken only when the cache must be made first.
    """
    from xmcbench.data import load_dataset
    from xmcbench.data.load import prepared_if_current

    dataset = prepared_if_current(name)
    if dataset is not None:
        return dataset
    try:
        return load_dataset(name, progress=False)
    except OSError as exc:
        raise XmcbenchError(
            f"dataset {name} is not prepared here and cannot be prepared ({exc.strerror or exc}: "
            f"{exc.filename or ''}); compare needs its ground truth: prepare it where $XMCBENCH_HOME is writable"
        ) from None


def _check_same_conditions(a: dict, b: dict) -> None:
    for key in _SAME:
        va, vb = a[key], b[key]
        if key == "dataset":
            va, vb = va.lower(), vb.lower()
        if va != vb:
            raise XmcbenchError(
                f"runs {a['run_id']} and {b['run_id']} differ in {key} ({a[key]!r} vs {b[key]!r}); "
                f"a paired comparison needs the same queries, labels and weights"
            )


def _load_predictions(load_sparse, run: dict):
    """The run's saved top-k; a damaged file is the run's, not the user's to re-save: it says so."""
    from xmcbench.errors import DataFormatError

    try:
        return load_sparse(_predictions_path(run))
    except DataFormatError as exc:
        what = str(exc).split(": ", 1)[-1].split("; ")[0]  # the problem, not the reader's advice to a user's file
        raise XmcbenchError(
            f"run {run['run_id']}'s predictions cannot be read ({what}); run the recipe "
            "again (or `xmcbench run --resume` if it was interrupted) to write them anew"
        ) from None


def _predictions_path(run: dict) -> Path:
    if not run["run_dir"]:
        raise XmcbenchError(
            f"run {run['run_id']} was indexed without its run directory; re-ingest it with `xmcbench ingest DIR`"
        )
    path = Path(run["run_dir"]) / PREDICTIONS_FILE
    if not path.exists():
        raise XmcbenchError(
            f"{path} does not exist (run {run['run_id']} is {run['status']}); compare needs both runs' saved predictions"
        )
    return path


def _evaluated_rows(a: dict, b: dict, n_pred: int, n_split: int) -> np.ndarray | None:
    """Indices of the split's queries the runs were evaluated on; None for all of them."""
    if n_pred == n_split:
        return None
    lists = []
    for run in (a, b):
        path = Path(run["run_dir"]) / EVAL_ROWS_FILE
        if not path.exists():
            raise XmcbenchError(
                f"run {run['run_id']} was evaluated on {n_pred} of {n_split} queries and {path} (which ones) is "
                f"missing, so its predictions cannot be matched to ground truth"
            )
        lists.append(np.load(path))
    if not np.array_equal(lists[0], lists[1]):
        raise XmcbenchError(
            f"runs {a['run_id']} and {b['run_id']} were evaluated on different samples of the queries; "
            f"a paired comparison needs the same queries"
        )
    if len(lists[0]) != n_pred:
        raise XmcbenchError(
            f"{Path(a['run_dir']) / EVAL_ROWS_FILE} lists {len(lists[0])} queries but the predictions have {n_pred} rows"
        )
    return lists[0]


def _shared_metrics(record_a: dict, record_b: dict, has_propensity: bool) -> list[str]:
    """Metric names both records report, in record order, that can be recomputed here."""
    from xmcbench.metrics import METRICS

    theirs = {s["name"] for s in record_b.get("scores") or []}
    names = []
    for score in record_a.get("scores") or []:
        family, _, k = score["name"].partition("@")
        if score["name"] in theirs and family in METRICS and k.isdigit():
            if has_propensity or not METRICS.get(family).needs_propensity:
                names.append(score["name"])
    return names


def _one_sided(record_a: dict, record_b: dict) -> list[str]:
    """Metric names that only one of the two records reports (so neither side of them is compared)."""
    names_a = [s["name"] for s in record_a.get("scores") or []]
    names_b = [s["name"] for s in record_b.get("scores") or []]
    return [n for n in names_a if n not in names_b] + [n for n in names_b if n not in names_a]
