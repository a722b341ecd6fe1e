"""LLM judges: P(yes) that a label fits a document, asked once and cached.

    >>> from xmcbench.judge import JudgeConfig, build_judge, load_prompt, CachedJudge, JudgementCache
    >>> judge = build_judge(JudgeConfig(backend="transformers", model="/models/qwen2.5-0.5b-instruct"))
    >>> judge.p_yes(["a review of a usb hub"], ["computer accessories"], load_prompt("amazoncat-13k"))
    array([0.87])

Backends, one per file: ``transformers_judge`` (a local model folder or GGUF; one forward pass,
no generation), ``openai_judge`` (any OpenAI-compatible server), ``fake_judge`` (deterministic,
for tests). ``cache`` stores every judgement once; ``quality`` measures a judge against a
dataset's ground truth (accuracy, AUC, head/torso/tail agreement, prompt injection).

Layering: used by methods (LMTX); imports only the layers below (fsutil, paths, errors).
"""

from xmcbench.judge.base import Judge, JudgeError, JudgeStats, Prompt, load_prompt, prompt_ids
from xmcbench.judge.cache import CachedJudge, JudgementCache, default_cache_path
from xmcbench.judge.config import JudgeConfig, build_judge

__all__ = [
    "CachedJudge",
    "Judge",
    "JudgeConfig",
    "JudgeError",
    "JudgeStats",
    "JudgementCache",
    "Prompt",
    "build_judge",
    "default_cache_path",
    "load_prompt",
    "prompt_ids",
]
