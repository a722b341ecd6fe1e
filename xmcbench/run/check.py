"""Checking a whole recipe: the schema, the method's own Config, the dataset, the supervision.

This is where a recipe meets the method registry and the dataset catalogue, so the recipe
package itself stays free of both. ``check_recipe`` returns every problem at once;
``load_recipe`` raises them together; the recipe it returns has its method Config bound.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from xmcbench.data import get_spec
from xmcbench.errors import XmcbenchError
from xmcbench.methods import METHODS
from xmcbench.recipe import Problem, Recipe, RecipeError, read_recipe
from xmcbench.recipe.load import MISSING, overrides_applied, problems_from
from xmcbench.recipe.schema import NEW_RUN
from xmcbench.registry import did_you_mean
from xmcbench.run.phases import TITLED_FORMATS


def check_recipe(path: str | Path, overrides: list[str] | None = None) -> tuple[Recipe | None, list[Problem]]:
    """Validate a recipe file and return (recipe or None, every problem found)."""
    try:
        data = read_recipe(path)
    except RecipeError as exc:
        return None, exc.problems
    return _check_with_overrides(data, str(path), overrides or [])


def check_fragment(path: str | Path, overrides: list[str] | None = None) -> list[Problem] | None:
    """The problems of an include fragment, or None when ``path`` is not one.

    A fragment (``recipes/base/synthetic-smoke.yaml``) holds sections for the recipes that include
    it and has neither ``name`` nor ``method``, which every recipe has. Its sections are checked as
    a recipe's would be; only the keys a recipe must have are not asked of it. A file that cannot
    be read is not known to be a fragment: None, and ``check_recipe`` reports it.
    """
    try:
        data = read_recipe(path)
    except RecipeError:
        return None
    if "name" in data or "method" in data:
        return None
    _, problems = _check_with_overrides(data, str(path), overrides or [])
    return [p for p in problems if p.message != MISSING]


def _check_with_overrides(data: dict[str, Any], file: str, overrides: list[str]) -> tuple[Recipe | None, list[Problem]]:
    # a malformed --set is reported beside the recipe's own problems, not instead of them
    applied, override_problems = overrides_applied(data, overrides)
    recipe, problems = check_data(applied, file)
    problems = [_blame_override(p, overrides, data) for p in problems]
    if override_problems:
        return None, override_problems + problems
    return recipe, problems


def _override_key(item: str) -> str:
    """The key ``a.b`` of an override ``a.b=c``; "" for a malformed one, which set nothing."""
    key, applied, _ = item.partition("=")
    return key.strip() if applied else ""


def _blame_override(problem: Problem, overrides: list[str], data: dict[str, Any]) -> Problem:
    """A problem an override made is that ``--set``'s, not the file's (``data``, before overrides).

    An override at the problem's key, or above it, replaced what the file said there: the file may
    not even hold the key (a mistyped ``--set training.epoch=3``). Overrides inside the problem's
    key changed part of its value (``--set expect.P@1=30``, ``--set training.epochs.x=3``): they
    made the problem when the recipe without them does not have it.
    """
    if not problem.key:
        return problem  # the recipe as a whole
    for item in reversed(overrides):  # the last override of a key is the one that counts
        key = _override_key(item)
        if key and (problem.key == key or problem.key.startswith(key + ".")):
            return replace(problem, file=f"--set {item}")
    inside = [item for item in overrides if _override_key(item).startswith(problem.key + ".")]
    if inside:
        without, _ = overrides_applied(data, [item for item in overrides if item not in inside])
        if not any(p.key == problem.key for p in check_data(without, problem.file)[1]):
            return replace(problem, file=" ".join(f"--set {item}" for item in inside))
    return problem


def check_data(data: dict[str, Any], file: str) -> tuple[Recipe | None, list[Problem]]:
    """Validate an already-read recipe mapping; (recipe with its method Config bound, problems)."""
    method = data.get("method") if isinstance(data.get("method"), dict) else None
    dataset = data.get("dataset") if isinstance(data.get("dataset"), dict) else None
    try:
        recipe = Recipe.model_validate(data, context=NEW_RUN)
    except ValidationError as exc:
        problems = problems_from(exc, file, Recipe)
        # the method and dataset are checked too, so one run of `validate` lists everything
        if method and isinstance(method.get("name"), str):
            problems += _method_problems(file, method)[1]
        if dataset and isinstance(dataset.get("name"), str) and not any(p.key == "dataset.name" for p in problems):
            if dataset.get("synthetic") is None:
                problems += _dataset_problems(file, dataset["name"])
            else:
                problems += _synthetic_name_problems(file, dataset["name"])
        return None, problems
    config, problems = _method_problems(file, data["method"])
    if recipe.dataset.synthetic is None:
        problems += _dataset_problems(file, recipe.dataset.name)
    else:
        problems += _synthetic_name_problems(file, recipe.dataset.name)
        problems += _synthetic_size_problems(file, recipe.dataset.synthetic.train)
    if not problems:
        problems += _supervision_problems(file, recipe, config) + _hardware_problems(file, recipe)
    if problems:
        return None, problems
    return recipe.bind_method_config(config), []


def _supervision_problems(file: str, recipe: Recipe, config: Any = None) -> list[Problem]:
    method_cls = METHODS.get(recipe.method.name) if recipe.method.name in METHODS else None
    if method_cls is not None and config is not None and hasattr(method_cls, "recipe_problems"):
        # what only the method knows (MACLR: ICT needs titles; K0 must not exceed the instances)
        spec = None if recipe.dataset.synthetic is not None else get_spec(recipe.dataset.name)
        n_train = recipe.dataset.synthetic.train if spec is None else spec.paper_counts.get("train")
        has_titles = spec is None or spec.format in TITLED_FORMATS
        found = method_cls.recipe_problems(recipe, config, n_train=n_train, has_titles=has_titles)
        if found:
            return [Problem(file, key, message, hint) for key, message, hint in found]
    if recipe.supervision.mode == "zero_shot" and recipe.method.name in METHODS:
        if METHODS.get(recipe.method.name).requires_labels:
            return [
                Problem(
                    file,
                    "supervision.mode",
                    f"method {recipe.method.name} trains on labels; it cannot run zero_shot",
                    "use mode full or few_shot, or a zero-shot method",
                )
            ]
    return []


def _hardware_problems(file: str, recipe: Recipe) -> list[Problem]:
    """Several GPUs only for a method that trains across them."""
    reason = getattr(METHODS.get(recipe.method.name), "single_process", None)
    if recipe.hardware.num_gpus > 1 and reason:
        return [
            Problem(
                file,
                "hardware.num_gpus",
                f"{recipe.method.name} trains in one process ({reason}); it cannot use {recipe.hardware.num_gpus} GPUs",
                "set hardware.num_gpus: 1 (a sweep runs several such runs side by side, one per GPU)",
            )
        ]
    return []


def _method_problems(file: str, method: dict[str, Any]):
    """(the method's validated Config or None, problems)."""
    name = method.get("name")
    if not isinstance(name, str) or name not in METHODS:
        return None, [
            Problem(
                file,
                "method.name",
                f"unknown method {name!r}{did_you_mean(str(name), METHODS.names())}",
                f"known: {', '.join(METHODS.names())}",
            )
        ]
    config = METHODS.get(name).Config
    params = {k: v for k, v in method.items() if k != "name"}
    try:
        return config.model_validate(params), []
    except ValidationError as exc:
        return None, problems_from(exc, file, config, prefix=("method",))


def _dataset_problems(file: str, name: str) -> list[Problem]:
    """A dataset must be in the catalogue unless the recipe says how to synthesise it."""
    try:
        get_spec(name)
    except XmcbenchError as exc:
        return [Problem(file, "dataset.name", str(exc))]
    return []


def _synthetic_name_problems(file: str, name: str) -> list[Problem]:
    """A synthetic dataset may not take a built-in dataset's name (the run would stop at prepare)."""
    from xmcbench.data.catalog import BUILTIN_DATASETS

    if name in BUILTIN_DATASETS:
        return [
            Problem(
                file,
                "dataset.name",
                f"{name!r} is a built-in dataset; a synthetic dataset needs a name of its own",
                "e.g. synth-" + name.lower(),
            )
        ]
    return []


def _synthetic_size_problems(file: str, train: int) -> list[Problem]:
    """Every run reports PSP / PSnDCG, whose inverse propensities scale with ln(N) - 1 for N training
    rows: below 3 they turn negative and the run would train, then fail at evaluation."""
    if train < 3:
        return [
            Problem(
                file,
                "dataset.synthetic.train",
                f"a run needs at least 3 training rows (PSP's inverse propensities); got {train}",
                "e.g. train: 100",
            )
        ]
    return []


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read, validate and bind a recipe file; RecipeError lists every problem."""
    recipe, problems = check_recipe(path, overrides)
    if problems:
        raise RecipeError(problems)
    assert recipe is not None
    return recipe


def recipe_from_dict(data: dict[str, Any], file: str = "<dict>") -> Recipe:
    """Validate an already-resolved recipe mapping (e.g. a run's recorded recipe).

    The dataset is not looked up: a recorded run may name a dataset that was synthesised then.
    """
    if not isinstance(data, dict):
        raise RecipeError([Problem(file, "", f"a recipe is a mapping of sections, got {type(data).__name__}")])
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(problems_from(exc, file, Recipe)) from None
    config, problems = _method_problems(file, data["method"])
    if problems:
        raise RecipeError(problems)
    return recipe.bind_method_config(config)
