"""Running recipes: check a recipe against the methods and datasets, run it, run the smoke suite.

    from xmcbench.run import load_recipe, run_recipe
    result = run_recipe(load_recipe("recipes/smoke/dexml.yaml"))   # result.run_dir, result.record

- ``check.py``       recipe + method Config + dataset catalogue: every problem at once
- ``runner.py``      one run end to end: folder, lock, record, phases, resume, torchrun hand-off
- ``phases.py``      prepare -> train -> predict -> evaluate
- ``live_record.py`` the record while it runs: saved per change, timed per phase, heartbeat
- ``provenance.py``  code, packages, host, devices, memory
- ``smoke.py``       the smoke suite with its quality floors
"""

from xmcbench.run.check import check_recipe, load_recipe, recipe_from_dict
from xmcbench.run.runner import RunInterrupted, RunResult, find_run, load_record, run_recipe

__all__ = [
    "RunInterrupted",
    "RunResult",
    "check_recipe",
    "find_run",
    "load_recipe",
    "load_record",
    "recipe_from_dict",
    "run_recipe",
]
