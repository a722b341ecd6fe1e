"""A sweep's plan: recipes × grid × seeds expanded into runs, every run validated before any starts.

    recipes [a.yaml, b.yaml] × grid {training.lr: [1e-4, 2e-4]} × seeds [0, 1, 2]  ->  12 runs

Each run is the recipe file plus its overrides, in a fixed order: the sweep's ``--set`` values,
then the grid values, then ``training.seed``. A run's key (``b lr=0.0002 seed=1``) names it in the
status table and the sweep record; the sweep id is a hash of every run's resolved recipe, so
the same command gives the same id and a rerun finds what the last attempt did.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from xmcbench.errors import XmcbenchError
from xmcbench.recipe import Problem, Recipe
from xmcbench.redact import redact
from xmcbench.run.check import check_recipe

MAX_RUNS = 10_000  # a typo such as --seeds 0-1000 should not queue a month of work


@dataclass(frozen=True)
class PlannedRun:
    recipe_path: str
    overrides: tuple[str, ...]  # --set, then grid values, then training.seed
    key: str  # unique within the sweep: "dexml lr=0.0001 seed=1"
    seed: int | None
    recipe: Recipe

    @property
    def recipe_hash(self) -> str:
        return self.recipe.hash()

    @property
    def gpus(self) -> int:
        """Processes the run is launched with (``hardware.num_gpus``; one per GPU)."""
        return self.recipe.hardware.num_gpus

    @property
    def device(self) -> str:
        return self.recipe.hardware.devices


@dataclass(frozen=True)
class SweepPlan:
    sweep_id: str
    runs: tuple[PlannedRun, ...]
    sets: tuple[str, ...]
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    seeds: tuple[int, ...]


class SweepError(XmcbenchError):
    """A sweep that cannot start: every problem found, before any run begins."""


def parse_seeds(text: str | None) -> list[int]:
    """``0,1,2`` or a range ``0-4`` (inclusive) -> seeds; None -> [] (each recipe's own seed)."""
    if text is None or not text.strip():
        return []
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            values = range(int(lo), int(hi) + 1) if dash else range(int(part), int(part) + 1)
        except ValueError:
            raise SweepError(
                f"--seeds {text!r}: {part!r} is not a seed; give integers, e.g. --seeds 0,1,2 or 0-4"
            ) from None
        if not values:
            raise SweepError(f"--seeds {text!r}: the range {part} is empty; write it low-high, e.g. 0-4")
        if len(seeds) + len(values) > MAX_RUNS:
            raise SweepError(f"--seeds {text!r} gives more than {MAX_RUNS:,} seeds; split the sweep")
        seeds.extend(values)
    if any(s < 0 for s in seeds):
        raise SweepError(f"--seeds {text!r}: seeds are non-negative integers")
    if len(set(seeds)) != len(seeds):
        raise SweepError(f"--seeds {text!r} repeats a seed; each seed is one run")
    return seeds


def parse_grid(items: list[str]) -> list[tuple[str, tuple[Any, ...]]]:
    """``section.key=v1,v2`` -> (key, values). Values are YAML: ``[1, 5],[1, 10]`` is two lists."""
    grid: list[tuple[str, tuple[Any, ...]]] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")) or not raw.strip():
            raise SweepError(f"--grid {item!r}: give section.key=v1,v2,..., e.g. --grid training.lr=1e-4,2e-4")
        try:
            values = yaml.safe_load(f"[{raw}]")
        except yaml.YAMLError:
            raise SweepError(
                f"--grid {item!r}: the values are not a comma-separated YAML list; quote a value holding a comma"
            ) from None
        if not values:
            raise SweepError(f"--grid {item!r}: no values")
        if any(key == other for other, _ in grid):
            raise SweepError(f"--grid {key} is given twice; list all its values in one --grid {key}=v1,v2")
        if key == "training.seed":
            raise SweepError("give seeds with --seeds 0,1,2, not --grid training.seed=...")
        texts = [json.dumps(v, sort_keys=True) for v in values]
        if len(set(texts)) != len(texts):
            raise SweepError(f"--grid {item!r} repeats a value; each value is one run")
        grid.append((key, tuple(values)))
    return grid


def _override(key: str, value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return f"{key}={text}"


def _short(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _recipe_label(path: str) -> str:
    name = Path(path).name
    return name.removesuffix(".yaml").removesuffix(".yml")


def expand(
    recipes: list[str | Path],
    *,
    sets: list[str] | None = None,
    grid: list[str] | None = None,
    seeds: str | None = None,
) -> SweepPlan:
    """Every run of recipes × grid × seeds, validated; SweepError names every run that fails."""
    from xmcbench.run.shipped import resolve_recipe

    if not recipes:
        raise SweepError("give at least one recipe file (or a shipped recipe's name such as smoke/tfidf)")
    paths = [str(resolve_recipe(r)) for r in recipes]
    if len(set(paths)) != len(paths):
        raise SweepError("a recipe is given twice; each recipe file once (use --seeds for repeats)")
    grid_values = parse_grid(grid or [])
    seed_list = parse_seeds(seeds)
    set_keys = {item.partition("=")[0].strip() for item in sets or []}
    both = [key for key, _ in grid_values if key in set_keys] + (
        ["training.seed"] if seed_list and "training.seed" in set_keys else []
    )
    if both:
        raise SweepError(
            f"{both[0]} is given with --set and swept too; drop the --set (the sweep gives each run its value)"
        )
    labels = [_recipe_label(p) for p in paths]
    if len(set(labels)) != len(labels):  # two dexml.yaml from different folders
        labels = [str(Path(p).with_suffix("")) for p in paths]

    combos = list(itertools.product(*[values for _, values in grid_values])) or [()]
    total = len(paths) * len(combos) * max(1, len(seed_list))
    if total > MAX_RUNS:
        raise SweepError(f"the sweep would be {total:,} runs (more than {MAX_RUNS:,}); split it")

    runs: list[PlannedRun] = []
    failing: dict[str, list[str]] = {}  # problem text -> run keys
    for path, label in zip(paths, labels):
        for combo in combos:
            for seed in seed_list or [None]:
                overrides = [*(sets or []), *(_override(k, v) for (k, _), v in zip(grid_values, combo))]
                if seed is not None:
                    overrides.append(f"training.seed={seed}")
                parts = [label, *(f"{_short(k)}={v}" for (k, _), v in zip(grid_values, combo))]
                if seed is not None:
                    parts.append(f"seed={seed}")
                # the key names the run in the sweep record, the database, its log file and the
                # status table: a grid value holding a token or URL password is masked there
                key = redact(" ".join(str(p) for p in parts))
                recipe, problems = check_recipe(path, overrides)
                if problems:
                    grid_keys = {k for k, _ in grid_values}
                    for problem in problems:
                        failing.setdefault(_problem_text(problem, grid_keys), []).append(key)
                    continue
                assert recipe is not None
                runs.append(PlannedRun(path, tuple(overrides), key, seed, recipe))
    if failing:
        raise SweepError(redact(_failing_message(failing, total)))  # a problem may quote a --set value
    same: dict[str, list[str]] = {}
    for run in runs:
        same.setdefault(run.recipe_hash, []).append(run.key)
    twins = [keys for keys in same.values() if len(keys) > 1]
    if twins:  # e.g. --grid training.lr=1e-4,0.0001: one run under two names, trained twice
        raise SweepError(
            "these runs would be the same run (the same recipe once resolved): "
            + "; ".join(" = ".join(keys) for keys in twins[:5])
            + "; give each value once"
        )
    keys = [run.key for run in runs]
    if len(set(keys)) != len(keys):  # grid values that differ only in a masked secret
        shared = sorted({key for key in keys if keys.count(key) > 1})
        raise SweepError(
            f"runs {', '.join(shared[:5])} would share one name: their grid values differ only in a secret "
            "(a token or URL password), which is masked in names; sweep those values in separate sweeps"
        )
    digest = hashlib.sha256(json.dumps([[r.key, r.recipe_hash] for r in runs], sort_keys=True).encode()).hexdigest()
    return SweepPlan(
        sweep_id=f"sweep-{digest[:10]}",
        runs=tuple(runs),
        sets=tuple(sets or []),
        grid=tuple(grid_values),
        seeds=tuple(seed_list),
    )


def _problem_text(problem: Problem, grid_keys: set[str]) -> str:
    """file: key: message (hint), the same for every run it fails: a problem of a value the sweep set
    names the option and key, not the value (the runs' keys say which values)."""
    option, _, setting = problem.file.partition(" ")
    if option == "--set" and "=" in setting:
        key = setting.split("=", 1)[0]
        source = "--seeds" if key == "training.seed" else "--grid" if key in grid_keys else "--set"
        problem = replace(problem, file=f"{source} {key}")
    return str(problem)


def _failing_message(failing: dict[str, list[str]], total: int) -> str:
    lines = ["the sweep was not started: these runs fail validation"]
    for text, keys in failing.items():
        who = f"all {total} runs" if len(keys) == total else ", ".join(keys[:6]) + (" …" if len(keys) > 6 else "")
        lines.append(f"  {text}  [{who}]")
    return "\n".join(lines)
