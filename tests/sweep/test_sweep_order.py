"""Longest-first order of a sweep's queue: untimed runs in plan order, then timed ones longest first."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from xmcbench.sweep.order import folder_timings, longest_first


def _launch(path: str, seed: int):
    return SimpleNamespace(run=SimpleNamespace(recipe_path=path, key=f"{path} seed={seed}"))


def _keys(launches) -> list[str]:
    return [launch.run.key for launch in launches]


def test_untimed_runs_keep_plan_order_so_runs_that_share_work_stay_apart():
    # recipe-major, as a sweep plans: a MACLR zero-shot run right beside the few-shot run whose
    # pre-training it reuses would only wait for it
    queue = [_launch(p, s) for p in ("maclr-few-shot", "maclr-encoder", "maclr") for s in (0, 1)]
    assert longest_first(queue, {}) == queue


def test_timed_recipes_go_longest_first_after_the_untimed_ones_and_ties_keep_plan_order():
    queue = [_launch(p, 0) for p in ("short", "long", "untimed", "tie-1", "tie-2")]
    seconds = {"short": 3.0, "long": 480.0, "tie-1": 20.0, "tie-2": 20.0}
    assert _keys(longest_first(queue, seconds)) == [
        "untimed seed=0",
        "long seed=0",
        "tie-1 seed=0",
        "tie-2 seed=0",
        "short seed=0",
    ]


def _makespan(order, seconds: dict[str, float], slots: int) -> float:
    free = [0.0] * slots  # when each slot is next free: a free slot takes the next run of the order
    for launch in order:
        free.sort()
        free[0] += seconds[launch.run.recipe_path]
    return max(free)


# The smoke suite's runs from an empty home (s, seed 0, 2 CPU slots, 2026-11-27) in plan order, where
# UniDEC came last and ran alone for 124 s.
SMOKE = {
    "dexml": 180,
    "lmtx-start-encoder": 19,
    "lmtx": 481,
    "maclr-few-shot": 141,
    "maclr-zero-shot-encoder": 16,
    "maclr": 14,
    "prime": 134,
    "tfidf": 9,
    "unidec": 154,
    "zero_shot": 26,
}


@pytest.mark.parametrize("slots", [2, 3])
def test_longest_first_is_within_four_thirds_of_the_best_and_never_worse_here_than_plan_order(slots):
    queue = [_launch(path, 0) for path in SMOKE]
    order = longest_first(queue, SMOKE)
    best_bound = max(max(SMOKE.values()), sum(SMOKE.values()) / slots)  # no order beats this
    assert _makespan(order, SMOKE, slots) <= 4 / 3 * best_bound
    assert _makespan(order, SMOKE, slots) <= _makespan(queue, SMOKE, slots)
    if slots == 2:
        assert _makespan(queue, SMOKE, 2) == 648  # the suite took 650 s in plan order
        assert _makespan(order, SMOKE, 2) == 609


def test_a_timings_file_times_the_recipes_it_names_in_its_own_folder(tmp_path):
    smoke, other = tmp_path / "smoke", tmp_path / "other"
    smoke.mkdir(), other.mkdir()
    (smoke / "timings.json").write_text(json.dumps({"seconds": {"lmtx.yaml": 480, "tfidf.yaml": 9.5}, "about": "x"}))
    paths = [str(smoke / "lmtx.yaml"), str(smoke / "tfidf.yaml"), str(smoke / "new.yaml"), str(other / "lmtx.yaml")]
    assert folder_timings(paths) == {paths[0]: 480.0, paths[1]: 9.5}  # by file name, in its own folder only


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"lmtx.yaml": 480}),  # no "seconds"
        json.dumps({"seconds": [480]}),
        json.dumps({"seconds": {"lmtx.yaml": -1}}),
        json.dumps({"seconds": {"lmtx.yaml": "480"}}),
        json.dumps({"seconds": {"lmtx.yaml": True}}),
        '{"seconds": {"lmtx.yaml": NaN}}',
        json.dumps([1, 2]),
    ],
)
def test_a_malformed_timings_file_is_left_out_with_a_warning(tmp_path, caplog, text):
    (tmp_path / "timings.json").write_text(text)
    with caplog.at_level(logging.WARNING, logger="xmcbench.sweep.order"):
        assert folder_timings([str(tmp_path / "lmtx.yaml")]) == {}
    assert "timings.json left out of the run order" in caplog.text
