"""Which queued run a free slot takes next: longest first, by how long the same recipe took before.

Runs of one recipe file (its other seeds; its other grid values, taken to be alike) take about
as long as each other. A queue started longest first ends with its short runs, so no slot sits idle while one
long run finishes alone: LPT scheduling, whose makespan is within 4/3 of the best order for
runs of known length on identical slots (Graham, 1969). Plan order instead can leave a long run for last: the smoke
suite from an empty home ran UniDEC (154 s) alone at its end while the other core sat idle for
124 s.

What a recipe takes is the median time its last finished runs on this host spent in their phases
(the results database; waits for another run's shared stage left out), replaced by what one of its
runs took in this sweep once it finishes here. A recipe this host never ran takes the seconds a
``timings.json`` beside it gives (``folder_timings``: the smoke recipes ship one, measured on the
machine CI runs on, so a first smoke run is ordered too; ``python -m benchmarks.recipe_timings FOLDER`` writes
one from this host's runs). Runs of a recipe timed by neither keep their plan order, ahead of every
timed one: plan order keeps runs that share work apart (a MACLR zero-shot run beside the few-shot
run whose pre-training it reuses would only wait for it).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from xmcbench.sweep.launch import Launch

__all__ = ["TIMINGS_FILE", "folder_timings", "longest_first"]

TIMINGS_FILE = "timings.json"  # {"seconds": {"<recipe file name>": seconds, ...}, ...} beside the recipes

log = logging.getLogger(__name__)


def longest_first(queue: Sequence[Launch], seconds: Mapping[str, float]) -> list[Launch]:
    """``queue`` in the order free slots should take it; ``seconds``: recipe path -> expected wall time."""
    untimed = [launch for launch in queue if launch.run.recipe_path not in seconds]
    timed = [launch for launch in queue if launch.run.recipe_path in seconds]
    timed.sort(key=lambda launch: -seconds[launch.run.recipe_path])  # stable: ties keep plan order
    return untimed + timed


def folder_timings(recipe_paths: Iterable[str]) -> dict[str, float]:
    """recipe path -> seconds, from the ``timings.json`` in each recipe's folder, where there is one.
    Only an order hint: a file that cannot be read or is not ``{"seconds": {name: seconds > 0}}`` is
    left out with a warning."""
    out: dict[str, float] = {}
    by_folder: dict[Path, list[str]] = {}
    for path in recipe_paths:
        by_folder.setdefault(Path(path).parent, []).append(path)
    for folder, paths in by_folder.items():
        file = folder / TIMINGS_FILE
        if not file.is_file():
            continue
        try:
            seconds = json.loads(file.read_text(encoding="utf-8"))["seconds"]
            if not isinstance(seconds, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                for v in seconds.values()
            ):
                raise ValueError('"seconds" must map recipe file names to numbers of seconds > 0')
        except (OSError, ValueError, KeyError, TypeError, OverflowError) as exc:
            log.warning("%s left out of the run order: %s", file, exc)
            continue
        out.update({path: float(seconds[Path(path).name]) for path in paths if Path(path).name in seconds})
    return out
