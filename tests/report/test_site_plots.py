"""The site's SVG plots read well without a browser: numbered axes, hollow CPU points, short empty plots."""

from __future__ import annotations

import re

from xmcbench.report.site import _axes, _empty, _scatter, _ticks


def _tick_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="middle">([^<]+)</text>', svg)


def test_a_log_axis_narrower_than_a_decade_still_has_numbers():
    ticks = _ticks(1333.0, 3000.0, log=True)  # every point at a label pool of 2,000
    assert len([t for t in ticks if 1333 <= t <= 3000]) >= 1 and 2000 in ticks
    # the scatter widens such a range to a decade: two numbered ticks at least
    points = [{"label": "a", "kind": "reproduced", "y": 46.3, "pool": 2000.0, "gpu_hours": None, "cpu": False}] * 2
    svg = _scatter(points, "pool", "P@1", "labels scored per step (log)")
    numbers = [t for t in _tick_labels(svg) if re.fullmatch(r"[0-9.]+[KM]?", t)]
    assert len(numbers) >= 2, _tick_labels(svg)


def test_cpu_runs_are_hollow_points_at_their_wall_clock_hours():
    points = [
        {"label": "tfidf (run)", "kind": "reproduced", "y": 46.3, "gpu_hours": 0.0004, "cpu": True, "pool": None},
        {"label": "DEXML (paper)", "kind": "published", "y": 85.8, "gpu_hours": 296.0, "cpu": False, "pool": None},
    ]
    svg = _scatter(points, "gpu_hours", "P@1", "GPU-hours (log)", pareto=True)
    assert 'fill="white" stroke="#d9480f"' in svg and "CPU wall-clock hours" in svg
    assert svg.count("<circle") == 2 + 2  # two points and the legend's two kinds
    assert 'class="pareto"' in svg


def test_epochs_get_whole_number_ticks():
    _, _, parts = _axes(0.5, 3.5, 2.0, 3.5, "epoch", "loss", xlog=False, xint=True)
    labels = [m for p in parts for m in re.findall(r'text-anchor="middle">([^<]+)</text>', p)]
    assert {"1", "2", "3"} <= set(labels) and not any("." in label for label in labels if label != "epoch")


def test_an_empty_plot_is_a_short_line_not_a_big_box():
    svg = _empty("no reproduced run has a published counterpart yet")
    assert 'height="44"' in svg and "no reproduced run" in svg
