"""Step generators are pure functions of (seed, epoch, step, stream)."""

from __future__ import annotations

from xmcbench.sampling.seeding import step_rng


def test_same_place_same_numbers_other_place_other_numbers():
    a = step_rng(0, 3, 17, "positives").random(4)
    assert (a == step_rng(0, 3, 17, "positives").random(4)).all()
    for other in (
        step_rng(1, 3, 17, "positives"),
        step_rng(0, 4, 17, "positives"),
        step_rng(0, 3, 18, "positives"),
        step_rng(0, 3, 17, "negatives"),
    ):
        assert not (a == other.random(4)).all()
