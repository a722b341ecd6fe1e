"""Helpers of the sweep tests: TF-IDF recipes on a tiny synthetic dataset (no model, seconds per run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

TINY = {
    "name": "tiny-tfidf",
    "dataset": {"name": "synth-sweep", "synthetic": {"labels": 100, "train": 300, "test": 60, "seed": 0}},
    "supervision": {"mode": "zero_shot"},
    "method": {"name": "tfidf"},
    "evaluation": {"k": [1, 5], "bootstrap": 0, "top_k": 5, "groups": False},
    "hardware": {"devices": "cpu"},
}


def write_recipe(folder: Path, stem: str, **sections) -> Path:
    data = {**TINY, **sections, "name": stem}
    path = folder / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cli_env() -> dict[str, str]:
    """The environment a sweep subprocess needs: this test's home, offline, this checkout first."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["HF_HUB_OFFLINE"] = "1"
    return env


def xmcbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "xmcbench", *args]
