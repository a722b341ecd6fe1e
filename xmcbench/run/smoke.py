"""The smoke suite: every recipe under ``recipes/smoke/`` on a synthetic dataset, with floors.

Each smoke recipe declares ``expect:`` floors (e.g. ``P@1: ">= 30"``). ``run_smoke`` runs them
all into one database and reports which floors were missed, so a quality regression fails CI
instead of slipping through as a smaller number nobody reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from xmcbench.errors import XmcbenchError
from xmcbench.run.check import load_recipe
from xmcbench.run.runner import RunResult, run_recipe


def default_smoke_dir() -> Path:
    """``smoke/`` of the shipped recipes: the checkout's ``recipes/smoke``, or the copy inside the wheel."""
    from xmcbench.run.shipped import recipes_dir

    return recipes_dir() / "smoke"


@dataclass
class SmokeOutcome:
    recipe: Path
    result: RunResult | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result is not None and not self.failures


def smoke_recipes(directory: Path | None = None, only: list[str] | None = None) -> list[Path]:
    directory = Path(directory or default_smoke_dir())
    if not directory.is_dir():
        raise XmcbenchError(f"no such folder: {directory}; give --recipes-dir a folder of smoke recipes (*.yaml)")
    recipes = sorted(directory.glob("*.yaml"))
    if not recipes:
        raise XmcbenchError(f"no smoke recipes (*.yaml) in {directory}")
    if only:
        wanted = {o.lower() for o in only}
        unknown = sorted(wanted - {r.stem.lower() for r in recipes})
        if unknown:
            raise XmcbenchError(
                f"no smoke recipe {', '.join(unknown)} in {directory}; --only takes these names: "
                + ", ".join(r.stem for r in recipes)
            )
        recipes = [r for r in recipes if r.stem.lower() in wanted]
    return recipes


def load_smoke(directory: Path | None = None, only: list[str] | None = None):
    """Every smoke recipe as an outcome to fill, and those that load as (outcome, recipe) pairs to run."""
    outcomes, runnable = [], []
    for path in smoke_recipes(directory, only):
        outcome = SmokeOutcome(path)
        try:
            runnable.append((outcome, load_recipe(path)))
        except XmcbenchError as exc:
            outcome.failures.append(str(exc))
        outcomes.append(outcome)
    return outcomes, runnable


def run_smoke(
    directory: Path | None = None,
    *,
    db: Path | None = None,
    runs_dir: Path | None = None,
    only: list[str] | None = None,
    progress: bool = True,
) -> list[SmokeOutcome]:
    """Run every smoke recipe, one after another in this process, and check its floors (several at
    once, each in its own process: ``xmcbench.sweep.smoke.run_smoke_together``)."""
    outcomes, runnable = load_smoke(directory, only)
    for outcome, recipe in runnable:
        try:
            outcome.result = run_recipe(
                recipe,
                recipe_path=str(outcome.recipe),
                db=db,
                runs_dir=runs_dir,
                progress=progress,
                command=f"xmcbench smoke ({outcome.recipe.name})",
            )
        except Exception as exc:  # one broken recipe must not hide the others' results
            outcome.failures.append(f"run failed: {type(exc).__name__}: {exc}")
        else:
            outcome.failures = outcome.result.failed_floors(recipe.expect)
    return outcomes
