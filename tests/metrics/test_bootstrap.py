"""Bootstrap CIs: ratio of resampled sums, determinism by seed, paired differences."""

from __future__ import annotations

import numpy as np
import pytest

from xmcbench.metrics import bootstrap as bs
from xmcbench.metrics import evaluate, evaluate_with_ci, paired_bootstrap


def test_ci_contains_point_estimate_and_is_deterministic(ref):
    p = ref.make_problem(0)
    kw = dict(k=(1, 3, 5), inv_propensity=p.inv_propensity, filter=p.filter, n_boot=300)
    a = evaluate_with_ci(p.predictions, p.truth, seed=7, **kw)
    b = evaluate_with_ci(p.predictions, p.truth, seed=7, **kw)
    c = evaluate_with_ci(p.predictions, p.truth, seed=8, **kw)
    point = evaluate(p.predictions, p.truth, k=(1, 3, 5), inv_propensity=p.inv_propensity, filter=p.filter)
    assert a == b
    assert a != c
    assert list(a) == list(point)
    for name, (value, lo, hi) in a.items():
        assert value == pytest.approx(point[name], abs=1e-12)
        assert lo <= value <= hi, name
        assert hi - lo > 0.1, name  # 300 rows: a real interval, not a degenerate one


def test_replicates_are_ratios_of_resampled_sums(monkeypatch):
    """Compare against a naive loop over the same draws (one batch: the draws are one array)."""
    monkeypatch.setattr(bs, "_BATCH_CELLS", 1 << 30)
    rng = np.random.default_rng(1)
    n, n_boot = 40, 200
    num = rng.random((n, 2)) * (rng.random((n, 2)) < 0.5)
    den = rng.random((n, 2)) + 0.1
    value, lo, hi = bs.bootstrap_ci(num, den, n_boot=n_boot, seed=3)
    draws = np.random.default_rng(3).integers(0, n, size=(n_boot, n))
    reps = np.array([num[d].sum(0) / den[d].sum(0) for d in draws])
    np.testing.assert_allclose(value, num.sum(0) / den.sum(0))
    np.testing.assert_allclose(lo, np.quantile(reps, 0.025, axis=0), rtol=1e-12)
    np.testing.assert_allclose(hi, np.quantile(reps, 0.975, axis=0), rtol=1e-12)
    # A mean of per-row ratios would be a different (wrong) statistic for PSP-like metrics.
    assert not np.allclose(value, (num / den).mean(0))


def test_batching_does_not_change_results(monkeypatch):
    rng = np.random.default_rng(2)
    num, den = rng.random((30, 3)), rng.random((30, 3)) + 0.5
    one = bs.bootstrap_ci(num, den, n_boot=100, seed=0)
    monkeypatch.setattr(bs, "_BATCH_CELLS", 30 * 7)  # batches of 7 replicates
    many = bs.bootstrap_ci(num, den, n_boot=100, seed=0)
    for x, y in zip(one, many):
        np.testing.assert_allclose(x, y, rtol=1e-12)


def test_paired_identical_predictions_is_exactly_zero(ref):
    p = ref.make_problem(1)
    got = paired_bootstrap(
        p.predictions, p.predictions.copy(), p.truth, k=(1, 5), inv_propensity=p.inv_propensity, n_boot=200
    )
    assert got and all(v == (0.0, 0.0, 0.0) for v in got.values())


def test_paired_difference_of_better_model(ref):
    p = ref.make_problem(2)
    oracle = p.truth.astype(np.float32) * 10 + p.predictions  # true labels on top
    got = paired_bootstrap(oracle, p.predictions, p.truth, k=1, n_boot=300, seed=1)
    a = evaluate(oracle, p.truth, k=1)
    b = evaluate(p.predictions, p.truth, k=1)
    for name, (diff, lo, hi) in got.items():
        assert diff == pytest.approx(a[name] - b[name])
        assert 0 < lo <= diff <= hi, name


def test_bad_arguments():
    with pytest.raises(Exception, match="n_boot"):
        bs.bootstrap_ci(np.ones(3), np.ones(3), n_boot=0)
    with pytest.raises(Exception, match="confidence"):
        bs.bootstrap_ci(np.ones(3), np.ones(3), confidence=1.5)
    with pytest.raises(Exception, match="zero rows"):
        bs.bootstrap_ci(np.ones(0), np.ones(0))
