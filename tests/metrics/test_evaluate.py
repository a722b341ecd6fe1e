"""The public evaluate API: names, selection, percent scale, metadata, and no torch import."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.metrics import METRICS, components, evaluate, evaluate_with_ci, resolve_metrics


def test_default_names_and_order(problem):
    got = evaluate(problem.predictions, problem.truth, k=(5, 1, 3))
    assert list(got) == ["P@1", "P@3", "P@5", "nDCG@1", "nDCG@3", "nDCG@5", "R@1", "R@3", "R@5"]
    with_ps = evaluate(problem.predictions, problem.truth, k=(1, 3), inv_propensity=problem.inv_propensity)
    assert list(with_ps) == [
        "P@1",
        "P@3",
        "nDCG@1",
        "nDCG@3",
        "PSP@1",
        "PSP@3",
        "PSnDCG@1",
        "PSnDCG@3",
        "R@1",
        "R@3",
    ]
    assert all(0.0 <= v <= 100.0 for v in with_ps.values())
    assert all(isinstance(v, float) for v in with_ps.values())


def test_metric_selection(problem):
    got = evaluate(problem.predictions, problem.truth, k=(1, 5), metrics=["p", "R@100", "ndcg@3"])
    assert list(got) == ["P@1", "P@5", "nDCG@3", "R@100"]
    full = evaluate(problem.predictions, problem.truth, k=(1, 3, 5, 100))
    for name, value in got.items():
        assert value == pytest.approx(full[name])
    assert list(evaluate(problem.predictions, problem.truth, k=4, metrics="nDCG")) == ["nDCG@4"]


def test_selection_errors():
    with pytest.raises(XmcbenchError, match="did you mean"):
        resolve_metrics(metrics=["nDGC"])
    with pytest.raises(XmcbenchError, match="FAMILY@k"):
        resolve_metrics(metrics=["P@x"])
    with pytest.raises(XmcbenchError, match="positive"):
        resolve_metrics(k=(0, 1))
    with pytest.raises(XmcbenchError, match="PSnDCG need inverse propensities"):
        resolve_metrics(metrics=["PSnDCG@5"])


def test_percent_scale_and_perfect_predictions():
    truth = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 1, 0, 0]], dtype=np.float32))
    w = np.array([1.0, 2.0, 3.0, 4.0])
    perfect = truth.multiply(w[None, :]).tocsr()  # true labels only, by descending weight
    got = evaluate(perfect, truth, k=(1, 2), inv_propensity=w)
    assert got == {
        "P@1": 100.0,
        "P@2": 75.0,
        "nDCG@1": 100.0,
        "nDCG@2": 100.0,
        "PSP@1": 100.0,
        "PSP@2": 100.0,
        "PSnDCG@1": 100.0,
        "PSnDCG@2": 100.0,
        "R@1": 75.0,
        "R@2": 100.0,
    }


def test_components_reproduce_evaluate(problem):
    names, num, den = components(problem.predictions, problem.truth, k=(1, 5), inv_propensity=problem.inv_propensity)
    assert num.shape == den.shape == (problem.truth.shape[0], len(names))
    got = evaluate(problem.predictions, problem.truth, k=(1, 5), inv_propensity=problem.inv_propensity)
    np.testing.assert_allclose(100 * num.sum(0) / den.sum(0), [got[n] for n in names])


def test_with_ci_shape(problem):
    got = evaluate_with_ci(problem.predictions, problem.truth, k=1, n_boot=50)
    assert set(got) == {"P@1", "nDCG@1", "R@1"}
    assert all(len(v) == 3 for v in got.values())


def test_empty_inputs():
    empty = sp.csr_matrix((0, 4), dtype=np.float32)
    assert evaluate(empty, empty, k=1) == {"P@1": 0.0, "nDCG@1": 0.0, "R@1": 0.0}
    no_preds = sp.csr_matrix((2, 4), dtype=np.float32)
    truth = sp.csr_matrix(np.eye(2, 4, dtype=np.float32))
    assert evaluate(no_preds, truth, k=(1, 5)) == dict.fromkeys(["P@1", "P@5", "nDCG@1", "nDCG@5", "R@1", "R@5"], 0.0)


def test_metadata():
    assert METRICS.names() == ["P", "nDCG", "PSP", "PSnDCG", "R"]
    for name, info in METRICS:
        assert info.name == name and info.higher_is_better is True
        assert info.needs_propensity == name.startswith("PS")
        assert info.module.__doc__ and "components" in info.module.__doc__.lower()


def test_import_does_not_pull_torch():
    code = "import sys, xmcbench.metrics; assert 'torch' not in sys.modules, 'torch imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_with_ci_zero_replicates_skips_the_bootstrap(problem):
    got = evaluate_with_ci(problem.predictions, problem.truth, k=(1, 3), n_boot=0)
    point = evaluate(problem.predictions, problem.truth, k=(1, 3))
    assert got == {name: (value, None, None) for name, value in point.items()}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float64-ulps"])
@pytest.mark.parametrize("dense", [False, True])
def test_rows_ranked_in_blocks_on_threads_give_the_same_bits(problem, monkeypatch, dtype, dense):
    """Blocks of rows (filter, propensities, empty and short rows, all-tied rows among them) ranked
    apart, in threads, give every per-row component and every metric bit for bit as one pass does."""
    evaluate_module = importlib.import_module("xmcbench.metrics.evaluate")  # the package's `evaluate` is the function

    predictions = problem.predictions.astype(dtype.split("-")[0])
    if dtype == "float64-ulps":  # ties that the float64 key merges: rows re-ranked exactly, in every block
        rng = np.random.default_rng(1)
        predictions.data += np.spacing(predictions.data) * rng.integers(0, 4, predictions.data.size)
    if dense:
        predictions = predictions.toarray()
    args = dict(k=(1, 3, 5, 100), inv_propensity=problem.inv_propensity, filter=problem.filter)
    names, num, den = components(predictions, problem.truth, threads=1, **args)
    whole = evaluate(predictions, problem.truth, threads=1, **args)
    monkeypatch.setattr(evaluate_module, "_MIN_BLOCK_ENTRIES", 1)  # blocks however small the input
    made = []  # how many blocks each evaluation was cut into
    cut = evaluate_module.rank_truth_in_blocks
    monkeypatch.setattr(
        evaluate_module, "rank_truth_in_blocks", lambda *a, **kw: made.append(cut(*a, **kw)) or made[-1]
    )
    for threads in (2, 3, 7, 1000):  # more threads than rows with predictions is fine
        made.clear()
        got_names, got_num, got_den = components(predictions, problem.truth, threads=threads, **args)
        # blocks did form: one a thread, or one a row with predictions when threads outnumber those
        assert len(made[0]) == threads if threads < 10 else 10 < len(made[0]) <= problem.predictions.shape[0]
        assert got_names == names
        np.testing.assert_array_equal(got_num, num)
        np.testing.assert_array_equal(got_den, den)
        assert evaluate(predictions, problem.truth, threads=threads, **args) == whole
    with_ci = evaluate_with_ci(predictions, problem.truth, threads=2, n_boot=20, **args)
    assert with_ci == evaluate_with_ci(predictions, problem.truth, threads=1, n_boot=20, **args)


def test_a_metric_is_the_same_bits_whichever_other_k_are_asked_for():
    """nDCG@20 asked alone and beside k = 2, 7 is one number: sums over ranks are not continued from
    a smaller k's (that groups the additions otherwise and moved the last bit in half the seeds)."""
    for seed in range(12):
        rng = np.random.default_rng(seed)
        scores = rng.standard_normal((200, 40)).astype(np.float32)
        truth = sp.csr_matrix((rng.random((200, 40)) < 0.3).astype(np.float32))
        w = rng.random(40) * 3 + 1
        alone = evaluate(scores, truth, k=20, inv_propensity=w)
        beside = evaluate(scores, truth, k=(2, 7, 20), inv_propensity=w)
        assert {m: beside[m] for m in alone} == alone
        _, num_alone, _ = components(scores, truth, k=20, inv_propensity=w)
        names, num_beside, _ = components(scores, truth, k=(2, 7, 20), inv_propensity=w)
        at_20 = [j for j, name in enumerate(names) if name.endswith("@20")]
        np.testing.assert_array_equal(num_beside[:, at_20], num_alone)


def test_blocks_split_rows_by_predictions_and_cover_every_row(problem):
    from xmcbench.metrics import rank_truth
    from xmcbench.metrics.ranking import rank_truth_in_blocks

    whole = rank_truth(problem.predictions, problem.truth, 5, filter=problem.filter)
    blocks = rank_truth_in_blocks(
        problem.predictions, problem.truth, 5, blocks=4, filter=problem.filter, min_block_entries=1
    )
    starts = [start for start, _ in blocks]
    assert len(blocks) == 4 and starts[0] == 0 and starts == sorted(set(starts))
    ranked = [rank() for _, rank in blocks]
    assert sum(r.n_rows for r in ranked) == whole.n_rows
    per_block_entries = [problem.predictions[a : a + r.n_rows].nnz for a, r in zip(starts, ranked)]
    assert max(per_block_entries) - min(per_block_entries) <= 2 * problem.predictions[:].getnnz(axis=1).max()
    for k in (1, 3, 5):
        np.testing.assert_array_equal(np.concatenate([r.hits(k) for r in ranked]), whole.hits(k))
        np.testing.assert_array_equal(np.concatenate([r.dcg(k) for r in ranked]), whole.dcg(k))
    # few predictions: one block, whatever was asked
    assert len(rank_truth_in_blocks(problem.predictions, problem.truth, 5, blocks=4)) == 1
    empty = sp.csr_matrix((0, 7), dtype=np.float32)
    (only,) = rank_truth_in_blocks(empty, empty, 3, blocks=2, min_block_entries=1)
    assert only[0] == 0 and only[1]().n_rows == 0


def test_threads_default_to_the_thread_budget_and_bad_values_are_refused(problem, monkeypatch):
    module = importlib.import_module("xmcbench.metrics.evaluate")  # the package re-exports a function of that name

    asked, real = [], module.rank_truth_in_blocks
    monkeypatch.setattr(module, "rank_truth_in_blocks", lambda *a, **kw: asked.append(kw) or real(*a, **kw))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    evaluate(problem.predictions, problem.truth)
    assert asked[-1]["blocks"] == 3
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(XmcbenchError, match="threads must be a positive integer"):
            evaluate(problem.predictions, problem.truth, threads=bad)
