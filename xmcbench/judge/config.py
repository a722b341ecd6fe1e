"""A judge's settings (a recipe section, the CLI's options) and the one place judges are built."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from xmcbench.judge.base import Judge, JudgeError

__all__ = ["JudgeConfig", "build_judge"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JudgeConfig(BaseModel):
    """``backend: transformers`` takes ``model`` (folder, .gguf, or parts: spec); ``openai`` takes
    ``base_url`` and ``model``; ``fake`` is the deterministic test judge."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["transformers", "openai", "fake"] = "transformers"
    model: str = "word-overlap"
    prompt: str = "eurlex-4k"  # a packaged prompt id or a .txt template
    cache: bool = True  # $XMCBENCH_HOME/judgements.duckdb
    # transformers
    device: str = "cpu"
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    threads: int | None = Field(default=1, ge=1)  # torch CPU threads; 1 where cores are shared
    batch_size: int = Field(default=8, gt=0)
    max_doc_tokens: int = Field(default=430, gt=0)  # paper §2.7: "truncated to 430 tokens"
    # openai
    base_url: str | None = None
    api_key_env: str | None = None  # name of the environment variable holding the key (never the key)
    concurrency: int = Field(default=4, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)  # seconds each try may take in all: connect, send, the whole reply
    retries: int = Field(default=3, ge=0)
    max_doc_chars: int = Field(default=3000, gt=0)

    @field_validator("base_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        from xmcbench.judge.openai_judge import check_base_url

        try:
            return check_base_url(url) if url else url
        except JudgeError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        # The value is never echoed: a key pasted here by mistake must not reach an error message.
        if name is not None and not _ENV_NAME.match(name):
            raise ValueError(
                "api_key_env is the NAME of an environment variable holding the key (e.g. JUDGE_API_KEY), "
                "never the key itself"
            )
        return name


def build_judge(cfg: JudgeConfig) -> Judge:
    if cfg.backend == "fake":
        from xmcbench.judge.fake_judge import FakeJudge

        return FakeJudge(cfg.model, max_doc_chars=cfg.max_doc_chars)
    if cfg.backend == "transformers":
        from xmcbench.judge.transformers_judge import TransformersJudge

        return TransformersJudge(
            cfg.model,
            device=cfg.device,
            dtype=cfg.dtype,
            threads=cfg.threads,
            batch_size=cfg.batch_size,
            max_doc_tokens=cfg.max_doc_tokens,
        )
    import os

    from xmcbench.judge.openai_judge import OpenAIJudge

    if not cfg.base_url:
        raise JudgeError("the openai judge backend needs base_url (e.g. http://127.0.0.1:8000/v1)")
    key = os.environ.get(cfg.api_key_env, "").strip() if cfg.api_key_env else None
    if cfg.api_key_env and not key:
        raise JudgeError(
            f"api_key_env names the environment variable {cfg.api_key_env}, but it is not set (or empty): "
            f"export {cfg.api_key_env}=<key> before the run"
        )
    return OpenAIJudge(
        cfg.base_url,
        cfg.model,
        api_key=key,
        concurrency=cfg.concurrency,
        timeout_s=cfg.timeout_s,
        retries=cfg.retries,
        max_doc_chars=cfg.max_doc_chars,
    )
