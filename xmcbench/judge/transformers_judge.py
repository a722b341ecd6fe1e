"""A local causal LM as judge, through transformers: one forward pass per batch, no generation.

    P(yes) = Σ_{t∈YES} p(t | prompt) / (Σ_{t∈YES} p(t | prompt) + Σ_{t∈NO} p(t | prompt))

read off the next-token distribution after the chat-formatted prompt, where YES / NO are the
single-token spellings of "yes" / "no" the tokenizer has ("yes", "Yes", " yes", "YES", …).
Batches are sorted by length and left-padded so the last position is every row's next token.

A document judged against several labels is read once: the questions of one document share a
token prefix (chat template, document, the question's start: all the packaged prompts put
``{doc}`` first), which is run through the model once and its key/value cache reused for each
label's remaining tokens. The token sequences are the same as without sharing, so P(yes) is the
same up to float rounding (``tests/judge``); LMTX asks j labels per document.

The model is a folder, a GGUF file or a ``parts:`` spec (``model_files``); bf16 on GPU, and on CPU
the dtype setting decides (bf16 by default: the measured speed in offline.md). ``threads`` sets
torch's CPU threads (1 in CI, where cores are shared).

A document is cut, token-exactly, to ``max_doc_tokens`` (the paper: 430) and to whatever the
model's context leaves after the question; the question is never cut; cuts are counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np

from xmcbench.judge.base import JudgeError, JudgeStats, Prompt, answer_word
from xmcbench.judge.model_files import resolve_model

log = logging.getLogger(__name__)

_MIN_SHARED = 8  # tokens: a shorter common prefix is not worth its own forward pass
_SPELLINGS = ("yes", "Yes", "YES", " yes", " Yes", " YES", "no", "No", "NO", " no", " No", " NO")


class TransformersJudge:
    backend = "transformers"

    def __init__(
        self,
        model: str,
        *,
        device: str = "cpu",
        dtype: str = "bfloat16",
        threads: int | None = 1,
        batch_size: int = 8,
        max_doc_tokens: int = 430,
        use_chat_template: bool = True,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        folder, self.revision = resolve_model(model)
        self.model_id = model if not model.startswith("parts:") else model.split("#", 1)[0]
        self.device = device
        self.batch_size = batch_size
        self.max_doc_tokens = max_doc_tokens
        self.stats = JudgeStats(backend=self.backend, model_id=self.model_id, revision=self.revision)
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else getattr(torch, dtype)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
            self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch_dtype).to(device).eval()
        except Exception as exc:
            raise JudgeError(f"cannot load judge model {model!r} from {folder}: {type(exc).__name__}: {exc}") from None
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.chat = use_chat_template and bool(getattr(self.tokenizer, "chat_template", None))
        self.yes_ids, self.no_ids = self._answer_tokens()
        self.context = int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)

    def _answer_tokens(self) -> tuple[list[int], list[int]]:
        yes: set[int] = set()
        no: set[int] = set()
        for s in _SPELLINGS:
            ids = self.tokenizer.encode(s, add_special_tokens=False)
            if len(ids) == 1:
                (yes if answer_word(s) == "yes" else no).add(ids[0])
        if not yes or not no:
            raise JudgeError(
                f"judge model {self.model_id!r}: its tokenizer has no single token for "
                f"{'yes' if not yes else 'no'}; P(yes) cannot be read from next-token logits"
            )
        return sorted(yes), sorted(no)

    def _format(self, text: str) -> str:
        if not self.chat:
            return text
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )

    def _fit_doc(self, doc: str, label: str, prompt: Prompt) -> str:
        question_len = len(self.tokenizer.encode(self._format(prompt.render("", label)), add_special_tokens=False))
        budget = min(self.max_doc_tokens, self.context - question_len - 1)
        if budget <= 0:
            raise JudgeError(f"the question alone ({question_len} tokens) fills the judge's context ({self.context})")
        ids = self.tokenizer.encode(doc, add_special_tokens=False)
        if len(ids) <= budget:
            return doc
        self.stats.truncated += 1
        return self.tokenizer.decode(ids[:budget])

    def p_yes(self, docs: Sequence[str], label_texts: Sequence[str], prompt: Prompt) -> np.ndarray:
        truncated_before = self.stats.truncated
        fitted = [self._fit_doc(d, lt, prompt) for d, lt in zip(docs, label_texts, strict=True)]
        messages = [prompt.render(d, lt) for d, lt in zip(fitted, label_texts, strict=True)]
        out = self.score_messages(messages, groups=fitted)
        if self.stats.truncated > truncated_before:
            log.warning(
                "judge: %d of %d documents cut to fit %d tokens (the question is kept whole)",
                self.stats.truncated - truncated_before,
                len(messages),
                self.max_doc_tokens,
            )
        return out

    def score_messages(self, messages: Sequence[str], groups: Sequence[str] | None = None) -> np.ndarray:
        """(n,) P(yes) of user messages as given (chat-formatted here; no truncation).

        ``groups``: one key per message (the document); messages of a key with a common token
        prefix of at least ``_MIN_SHARED`` tokens run that prefix once.
        """
        import torch

        if groups is not None and len(groups) != len(messages):
            raise JudgeError(f"score_messages: {len(groups)} groups for {len(messages)} messages; give one per message")
        start = time.perf_counter()
        ids = [self.tokenizer(self._format(m), add_special_tokens=False)["input_ids"] for m in messages]
        out = np.empty(len(ids), dtype=np.float64)
        members: dict[str, list[int]] = {}
        for i, key in enumerate(groups if groups is not None else ()):
            members.setdefault(key, []).append(i)
        alone: list[int] = []
        shared = 0
        with torch.inference_mode():
            for rows in members.values() if groups is not None else [range(len(ids))]:
                prefix = _common_prefix([ids[i] for i in rows]) if len(rows) > 1 else 0
                if groups is None or prefix < _MIN_SHARED:
                    alone.extend(rows)
                    continue
                shared += prefix * (len(rows) - 1)
                cache = self.model(
                    input_ids=torch.tensor([ids[rows[0]][:prefix]], device=self.device),
                    use_cache=True,
                    logits_to_keep=1,  # the prefix's logits are never read: skip the vocabulary projection
                ).past_key_values  # the prefix's keys and values, batch 1
                rows = sorted(rows, key=lambda i: len(ids[i]))
                for s in range(0, len(rows), self.batch_size):
                    idx = rows[s : s + self.batch_size]
                    out[idx] = self._p_yes_batch([ids[i][prefix:] for i in idx], cache, prefix)
            alone.sort(key=lambda i: len(ids[i]))
            for s in range(0, len(alone), self.batch_size):
                idx = alone[s : s + self.batch_size]
                out[idx] = self._p_yes_batch([ids[i] for i in idx])
        elapsed = time.perf_counter() - start
        self.stats.asked += len(ids)
        self.stats.llm_seconds += elapsed
        self.stats.extra["prefix_tokens_reused"] = self.stats.extra.get("prefix_tokens_reused", 0) + shared
        if self.device.startswith("cuda"):
            self.stats.gpu_hours += elapsed / 3600
        return out

    def _p_yes_batch(self, rows: list[list[int]], cache=None, prefix: int = 0) -> np.ndarray:
        """(b,) P(yes) after each row of token ids, left-padded; after a cached prefix when given."""
        import copy

        import torch

        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)  # (b, S)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.device)  # (b, S)
        # Positions count from each row's first real token, as generate() does, after the prefix.
        positions = prefix + (mask.cumsum(-1) - 1).clamp(min=0)  # (b, S)
        if cache is not None:
            cache = copy.deepcopy(cache)  # the forward appends to it: every batch starts from the prefix
            cache.batch_repeat_interleave(len(rows))
            mask = torch.cat([torch.ones(len(rows), prefix, dtype=mask.dtype, device=self.device), mask], dim=1)
        logits = (
            self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                logits_to_keep=1,
            )
            .logits[:, -1]
            .float()
        )  # (b, V)
        logp = torch.log_softmax(logits, dim=-1)
        yes = torch.tensor(self.yes_ids, device=self.device)
        no = torch.tensor(self.no_ids, device=self.device)
        p = torch.sigmoid(torch.logsumexp(logp[:, yes], -1) - torch.logsumexp(logp[:, no], -1))  # (b,)
        return p.cpu().numpy()


def _common_prefix(seqs: list[list[int]]) -> int:
    """Length of the longest common prefix, kept below the shortest sequence (each keeps one token)."""
    shortest = min(len(s) for s in seqs)
    n = 0
    while n < shortest - 1 and all(s[n] == seqs[0][n] for s in seqs):
        n += 1
    return n
