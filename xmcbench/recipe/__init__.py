"""Recipes are data: the schema (``schema.py``) and reading files (``load.py``).

This package knows no method and no dataset; ``xmcbench.run.check`` binds a recipe's
``method:`` section to the method's Config and checks the dataset, and ``xmcbench.run.load_recipe``
is what most code calls.
"""

from xmcbench.recipe.load import Problem, RecipeError, apply_overrides, deep_merge, read_recipe
from xmcbench.recipe.schema import (
    DatasetSection,
    EncoderSection,
    EvaluationSection,
    HardwareSection,
    MethodSection,
    OutputSection,
    Recipe,
    SupervisionSection,
    SyntheticSpec,
    TrainingSection,
    check_floor,
    missed_floors,
)

__all__ = [
    "DatasetSection",
    "EncoderSection",
    "EvaluationSection",
    "HardwareSection",
    "MethodSection",
    "OutputSection",
    "Problem",
    "Recipe",
    "RecipeError",
    "SupervisionSection",
    "SyntheticSpec",
    "TrainingSection",
    "apply_overrides",
    "check_floor",
    "missed_floors",
    "deep_merge",
    "read_recipe",
]
