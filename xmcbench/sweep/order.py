"""Which queued run a free slot takes next: longest first, by how long the same recipe took before.

Runs of one recipe file (its other seeds; its other grid values, taken to be alike) take about
as long as each other. A queue started longest first ends with its short runs, so no slot sits idle while one
long run finishes alone: LPT scheduling, whose makespan is within 4/3 of the best order for
runs of known length on identical slots (Graham, 1969). Plan order instead can leave a long run for last: the smoke
suite from an empty home ran UniDEC (154 s) alone at its end while the other core sat idle for
124 s.

What a recipe takes is the median time its last finished runs on this host spent in their phases
(the results database; waits for another run's shared stage left out), replaced by what one of its
runs took in this sweep once it finishes here. Runs of a recipe never timed keep their plan order,
ahead of every timed one: plan order keeps runs that share work apart (a MACLR zero-shot run
beside the few-shot run whose pre-training it reuses would only wait for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xmcbench.sweep.launch import Launch

__all__ = ["longest_first"]


def longest_first(queue: Sequence[Launch], seconds: Mapping[str, float]) -> list[Launch]:
    """``queue`` in the order free slots should take it; ``seconds``: recipe path -> expected wall time."""
    untimed = [launch for launch in queue if launch.run.recipe_path not in seconds]
    timed = [launch for launch in queue if launch.run.recipe_path in seconds]
    timed.sort(key=lambda launch: -seconds[launch.run.recipe_path])  # stable: ties keep plan order
    return untimed + timed
