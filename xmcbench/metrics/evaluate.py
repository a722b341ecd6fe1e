"""Evaluate predictions against ground truth: every requested metric, with optional bootstrap CIs.

    >>> from xmcbench.metrics import evaluate, inv_propensity
    >>> w = inv_propensity(train_labels, A=0.55, B=1.5)
    >>> evaluate(scores, test_labels, k=(1, 3, 5), inv_propensity=w, filter=filter_pairs)
    {'P@1': 43.21, 'P@3': ..., 'nDCG@1': ..., 'PSP@1': ..., 'PSnDCG@1': ..., 'R@1': ...}

Values are percentages (x100), unrounded. The ranking conventions (filter, ties, missing slots,
binarised truth) are those of :mod:`xmcbench.metrics.ranking`; each metric's formula is in its
module (``precision``, ``ndcg``, ``psp``, ``psndcg``, ``recall``).

Which metrics: ``metrics`` lists families ("P", "nDCG", "PSP", "PSnDCG", "R", case-insensitive),
each computed at every k, and/or single metrics like "R@100". By default P, nDCG and R at every k,
plus PSP and PSnDCG when ``inv_propensity`` is given. Results are ordered by family, then k.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from xmcbench.cpus import cpu_threads
from xmcbench.errors import XmcbenchError
from xmcbench.metrics import bootstrap, ndcg, precision, psndcg, psp, recall
from xmcbench.metrics.ranking import RankedTruth, rank_truth_in_blocks
from xmcbench.registry import Registry

__all__ = ["MetricInfo", "METRICS", "resolve_metrics", "components", "evaluate", "evaluate_with_ci", "paired_bootstrap"]


@dataclass(frozen=True)
class MetricInfo:
    """What reports need to know about a metric family (read them instead of hard-coding)."""

    name: str  # family, as it appears before "@k"
    title: str
    higher_is_better: bool
    needs_propensity: bool
    components: Callable[[RankedTruth, int], tuple[np.ndarray, np.ndarray]]
    module: ModuleType


METRICS: Registry[MetricInfo] = Registry("metric")
for _module in (precision, ndcg, psp, psndcg, recall):
    METRICS.add(
        _module.NAME,
        MetricInfo(
            name=_module.NAME,
            title=_module.TITLE,
            higher_is_better=True,
            needs_propensity=_module.NEEDS_PROPENSITY,
            components=_module.components,
            module=_module,
        ),
    )
_FAMILY_ORDER = [name for name, _ in METRICS]


def _as_ks(k) -> tuple[int, ...]:
    ks = (k,) if isinstance(k, (int, np.integer)) else tuple(k)
    if not ks or any(not isinstance(x, (int, np.integer)) or isinstance(x, bool) or x < 1 for x in ks):
        raise XmcbenchError(f"k must be positive integers like (1, 3, 5); got {k!r}")
    return tuple(sorted({int(x) for x in ks}))


def resolve_metrics(
    k=(1, 3, 5), metrics: Iterable[str] | None = None, has_propensity: bool = False
) -> list[tuple[str, int]]:
    """The (family, k) pairs to compute, ordered by family then k; see the module docstring."""
    ks = _as_ks(k)
    if metrics is None:
        families = [f for f in _FAMILY_ORDER if has_propensity or not METRICS.get(f).needs_propensity]
        wanted = {(f, x) for f in families for x in ks}
    else:
        if isinstance(metrics, str):
            metrics = [metrics]
        wanted = set()
        for item in metrics:
            if not isinstance(item, str):
                raise XmcbenchError(f"bad metric {item!r}; name families like P or nDCG, or FAMILY@k like R@100")
            family, at, k_text = item.strip().partition("@")
            family = METRICS.canonical(family)  # did-you-mean error for typos
            if at:
                try:
                    wanted.add((family, _as_ks(int(k_text))[0]))
                except ValueError:
                    raise XmcbenchError(f"bad metric {item!r}; write FAMILY@k like P@5 or R@100") from None
            else:
                wanted.update((family, x) for x in ks)
        if not wanted:
            raise XmcbenchError("no metrics requested; name families like P, nDCG, PSP, PSnDCG, R or e.g. R@100")
    missing = sorted({f for f, _ in wanted if METRICS.get(f).needs_propensity and not has_propensity})
    if missing:
        raise XmcbenchError(
            f"{', '.join(missing)} need inverse propensities: pass inv_propensity= "
            "(xmcbench.metrics.inv_propensity(train_labels, A, B)) or give training labels"
        )
    return sorted(wanted, key=lambda fk: (_FAMILY_ORDER.index(fk[0]), fk[1]))


def _name(family: str, k: int) -> str:
    return f"{family}@{k}"


# Predictions a block must hold at least before rows are ranked in blocks at once: below ~1M, a
# thread costs about what it saves.
_MIN_BLOCK_ENTRIES = 1 << 20


def _components(
    predictions, truth, k, inv_propensity, filter, metrics, threads: int | None = None
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    wanted = resolve_metrics(k, metrics, inv_propensity is not None)
    workers = cpu_threads() if threads is None else threads
    if not isinstance(workers, (int, np.integer)) or isinstance(workers, bool) or workers < 1:
        raise XmcbenchError(f"threads must be a positive integer; got {threads!r}")
    blocks = rank_truth_in_blocks(
        predictions,
        truth,
        max(x for _, x in wanted),
        blocks=int(workers),
        filter=filter,
        inv_propensity=inv_propensity,
        min_block_entries=_MIN_BLOCK_ENTRIES,
    )

    def block_components(rank: Callable[[], RankedTruth]) -> list[tuple[np.ndarray, np.ndarray]]:
        ranked = rank()
        return [METRICS.get(family).components(ranked, x) for family, x in wanted]

    # Each row's numerator and denominator depend on that row alone, so blocks of rows ranked apart
    # (threads: numpy releases the GIL in the work) give the very arrays one pass would.
    if len(blocks) == 1:
        per_block = [block_components(blocks[0][1])]
    else:
        with ThreadPoolExecutor(len(blocks), thread_name_prefix="xmcbench-metrics") as pool:
            per_block = list(pool.map(block_components, [rank for _, rank in blocks]))
    return [
        (
            _name(family, x),
            np.concatenate([parts[j][0] for parts in per_block]),
            np.concatenate([parts[j][1] for parts in per_block]),
        )
        for j, (family, x) in enumerate(wanted)
    ]


def components(
    predictions,
    truth,
    k=(1, 3, 5),
    inv_propensity: np.ndarray | None = None,
    filter=None,
    metrics: Iterable[str] | None = None,
    threads: int | None = None,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Metric names and per-row (numerators, denominators), each (n_rows, n_metrics).

    Metric j on any subset or resample of rows is ``numerators[:, j].sum() / denominators[:, j].sum()``.
    ``threads``: as in :func:`evaluate`.
    """
    parts = _components(predictions, truth, k, inv_propensity, filter, metrics, threads)
    names = [name for name, _, _ in parts]
    return names, np.column_stack([num for _, num, _ in parts]), np.column_stack([den for _, _, den in parts])


def evaluate(
    predictions,
    truth,
    k: int | Sequence[int] = (1, 3, 5),
    inv_propensity: np.ndarray | None = None,
    filter=None,
    metrics: Iterable[str] | None = None,
    threads: int | None = None,
) -> dict[str, float]:
    """Every requested metric in percent (x100), e.g. {"P@1": 43.2, "nDCG@3": 40.1, ...}.

    Args:
        predictions: (n, L) CSR of scores (stored entries are predictions) or a dense score array.
        truth: (n, L) ground truth; stored non-zeros are relevant.
        k: cut-offs for every family.
        inv_propensity: (L,) inverse propensities; enables PSP and PSnDCG.
        filter: (n, L) (query, label) pairs removed from the predictions before top-k.
        metrics: families and/or single metrics to compute (default: all that apply).
        threads: rows are ranked in up to this many blocks at once (default:
            ``xmcbench.cpus.cpu_threads()``: OMP_NUM_THREADS, else the CPUs this process may use);
            inputs under ~2M predictions use one. The values are the same bit for bit whatever the
            number: each row's share depends on that row alone.
    """
    parts = _components(predictions, truth, k, inv_propensity, filter, metrics, threads)
    return {name: float(bootstrap.ratio(num.sum(), den.sum())) * 100.0 for name, num, den in parts}


def evaluate_with_ci(
    predictions,
    truth,
    k: int | Sequence[int] = (1, 3, 5),
    inv_propensity: np.ndarray | None = None,
    filter=None,
    metrics: Iterable[str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    threads: int | None = None,
) -> dict[str, tuple[float, float | None, float | None]]:
    """Every requested metric as (value, lo, hi) in percent: a seeded percentile bootstrap over queries.

    ``n_boot=0`` skips the bootstrap: every interval is (None, None). ``threads``: as in :func:`evaluate`.
    """
    if n_boot == 0:
        return {
            name: (value, None, None)
            for name, value in evaluate(predictions, truth, k, inv_propensity, filter, metrics, threads).items()
        }
    names, numerators, denominators = components(predictions, truth, k, inv_propensity, filter, metrics, threads)
    value, lo, hi = bootstrap.bootstrap_ci(numerators, denominators, n_boot=n_boot, seed=seed, confidence=confidence)
    return {n: (float(v) * 100, float(a) * 100, float(b) * 100) for n, v, a, b in zip(names, value, lo, hi)}


def paired_bootstrap(
    predictions_a,
    predictions_b,
    truth,
    k: int | Sequence[int] = (1, 3, 5),
    inv_propensity: np.ndarray | None = None,
    filter=None,
    metrics: Iterable[str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    threads: int | None = None,
) -> dict[str, tuple[float, float, float]]:
    """For each metric, (a - b, lo, hi) in percentage points, resampling the same queries for both.

    An interval that excludes 0 marks a difference unlikely to be query-sampling noise.
    """
    names, num_a, den_a = components(predictions_a, truth, k, inv_propensity, filter, metrics, threads)
    _, num_b, den_b = components(predictions_b, truth, k, inv_propensity, filter, metrics, threads)
    diff, lo, hi = bootstrap.paired_bootstrap_ci(
        num_a, den_a, num_b, den_b, n_boot=n_boot, seed=seed, confidence=confidence
    )
    return {n: (float(d) * 100, float(a) * 100, float(b) * 100) for n, d, a, b in zip(names, diff, lo, hi)}
