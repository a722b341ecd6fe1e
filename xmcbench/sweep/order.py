"""Which queued run a free slot takes next: longest first, by how long the same recipe took before.

Runs of one recipe file (its other seeds, its other grid values) take about as long as each
other. A queue started longest first ends with its short runs, so no slot sits idle while one
long run finishes alone: LPT scheduling, whose makespan is within 4/3 of the best order on
identical slots (Graham, 1969). Plan order instead can leave a long run for last: the smoke
suite from an empty home ran UniDEC (154 s) alone at its end while the other core sat idle for
124 s.

What a recipe takes is the median wall time of its finished runs on this host (the results
database), replaced by what it took in this sweep once one of its runs finishes here. A recipe
never timed keeps its plan place ahead of every timed one, and its runs go round-robin with the
other untimed recipes' (all first seeds before any second seed): its first run times the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xmcbench.sweep.launch import Launch

__all__ = ["longest_first"]


def longest_first(
    queue: Sequence[Launch], seconds: Mapping[str, float], started: Mapping[str, int] | None = None
) -> list[Launch]:
    """``queue`` in the order free slots should take it. ``seconds``: recipe path -> expected wall
    time; ``started``: recipe path -> its runs this sweep has started already."""
    untimed = [launch for launch in queue if launch.run.recipe_path not in seconds]
    timed = [launch for launch in queue if launch.run.recipe_path in seconds]
    nth = dict(started or {})  # recipe path -> its runs started or placed before this one
    rounds = []
    for position, launch in enumerate(untimed):
        path = launch.run.recipe_path
        rounds.append((nth.get(path, 0), position))
        nth[path] = nth.get(path, 0) + 1
    untimed = [untimed[position] for _, position in sorted(rounds)]
    timed.sort(key=lambda launch: -seconds[launch.run.recipe_path])  # stable: ties keep plan order
    return untimed + timed
