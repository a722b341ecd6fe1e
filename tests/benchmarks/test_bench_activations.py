"""benchmarks/bench_activations.py on a CPU, at a tiny shape: it runs, and its plan column is the plan's."""

from __future__ import annotations

import pytest

from xmcbench.run.plan import activation_bytes


def test_rows_per_sequence_length_next_to_the_plans_figure():
    from benchmarks.bench_activations import measure

    rows = measure([16, 64], tokens=256, device="cpu", hidden=32, layers=2, heads=2)
    assert [r["seq"] for r in rows] == [16, 64] and [r["batch"] for r in rows] == [16, 4]
    for r in rows:
        assert r["bytes_per_token_layer"] > 34 * 2  # at least bf16 copies of a few h-wide tensors
        assert r["plan_bytes_per_token_layer"] == pytest.approx(activation_bytes(32, r["seq"]))
        assert r["plan_over_measured"] == pytest.approx(r["plan_bytes_per_token_layer"] / r["bytes_per_token_layer"])
