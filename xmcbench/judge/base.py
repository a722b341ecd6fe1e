"""What a judge is: (document text, label text, prompt) -> P(yes), and what it accounts for.

Every backend answers ``p_yes(docs, label_texts, prompt) -> (n,) float64`` for n pairs, in one
call, and keeps a ``JudgeStats`` of what it was asked. Prompts are data files (``prompts/``):
the paper's Appendix 5.1 templates verbatim, ``{doc}`` and ``{label_text}`` their only fields.
A document too long for the judge is truncated (the question never is) and counted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Protocol

import numpy as np

from xmcbench.errors import XmcbenchError

__all__ = ["Judge", "JudgeError", "JudgeStats", "Prompt", "load_prompt", "prompt_ids", "yes_no_mass"]

_FIELD = re.compile(r"\{([A-Za-z_]+)\}")


class JudgeError(XmcbenchError):
    """The judge cannot answer (unreachable server, no yes/no tokens, bad prompt, bad model file)."""


@dataclass(frozen=True)
class Prompt:
    """A prompt template with exactly the fields ``{doc}`` and ``{label_text}`` (each once)."""

    id: str
    template: str

    def __post_init__(self) -> None:
        fields = _FIELD.findall(self.template)
        if sorted(fields) != ["doc", "label_text"]:
            raise JudgeError(
                f"prompt {self.id!r} must contain {{doc}} and {{label_text}} once each (and no other "
                f"{{field}}); it has {fields or 'none'}"
            )

    def render(self, doc: str, label_text: str) -> str:
        # str.replace, not str.format: documents and labels may contain braces.
        return self.template.replace("{doc}", doc, 1).replace("{label_text}", label_text, 1)


def prompt_ids() -> list[str]:
    return sorted(p.name[:-4] for p in resources.files("xmcbench.judge.prompts").iterdir() if p.name.endswith(".txt"))


def load_prompt(name_or_path: str) -> Prompt:
    """A packaged prompt by id (``eurlex-4k``), or a template file (id: its stem and its text's hash,
    ``mine@1a2b3c4d5e6f``)."""
    path = Path(name_or_path).expanduser()
    if path.suffix == ".txt" or "/" in name_or_path or "\\" in name_or_path:  # a file, not an id
        if not path.is_file():
            raise JudgeError(
                f"prompt file {path} {'is a folder' if path.is_dir() else 'does not exist'}: give a .txt template "
                f"with {{doc}} and {{label_text}}, or a packaged prompt id ({', '.join(prompt_ids())})"
            )
        try:
            template = path.read_text(encoding="utf-8").rstrip("\n")
        except UnicodeDecodeError:
            raise JudgeError(f"prompt file {path} is not UTF-8 text: save it as UTF-8") from None
        except OSError as exc:
            raise JudgeError(f"cannot read prompt file {path}: {exc.strerror or exc}") from None
        # The id keys the judgement cache: an edited template (or another file of the same name)
        # must not be answered from the old one's judgements.
        return Prompt(f"{path.stem}@{hashlib.sha256(template.encode()).hexdigest()[:12]}", template)
    res = resources.files("xmcbench.judge.prompts") / f"{name_or_path}.txt"
    if not res.is_file():
        raise JudgeError(f"unknown prompt {name_or_path!r}: use one of {', '.join(prompt_ids())} or a .txt file")
    return Prompt(name_or_path, res.read_text(encoding="utf-8").rstrip("\n"))


@dataclass
class JudgeStats:
    """What judging cost; recorded with every run that used a judge."""

    backend: str = ""
    model_id: str = ""
    revision: str = ""  # a commit, or the sha256 of the model file
    prompt_id: str = ""
    asked: int = 0  # judgements the model actually answered
    cache_hits: int = 0
    truncated: int = 0  # documents cut to fit the judge's context
    llm_seconds: float = 0.0
    gpu_hours: float = 0.0
    retries: int = 0
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["judgements_per_s"] = self.asked / self.llm_seconds if self.llm_seconds > 0 else None
        return d


class Judge(Protocol):
    backend: str
    model_id: str
    revision: str
    stats: JudgeStats

    def p_yes(self, docs: Sequence[str], label_texts: Sequence[str], prompt: Prompt) -> np.ndarray:
        """(n,) P(yes) of each (docs[i], label_texts[i]) pair under ``prompt``."""
        ...


def answer_word(token: str) -> str | None:
    """'yes' / 'no' when a token (or answer text) is one of their variants, else None: punctuation,
    markdown emphasis and the word-start marks of raw tokens (GPT-2's "Ġ", SentencePiece's "▁") aside."""
    word = token.strip().strip(".!?,:;\"'*_`()[]<>\u0120\u2581 \t\r\n").lower()
    return word if word in ("yes", "no") else None


def yes_no_mass(p_yes_mass: float, p_no_mass: float) -> float:
    """P(yes | the answer is yes or no); 0.5 when the model put no mass on either."""
    total = p_yes_mass + p_no_mass
    return float(p_yes_mass / total) if total > 0 else 0.5
