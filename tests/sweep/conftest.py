"""The sweep tests' recipes: two TF-IDF recipes on a tiny synthetic dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_helpers import write_recipe


@pytest.fixture
def recipes(tmp_path) -> Path:
    folder = tmp_path / "recipes"
    folder.mkdir()
    write_recipe(folder, "tfidf-a")
    write_recipe(folder, "tfidf-b", method={"name": "tfidf", "ngram_max": 2})
    return folder
