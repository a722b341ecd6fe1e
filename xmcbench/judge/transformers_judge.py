"""A local causal LM as judge, through transformers: one forward pass per batch, no generation.

    P(yes) = Σ_{t∈YES} p(t | prompt) / (Σ_{t∈YES} p(t | prompt) + Σ_{t∈NO} p(t | prompt))

read off the next-token distribution after the chat-formatted prompt, where YES / NO are the
single-token spellings of "yes" / "no" the tokenizer has ("yes", "Yes", " yes", "YES", …).
Batches are sorted by length and left-padded so the last position is every row's next token.

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
        messages = [prompt.render(self._fit_doc(d, lt, prompt), lt) for d, lt in zip(docs, label_texts, strict=False)]
        out = self.score_messages(messages)
        if self.stats.truncated > truncated_before:
            log.warning(
                "judge: %d of %d documents cut to fit %d tokens (the question is kept whole)",
                self.stats.truncated - truncated_before,
                len(messages),
                self.max_doc_tokens,
            )
        return out

    def score_messages(self, messages: Sequence[str]) -> np.ndarray:
        """(n,) P(yes) of user messages as given (chat-formatted here; no truncation)."""
        import torch

        start = time.perf_counter()
        texts = [self._format(m) for m in messages]
        out = np.empty(len(texts), dtype=np.float64)
        order = np.argsort([len(t) for t in texts], kind="stable")
        yes = torch.tensor(self.yes_ids, device=self.device)
        no = torch.tensor(self.no_ids, device=self.device)
        with torch.inference_mode():
            for s in range(0, len(order), self.batch_size):
                idx = order[s : s + self.batch_size]
                batch = self.tokenizer(
                    [texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False
                ).to(self.device)
                # Left padding: positions count from each row's first real token, as generate() does.
                positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
                logits = self.model(**batch, position_ids=positions, logits_to_keep=1).logits[:, -1].float()  # (b, V)
                logp = torch.log_softmax(logits, dim=-1)
                p = torch.sigmoid(torch.logsumexp(logp[:, yes], -1) - torch.logsumexp(logp[:, no], -1))  # (b,)
                out[idx] = p.cpu().numpy()
        elapsed = time.perf_counter() - start
        self.stats.asked += len(texts)
        self.stats.llm_seconds += elapsed
        if self.device.startswith("cuda"):
            self.stats.gpu_hours += elapsed / 3600
        return out
