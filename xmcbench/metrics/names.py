"""Metric names ("P@5", "PSnDCG@3"): the one vocabulary recipes, the store and the leaderboard use.

The families come from ``METRICS`` (one module per metric); a name is a family and a cut-off k.
"""

from __future__ import annotations

import re

from xmcbench.metrics.evaluate import METRICS

FAMILIES: tuple[str, ...] = tuple(name for name, _ in METRICS)
_NAME = re.compile(r"^(?P<family>" + "|".join(map(re.escape, FAMILIES)) + r")@(?P<k>[1-9][0-9]{0,5})$")


def split_metric_name(name: str) -> tuple[str, int] | None:
    """'PSP@5' -> ('PSP', 5); None for anything that is not a metric name xmcbench computes."""
    match = _NAME.match(name) if isinstance(name, str) else None
    return (match["family"], int(match["k"])) if match else None


def is_metric_name(name: str) -> bool:
    return split_metric_name(name) is not None
