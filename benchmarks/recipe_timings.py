"""Write a recipe folder's ``timings.json`` from what its recipes took on this host.

    python -m benchmarks.recipe_timings recipes/smoke              # after a smoke run (xmcbench smoke --jobs 2)
    python -m benchmarks.recipe_timings recipes/smoke --db /tmp/home/xmcbench.duckdb

A sweep starts the runs it expects to take longest first. It knows what a recipe takes from this
host's finished runs (the results database); for a recipe this host never ran, from the
``timings.json`` beside it (``xmcbench.sweep.order``). This writes that file: for each ``*.yaml`` of
the folder, the median time its newest 5 finished runs on this host spent in their phases, less
waits for another run's shared stage (``Store.typical_wall_s``), as the sweep reads it. Recipes this
host has not run keep what the file said (and are named); with none run, nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
from datetime import datetime, timezone
from pathlib import Path

from xmcbench.paths import default_db_path
from xmcbench.store import Store
from xmcbench.sweep.order import TIMINGS_FILE, folder_timings


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--db", type=Path, default=None, help="results database (default: $XMCBENCH_HOME's)")
    args = parser.parse_args(argv)
    recipes = sorted(args.folder.glob("*.yaml"))
    # A run records its recipe path as it was given: absolute (smoke, a sweep of absolute paths) or
    # relative to where it was started (`xmcbench sweep recipes/smoke/*.yaml`).
    spellings = {r: [str(r.resolve()), str(r), os.path.relpath(r.resolve())] for r in recipes}
    with Store.open(args.db or default_db_path(), read_only=True, missing_ok=True) as store:
        found = store.typical_wall_s(sorted({p for names in spellings.values() for p in names}), socket.gethostname())
    seconds = {
        r.name: round(next(found[p] for p in names if p in found), 1)
        for r, names in spellings.items()
        if any(p in found for p in names)
    }
    seconds = {name: s for name, s in seconds.items() if s > 0}
    missing = [r.name for r in recipes if r.name not in seconds]
    if not seconds:
        raise SystemExit(f"no finished runs of {args.folder}/*.yaml on this host in the database: nothing written")
    if missing:
        print(f"not run on this host, kept as they were in the file: {', '.join(missing)}")
    out = args.folder / TIMINGS_FILE
    # what the file said, read as a sweep reads it (a malformed file warns and counts as empty)
    earlier = {Path(path).name: s for path, s in folder_timings([str(r) for r in recipes]).items()}
    result = {
        "about": "seconds each recipe's runs spent in their phases (median of the newest 5); a sweep starts "
        "the longest first, by this file until the host has run the recipe (python -m benchmarks.recipe_timings)",
        "measured": {
            "at": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "cpu": _cpu_name(),
            "platform": platform.platform(),
        },
        "seconds": dict(sorted({**earlier, **seconds}.items())),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name, s in sorted(result["seconds"].items(), key=lambda item: -item[1]):
        print(f"{s:8.1f} s  {name}")
    print(f"saved {out}")
    return result


def _cpu_name() -> str:
    """The CPU the seconds are from, e.g. "Intel(R) Xeon(R) Processor (family 6 model 207)"."""
    from xmcbench.cpus import cpu_identity

    cpu = cpu_identity()
    if "model name" not in cpu:
        return platform.processor() or platform.machine()
    return f"{cpu['model name']} (family {cpu.get('cpu family', '?')} model {cpu.get('model', '?')})"


if __name__ == "__main__":
    main()
