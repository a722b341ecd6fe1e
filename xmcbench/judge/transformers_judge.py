"""A local causal LM as judge, through transformers: one forward pass per batch, no generation.

    P(yes) = Σ_{t∈YES} p(t | prompt) / (Σ_{t∈YES} p(t | prompt) + Σ_{t∈NO} p(t | prompt))

read off the next-token distribution after the chat-formatted prompt, where YES / NO are the
single-token spellings of "yes" / "no" the tokenizer has ("yes", "Yes", " yes", "YES", …).
Batches are sorted by length and left-padded so the last position is every row's next token.

Shared prefixes are read once (``p_yes``, and ``score_messages`` given groups). The start of the
chat template, common to every prompt of a call, runs once and its key/value cache is kept for
later calls. A document's part of its questions' common prefix (the document and the question's
start: all the packaged prompts put ``{doc}`` first) runs once, several documents per forward on
that cache (one without a template); each label's remaining tokens run on its document's cache,
batched across documents.
Padding between the parts takes no position, so every prompt is the same token sequence at the
same positions as read whole, and P(yes) is the same up to float rounding (``tests/judge``).
LMTX asks j labels per document, and its CPU runs have short documents: there the template is
about half of each prompt.

The model is a folder, a GGUF file or a ``parts:`` spec (``model_files``); bf16 on GPU, and on CPU
the dtype setting decides (bf16 by default: the measured speed in offline.md), except that bf16 runs
as fp32 on a CPU where it is no faster: emulated without bf16 instructions, or slower than fp32's
kernels (``judge_dtype``). ``threads`` sets
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
_KEPT_PREFIXES = 4  # prefixes common to a whole call, kept for the next calls (one per prompt template in use)
_SPELLINGS = ("yes", "Yes", "YES", " yes", " Yes", " YES", "no", "No", "NO", " no", " No", " NO")


def judge_dtype(device: str, dtype: str):
    """The judge's torch dtype: bf16 on CUDA; on a CPU the setting, except that bf16 runs as fp32 on a
    CPU where bf16 is not used (``xmcbench.train.precision.use_cpu_bf16``): without bf16
    instructions torch emulates it (the 0.5B test judge read 16 prompts in 38 s as bf16 and 6.5 s as
    fp32 on an AMD EPYC without AVX-512), and some CPUs with them multiply fp32 faster still."""
    import torch

    from xmcbench.train.precision import cpu_bf16_why_not, use_cpu_bf16

    if device.startswith("cuda"):
        return torch.bfloat16
    if dtype == "bfloat16" and device == "cpu" and not use_cpu_bf16():
        log.info("judge dtype bfloat16: %s; running float32", cpu_bf16_why_not())
        return torch.float32
    return getattr(torch, dtype)


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
        torch_dtype = judge_dtype(device, dtype)
        self.stats.extra["dtype"] = str(torch_dtype).removeprefix("torch.")  # what ran, recorded with the run
        # part of the judgement cache's key: how much of a document it reads, in what precision
        self.answer_settings = f"max_doc_tokens={max_doc_tokens} dtype={self.stats.extra['dtype']}"
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
        self._prefixes: dict[tuple[int, ...], object] = {}  # token ids -> their cache at batch 1, oldest use first

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

        ``groups``: one key per message (the document), or None to read every message whole. With
        groups, the prefix common to all the messages runs once (and is kept for later calls), and
        the messages of a key with a longer common prefix run the rest of it once.
        """
        import torch

        if groups is not None and len(groups) != len(messages):
            raise JudgeError(f"score_messages: {len(groups)} groups for {len(messages)} messages; give one per message")
        start = time.perf_counter()
        ids = [self.tokenizer(self._format(m), add_special_tokens=False)["input_ids"] for m in messages]
        out = np.empty(len(ids), dtype=np.float64)
        with torch.inference_mode():
            if groups is None:
                for idx in _batches(sorted(range(len(ids)), key=lambda i: len(ids[i])), self.batch_size):
                    out[idx] = self._p_yes_batch([ids[i] for i in idx])
                run = sum(map(len, ids))
            else:
                run = self._score_shared(ids, groups, out)
        elapsed = time.perf_counter() - start
        self.stats.asked += len(ids)
        self.stats.llm_seconds += elapsed
        reused = sum(map(len, ids)) - run
        self.stats.extra["prefix_tokens_reused"] = self.stats.extra.get("prefix_tokens_reused", 0) + reused
        if self.device.startswith("cuda"):
            self.stats.gpu_hours += elapsed / 3600
        return out

    def _score_shared(self, ids: list[list[int]], groups: Sequence[str], out: np.ndarray) -> int:
        """Fills ``out`` reading the prefix common to all ``ids`` once, each group's own prefix once
        (several groups per forward) and the rest of each row (batched across groups); returns the
        number of tokens run through the model."""
        import torch

        members: dict[str, list[int]] = {}
        for i, key in enumerate(groups):
            members.setdefault(key, []).append(i)
        common = _common_prefix(ids) if ids else 0
        base, common, run = (
            self._call_prefix(ids[0][:common], new=len(ids) > 1) if common >= _MIN_SHARED else (None, 0, 0)
        )
        base_mask = torch.ones(1, common, dtype=torch.long, device=self.device)
        # (rows, their common prefix) of the groups that share more than the call's common prefix
        docs: list[tuple[list[int], int]] = []
        loose: list[int] = []  # rows read after the common prefix only
        for rows in members.values():
            prefix = _common_prefix([ids[i] for i in rows]) if len(rows) > 1 else 0
            if prefix > common and prefix >= _MIN_SHARED:
                docs.append((rows, prefix))
            else:
                loose.extend(rows)
        docs.sort(key=lambda d: d[1])
        # Without a common prefix, a left-padded row would start with queries that see no key at all.
        per_forward = self.batch_size if base is not None else 1
        for chunk in _batches(docs, per_forward):
            parts = [ids[rows[0]][common:prefix] for rows, prefix in chunk]
            output, mask = self._forward(parts, base, base_mask, [0] * len(parts))
            cache = output.past_key_values
            run += sum(map(len, parts))
            tails = sorted(
                ((i, d, prefix) for d, (rows, prefix) in enumerate(chunk) for i in rows),
                key=lambda t: len(ids[t[0]]) - t[2],
            )
            for batch in _batches(tails, self.batch_size):
                idx = [i for i, _, _ in batch]
                out[idx] = self._p_yes_batch(
                    [ids[i][prefix:] for i, _, prefix in batch], cache, mask, [d for _, d, _ in batch]
                )
                run += sum(len(ids[i]) - prefix for i, _, prefix in batch)
        loose.sort(key=lambda i: len(ids[i]))
        for idx in _batches(loose, self.batch_size):
            out[idx] = self._p_yes_batch([ids[i][common:] for i in idx], base, base_mask, [0] * len(idx))
            run += sum(len(ids[i]) - common for i in idx)
        return run

    def _call_prefix(self, prefix: list[int], new: bool):
        """(cache at batch 1, its length, tokens run) of the longest kept prefix that starts ``prefix``;
        else, when ``new``, of ``prefix`` itself, run and kept. (None, 0, 0) when neither."""
        import torch

        kept = [k for k in self._prefixes if len(k) <= len(prefix) and tuple(prefix[: len(k)]) == k]
        if kept:
            key = max(kept, key=len)
            self._prefixes[key] = self._prefixes.pop(key)  # most recently used last
            return self._prefixes[key], len(key), 0
        if not new:  # one message: a prefix of its own would only add a forward
            return None, 0, 0
        key = tuple(prefix)
        self._prefixes[key] = self.model(
            input_ids=torch.tensor([prefix], device=self.device),
            use_cache=True,
            logits_to_keep=1,  # the prefix's logits are never read: skip the vocabulary projection
        ).past_key_values
        self.stats.extra["call_prefix_runs"] = self.stats.extra.get("call_prefix_runs", 0) + 1
        while len(self._prefixes) > _KEPT_PREFIXES:
            del self._prefixes[next(iter(self._prefixes))]
        return self._prefixes[key], len(key), len(key)

    def _forward(self, rows: list[list[int]], cache=None, past_mask=None, which: list[int] | None = None):
        """The model on rows of token ids, left-padded, row r after row ``which[r]`` of ``cache`` (whose
        tokens ``past_mask`` masks); returns the output and the attention mask over cache and rows."""
        import copy

        import torch

        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)  # (b, S)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.device)  # (b, S)
        if cache is not None:
            index = torch.tensor(which, device=self.device)
            cache = copy.deepcopy(cache)  # the forward appends to it: the kept cache must stay as it is
            cache.batch_select_indices(index)
            mask = torch.cat([past_mask[index], mask], dim=1)  # (b, P + S)
        # Positions count the real tokens before each one, as generate() does: padding, also the
        # padding left between a cached part and the rows, takes none.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -width:]  # (b, S)
        output = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,  # only the last position's logits are read
        )
        return output, mask

    def _p_yes_batch(
        self, rows: list[list[int]], cache=None, past_mask=None, which: list[int] | None = None
    ) -> np.ndarray:
        """(b,) P(yes) after each row of token ids, left-padded; after a cached part when given (see ``_forward``)."""
        import torch

        logits = self._forward(rows, cache, past_mask, which)[0].logits[:, -1].float()  # (b, V)
        logp = torch.log_softmax(logits, dim=-1)
        yes = torch.tensor(self.yes_ids, device=self.device)
        no = torch.tensor(self.no_ids, device=self.device)
        p = torch.sigmoid(torch.logsumexp(logp[:, yes], -1) - torch.logsumexp(logp[:, no], -1))  # (b,)
        return p.cpu().numpy()


def _batches(items: list, size: int) -> list[list]:
    return [items[s : s + size] for s in range(0, len(items), size)]


def _common_prefix(seqs: list[list[int]]) -> int:
    """Length of the longest common prefix, kept below the shortest sequence (each keeps one token)."""
    shortest = min(len(s) for s in seqs)
    n = 0
    while n < shortest - 1 and all(s[n] == seqs[0][n] for s in seqs):
        n += 1
    return n
