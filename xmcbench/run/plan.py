"""Before a run: how much GPU memory per device, how big the label embeddings and classifier, how long.

    >>> from xmcbench.run.plan import plan_recipe
    >>> p = plan_recipe(load_recipe("recipes/dexml/lf-amazontitles-1.3m-all-negatives.yaml"), gpu="A100-40GB", num_gpus=8)
    >>> print(p.render()); p.fits

An estimate on paper, from:

* the encoder's size: ``transformers.AutoConfig`` of a local folder or of an ``hf://`` checkpoint's
  config (from xmcbench's Hub cache, or fetched alone, without the weights, when online), else a
  table of known Hub ids (a bare Hub id is never loaded; an unknown one is an error that says to
  pass a folder);
* the dataset's size: the catalogue's counts (``paper_counts``) or the synthetic section's;
* the recipe: method, regime, batch size, gradient-cache chunk, shortlist/pool sizes, max length,
  epochs, GPUs;
* a device table (A100-40GB, A100-80GB, H100-80GB, ...) or ``gpu_mem_gb``;
* the texts' lengths: batches are padded to their longest text, so each side counts as its longest
  text in tokens, at most its max_length (``TextLengths``). Measured when the dataset is prepared
  here (``xmcbench.data.token_lengths``), else max_length itself: an upper bound, which the plan
  and its warning say.

Memory per device = model state (fp32 weights, grads and AdamW moments: 16 bytes a parameter) +
activations (bf16 autocast: 42.5 h + 2 s bytes per token and layer, measured) of what is
embedded with a graph at once + the method's label-side tensors + a 10% allocator margin:

* DEXML all negatives: the larger of this GPU's share of the query batch and one gradient-cache
  chunk of labels; this device's shard of the label embeddings with their cached gradients; and
  the loss: with the decoupled softmax, computed in label blocks
  (``xmcbench.train.sharded_decoupled_softmax``), ~3 float32 score blocks (its target masks are
  sparse: the positive cells only, a few MB); with SoftTop-k, ~12 float32 (batch x label shard)
  tensors (measured on one GPU);
* sampled pools (DEXML hard negatives, UniDEC, PRIME, ...): the batch's queries and its pool of
  positives and negatives (counted with duplicates: an upper bound; DEXML with ``pool_chunk``: the
  larger of the query batch and one pool chunk, as all negatives), and the (batch x pool) loss
  tensors (DEXML's decoupled softmax: score blocks, as above); UniDEC also its classifier
  table with AdamW state.

LMTX at most (``_lmtx_work``): up to max_cycles cycles over its training documents, every label
encoded twice a cycle outside the steps (``Plan.other_s``), and its judge (``JudgePlan``): every
round's questions, each document read once a round, 2 x parameters FLOPs a prompt token.

Step time = the step's FLOPs / (device peak x an assumed utilisation of 20%): what DistilBERT-shaped
steps reached on an H100 (12-19% at 32 tokens) and what DEXML's own table gives (Table 8: 6.0-6.7 s
a batch of 4096 at 131K labels on 4 A100s, gradient-cache chunks of 1024-4096; the plan of its
recipe, chunks of 2048: 5.9 s). Checked against peaks and steps recorded on an
H100 and an H200 (``benchmarks/results/train-gpu-h100.json``, ``train-gpu-h200.json``;
``tests/run/test_plan.py``): memory within -10% / +70% of the peaks (the pools' duplicates make it
high), step time within 0.5-2x.

The activation cost is a measurement (``benchmarks/bench_activations.py --device cuda``, H100,
``benchmarks/results/activations-gpu-h100.json``): 42.5 h + 2 s bytes per token and layer from 32 to
512 tokens. Korthikanti et al.'s 34 h + 5 a s counts the attention matrix, which PyTorch's fused
attention (SDPA) never stores; bf16 autocast keeps float32 copies of some tensors the formula
counts in 16 bits, hence 42.5 h.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

from xmcbench.errors import XmcbenchError
from xmcbench.recipe.devices import DEVICES, canonical_device

__all__ = ["DEVICES", "ENCODERS", "EncoderSize", "Plan", "TextLengths", "encoder_size", "plan_recipe", "text_lengths"]

GB = 1e9
DEFAULT_GPU = "A100-40GB"  # for recipes that name no hardware.gpu
# Activations kept for backward per token and layer under bf16 autocast with fused attention: a
# least-squares fit of 32-512 tokens on an H100 (benchmarks/results/activations-gpu-h100.json).
ACTIVATION_BYTES_PER_H = 42.5
ACTIVATION_BYTES_PER_S = 2.0
# ~12 float32 tensors of (batch x labels) in a plain-autograd softmax step (scores, targets, softmax
# terms and their gradients), measured on an H200 (train-gpu-h200.json, before the blockwise loss).
LOGIT_TENSORS = 12
# DEXML's decoupled softmax in label blocks (xmcbench.train.sharded_decoupled_softmax.BLOCK_CELLS)
LOSS_BLOCK_CELLS = 1 << 24


def activation_bytes(hidden: int, seq: int) -> float:
    """Bytes one token keeps for backward in one encoder layer (bf16 autocast, fused attention)."""
    return ACTIVATION_BYTES_PER_H * hidden + ACTIVATION_BYTES_PER_S * seq


def blockwise_decoupled_softmax_gb(batch: int, labels: int) -> float:
    """Memory of DEXML's blockwise decoupled softmax beyond the embeddings and their gradients:
    ~3 float32 score blocks (the block, its product with the queries, allocator slack: measured
    on a CPU, ``benchmarks/results/dexml-loss-cpu-sparse.json``). DEXML passes its target masks
    sparse, so no (batch x labels) tensor is held; the positive cells take a few MB."""
    return 3 * min(LOSS_BLOCK_CELLS, batch * labels) * 4 / GB


@dataclass(frozen=True)
class EncoderSize:
    params: int  # all parameters
    hidden: int
    layers: int
    vocab: int
    source: str  # "config" (a local folder) or "table"


# Hub ids that cannot be loaded offline: (params, hidden, layers, vocab), from their configs.
ENCODERS: dict[str, tuple[int, int, int, int]] = {
    "distilbert-base-uncased": (66_362_880, 768, 6, 30_522),
    "distilbert-base-cased": (65_190_912, 768, 6, 28_996),
    "bert-base-uncased": (109_482_240, 768, 12, 30_522),
    "bert-base-cased": (108_310_272, 768, 12, 28_996),
    "roberta-base": (124_645_632, 768, 12, 50_265),
    "all-minilm-l6-v2": (22_713_216, 384, 6, 30_522),
    "all-minilm-l12-v2": (33_360_000, 384, 12, 30_522),
    "all-mpnet-base-v2": (109_486_464, 768, 12, 30_527),
    "msmarco-distilbert-base-v4": (66_362_880, 768, 6, 30_522),
    "bge-small-en-v1.5": (33_360_000, 384, 12, 30_522),
    "bge-base-en-v1.5": (109_482_240, 768, 12, 30_522),
}


def encoder_size(name: str) -> EncoderSize:
    """Parameters, hidden size, layers of an encoder: a local folder's config.json, else the table."""
    folder = Path(name).expanduser()
    if (folder / "config.json").is_file():
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(str(folder))
        h = int(getattr(cfg, "hidden_size", None) or getattr(cfg, "dim", 0))
        layers = int(getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layers", 0))
        vocab = int(getattr(cfg, "vocab_size", 30_522))
        ffn = int(getattr(cfg, "intermediate_size", None) or getattr(cfg, "hidden_dim", 4 * h))
        positions = int(getattr(cfg, "max_position_embeddings", 512))
        per_layer = 4 * h * h + 2 * h * ffn + 9 * h + ffn  # attention, FFN, biases, layer norms
        return EncoderSize(vocab * h + positions * h + layers * per_layer, h, layers, vocab, "config")
    key = name.split("/")[-1].lower()
    if key not in ENCODERS:
        raise XmcbenchError(
            f"encoder {name!r} is neither a local folder with a config.json nor in the table of known sizes "
            f"({', '.join(sorted(ENCODERS))}); pass the encoder's folder"
        )
    params, h, layers, vocab = ENCODERS[key]
    return EncoderSize(params, h, layers, vocab, "table")


@dataclass(frozen=True)
class TextLengths:
    """Tokens in the widest query batch and the widest label batch: each side's longest text, at most
    its max_length (batches are padded to their longest text, so the peak step holds the longest)."""

    query: int
    label: int
    bound: str  # "" when measured with the encoder's tokenizer, else what the upper bound is
    how: str


# What plan reads of an hf:// checkpoint: its config and tokenizer, never the weights.
HUB_PLAN_FILES = [
    "config.json",
    "tokenizer*",
    "vocab*",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "*.model",
]


def encoder_source(name: str, revision: str | None = None) -> str:
    """Where plan reads an encoder: for ``hf://ORG/NAME[@REV]``, its snapshot in xmcbench's Hub cache
    with the config and tokenizer only (fetched when online and not cached; the weights are left
    for the run); any other name as it is."""
    from xmcbench.encoders.hub_ref import download_checkpoint, is_hub_ref

    if not is_hub_ref(name):
        return name
    return str(download_checkpoint(name, revision, allow_patterns=HUB_PLAN_FILES).path)


def _local_tokenizer(name: str, revision: str | None):
    """The encoder's tokenizer when it is on this machine (a folder, a packaged model, the Hub cache),
    else None. Never downloads a Hub id (an hf:// encoder comes as its ``encoder_source`` folder)."""
    from xmcbench.encoders.text_encoder import has_vocabulary, resolve_model_path

    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name), revision=revision, local_files_only=True)
    except (OSError, ValueError):
        return None
    return tokenizer if has_vocabulary(tokenizer) else None  # a folder without tokenizer files


def text_lengths(recipe, progress: bool = False, source: str | None = None) -> TextLengths:
    """The recipe's padded query and label lengths: measured on its dataset when it is prepared here
    (with the encoder's tokenizer when it can be loaded, else bounded by the texts' utf-8 lengths),
    else each side's max_length. ``source``: the encoder's ``encoder_source`` when already known."""
    from xmcbench.data import prepared_if_current
    from xmcbench.data.token_lengths import generous_byte_lengths, longest_prepared

    seq = int(recipe.encoder.max_length)
    label_seq = int(recipe.encoder.label_max_length or seq)
    ds = recipe.dataset
    prepared = prepared_if_current(ds.name, ds.synthetic.model_dump() if ds.synthetic is not None else None)
    if prepared is None:
        get = "a run makes it" if ds.synthetic is not None else f"`xmcbench datasets download {ds.name}` fetches it"
        return TextLengths(
            seq,
            label_seq,
            "every text at max_length",
            f"texts counted at max_length ({seq} / {label_seq} tokens), an upper bound: {ds.name} is not "
            f"prepared here ({get}; plan then measures its longest texts)",
        )
    # MACLR's pre-training pairs contexts (title + body: the query texts, where those hold the
    # content) with instance titles and label texts, which plan does not measure
    maclr = recipe.method.name == "maclr"
    measure_labels = not maclr
    measure_queries = not maclr or prepared.query_text != "title"
    source = source or encoder_source(recipe.encoder.name, recipe.encoder.revision)
    tokenizer = _local_tokenizer(source, recipe.encoder.revision if source == recipe.encoder.name else None)
    if tokenizer is None:
        specials = 2  # [CLS] and [SEP], or <s> and </s>

        def longest(texts, cap: int) -> int:
            return min(cap, int(generous_byte_lengths(texts).max(initial=0)) + specials + 1)

        q = longest(prepared.query_texts("train"), seq) if measure_queries else seq
        lab = longest(prepared.label_texts(), label_seq) if measure_labels else label_seq
        bound = "texts at a bound from their utf-8 lengths"
        how = f"bounded by their utf-8 lengths (no tokenizer of {recipe.encoder.name} could be loaded here)"
    else:
        q = longest_prepared(prepared, "train", tokenizer, seq, progress) if measure_queries else seq
        lab = longest_prepared(prepared, "labels", tokenizer, label_seq, progress) if measure_labels else label_seq
        bound = "" if measure_labels and measure_queries else "the texts it does not measure at max_length"
        how = f"measured with {recipe.encoder.name}'s tokenizer"

    def said(n: int, cap: int, measured: bool) -> str:
        return f"{n}" + (" (max_length: not measured)" if not measured else " (= max_length)" if n >= cap else "")

    side = "contexts" if maclr else "queries"
    other = "titles and labels" if maclr else "labels"
    return TextLengths(
        max(q, 1),
        max(lab, 1),
        bound,
        f"longest texts of {ds.name}: {side} {said(q, seq, measure_queries)}, "
        f"{other} {said(lab, label_seq, measure_labels)} tokens, {how}",
    )


# The HTTP judge cuts documents in characters: English runs ~4 characters a token in LLM tokenizers.
CHARS_PER_TOKEN = 4
# "13B", "1.5b", "135M" as a word of a model's name ("-7B-", not the "7b" inside a hash, "8x7B" or
# "1_6b"); a name's "1M" may be its context length, so a B size wins over an M one
_SIZE_IN_NAME = re.compile(r"(?<![a-z0-9._])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class JudgePlan:
    """LMTX's judge over a whole run, at most: every round's questions asked (the judgement cache
    skips pairs asked before, so later cycles usually ask fewer). Prefill only: P(yes) is read off
    the next token, so a prompt token costs 2 x parameters FLOPs; each document is read once per
    round (the transformers judge shares it across the document's labels; vLLM's prefix caching does
    the same)."""

    model: str
    params: float  # 0 when unknown (then no time is counted)
    size_from: str  # how the size is known
    rounds: int  # judging rounds: the threshold's and first dev score's, then each cycle's
    documents: int  # documents read, all rounds
    questions: int  # (document, label) pairs asked, all rounds
    doc_tokens: int  # a document's tokens as the judge cuts it (an upper bound)
    question_tokens: int  # a question's own tokens: the prompt around the document, and the label
    tokens: int  # prompt tokens read, all rounds
    where: str  # "server" (its own GPUs), "training GPU" (in the run's process), "CPU", "none" (fake)
    gpu_hours: float  # 0 on CPU, for the fake judge, or when its size is unknown
    memory_gb: dict[str, float] = field(default_factory=dict)  # on the training GPU: weights, key/value cache


def _hours(seconds: float) -> str:
    """Hours to two significant digits under 10 (a 3-minute LMTX training reads 0.05, not 0.0)."""
    hours = seconds / 3600
    return f"{hours:.2g}" if hours < 10 else f"{hours:,.0f}"


def judge_size(judge, given: float | None = None) -> tuple[float, str]:
    """(parameters, how known) of a judge: ``given``; a local model folder's safetensors headers
    (a parts: judge's once converted here); the size in its name (WizardLM-13B-V1.0: 13e9); else
    (0, why unknown)."""
    from xmcbench.judge.model_files import local_folder

    if given is not None:
        return float(given), "as given"
    if judge.backend == "fake":
        return 0.0, "the fake judge: no model"
    folder = local_folder(judge.model)
    unreadable = ""
    try:
        counted = _safetensors_params(folder) if folder is not None and folder.is_dir() else None
    except Exception as exc:  # noqa: BLE001 - safetensors and json raise assorted types for a damaged file
        # a plan is an estimate: damaged weights are the run's error to report, not the plan's
        counted = None
        unreadable = f"; its weights in {folder} could not be read ({type(exc).__name__}: {str(exc)[:80]})"
    if counted:
        return float(counted), f"counted in {folder}"
    found = _SIZE_IN_NAME.findall(judge.model.split("#")[0].rstrip("/").split("/")[-1])
    if found:
        sizes = [float(n) * (1e9 if unit.lower() == "b" else 1e6) for n, unit in found]
        billions = [x for x in sizes if x >= 1e9]
        return max(billions or sizes), "read from its name" + unreadable
    return 0.0, "unknown: no local weights and no size in its name; give --judge-params (e.g. 13e9)" + unreadable


def _judge_config(spec: str) -> dict:
    """The config.json of a judge's folder on this machine; {} when there is none."""
    from xmcbench.judge.model_files import local_folder

    folder = local_folder(spec)
    return _read_config(folder) if folder is not None else {}


def _read_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _safetensors_params(folder: Path) -> int | None:
    """Parameters in a folder's safetensors weights, from their headers (nothing is loaded): the
    files its index names, else every ``*.safetensors`` but a ``consolidated`` copy of the same
    weights. None when there are none, or when they are quantized (packed weights count low)."""
    from safetensors import safe_open

    if _read_config(folder).get("quantization_config"):
        return None
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / name for name in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = [f for f in sorted(folder.glob("*.safetensors")) if not f.name.startswith("consolidated")]
    if not files:
        return None
    total = 0
    for f in files:
        with safe_open(str(f), framework="numpy") as st:
            total += sum(math.prod(st.get_slice(name).get_shape()) for name in st.keys())
    return total


@dataclass
class Plan:
    recipe: str
    method: str
    dataset: str
    n_train: int
    n_labels: int
    encoder: str
    encoder_params: int
    hidden: int
    gpu: str
    gpu_mem_gb: float
    num_gpus: int
    batch_size: int
    memory_gb: dict[str, float]  # per device, by component
    label_embeddings_gb: float  # the whole table, fp32
    classifier_gb: float  # the whole classifier (weights only, fp32); 0 when there is none
    step_s: float
    steps: int
    gpu_hours: float  # the training GPUs': steps and encoding passes outside them
    notes: list[str] = field(default_factory=list)
    other_s: float = 0.0  # wall seconds outside the steps (LMTX: encoding for shortlists, dev scores and
    # the label table; the judge's prefill when it shares the training GPU)
    judge: JudgePlan | None = None  # LMTX's judge: on its own server, the training GPU, or the CPU
    lengths: TextLengths | None = None  # the longest query and label as counted (padded batch widths)
    refusals: list[str] = field(default_factory=list)  # what the run itself would refuse, before training
    advice: str = (
        "use more GPUs, a smaller training.batch_size, or a larger device"  # what to change if it will not fit
    )

    @property
    def lengths_bound(self) -> str:
        """ "" when the texts were measured, else the upper bound they were counted at."""
        return self.lengths.bound if self.lengths else ""

    @property
    def per_device_gb(self) -> float:
        return sum(self.memory_gb.values())

    @property
    def fits(self) -> bool:
        return self.per_device_gb <= self.gpu_mem_gb

    def warnings(self) -> list[str]:
        if self.fits:
            return list(self.refusals)
        bound = f" with {self.lengths_bound} (an upper bound)" if self.lengths_bound else ""
        return [
            *self.refusals,
            f"will not fit{bound}: ~{self.per_device_gb:.1f} GB per device > {self.gpu_mem_gb:g} GB on "
            f"{self.gpu}; {self.advice}",
        ]

    def as_dict(self) -> dict:
        out = asdict(self)  # lengths as a nested dict
        out.update(
            lengths_bound=self.lengths_bound, per_device_gb=self.per_device_gb, fits=self.fits, warnings=self.warnings()
        )
        return out

    def render(self) -> str:
        lines = [
            f"plan: {self.recipe}",
            f"  method {self.method} on {self.dataset}: {self.n_train:,} train queries, {self.n_labels:,} labels",
            f"  encoder {self.encoder}: {self.encoder_params / 1e6:.1f}M parameters, hidden {self.hidden}",
            f"  hardware {self.num_gpus} x {self.gpu} ({self.gpu_mem_gb:g} GB each), global batch {self.batch_size:,}",
            f"  label embeddings (all labels, fp32)   {self.label_embeddings_gb:8.2f} GB",
            f"  classifier (weights, fp32)            {self.classifier_gb:8.2f} GB",
            "  GPU memory per device:",
        ]
        width = max([36] + [len(name) + 2 for name in self.memory_gb])  # long component names stay in line
        lines += [f"    {name:<{width}}{gb:8.2f} GB" for name, gb in self.memory_gb.items()]
        lines += [
            f"    {'total':<{width}}{self.per_device_gb:8.2f} GB of {self.gpu_mem_gb:g} GB"
            f" -> {'fits' if self.fits else 'DOES NOT FIT'}",
            f"  step time ~{self.step_s:.2f} s x {self.steps:,} steps = {_hours(self.step_s * self.steps)} h wall"
            + (f", + {_hours(self.other_s)} h outside the steps" if self.other_s else "")
            + f", {_hours(self.gpu_hours * 3600)} GPU-hours",
        ]
        if self.judge is not None:
            j = self.judge
            size = f"{j.params / 1e9:.3g}B parameters, {j.size_from}" if j.params else f"size {j.size_from}"
            if not j.params:
                time = "its time is not counted"
            elif j.where == "server":
                time = f"~{_hours(j.gpu_hours * 3600)} GPU-hours on its own server's GPUs (as {self.gpu}), not in the hours above"
            elif j.where == "training GPU":
                time = f"~{_hours(j.gpu_hours * 3600)} GPU-hours on the training GPU, in the hours above"
            else:
                time = "on CPU: its time is not estimated"
            lines.append(
                f"  judge {j.model} ({size}): up to {j.questions:,} questions over {j.rounds} rounds, "
                f"{j.tokens / 1e6:,.1f}M prompt tokens; {time}"
            )
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  WARNING: {w}" for w in self.warnings()]
        return "\n".join(lines)


def _method_config(recipe):
    """The method's validated config (defaults filled in), or None for a recipe not loaded through
    ``load_recipe`` / ``recipe_from_dict``."""
    try:
        return recipe.method_config()
    except (XmcbenchError, AttributeError):
        return None


def _blockwise(config, params: dict) -> bool:
    """DEXML with the decoupled softmax (its default loss) runs the blockwise loss."""
    return (getattr(config, "loss", None) or params.get("loss", "decoupled_softmax")) == "decoupled_softmax"


def _pool_size(method: str, config, batch: int, n_labels: int) -> int:
    """Labels embedded with a graph per step: each query's sampled positives and negatives
    (DEXML hard negatives: beta + m; UniDEC: capped by max_pool_size; PRIME: beta positives)."""
    positives = int(getattr(config, "positives_per_query", 1) or 1)
    negatives = int(getattr(config, "hard_negatives", 0) or 0)
    pool = batch * (positives + negatives)
    cap = getattr(config, "max_pool_size", None)
    if cap:
        pool = min(pool, int(cap))
    return max(1, min(pool, n_labels))


def _dataset_counts(recipe) -> tuple[str, int, int]:
    ds = recipe.dataset
    synthetic = getattr(ds, "synthetic", None)
    if synthetic is not None:
        return ds.name, int(synthetic.train), int(synthetic.labels)
    from xmcbench.data import get_spec

    spec = get_spec(ds.name)
    counts = dict(spec.paper_counts)
    return spec.name, int(counts["train"]), int(counts["labels"])


def plan_recipe(
    recipe,
    gpu: str | None = None,
    num_gpus: int | None = None,
    gpu_mem_gb: float | None = None,
    utilisation: float = 0.2,
    lengths: TextLengths | None = None,
    progress: bool = False,
    judge_params: float | None = None,
) -> Plan:
    """Estimate memory and time of ``recipe`` on ``num_gpus`` x ``gpu`` (defaults: the recipe's
    ``hardware.num_gpus`` and ``hardware.gpu``, the GPU its paper used; A100-40GB where it names none).
    ``judge_params``: an LMTX judge's parameters, where neither local weights nor its name say."""
    if judge_params is not None and not 0 < judge_params < 1e14:
        raise XmcbenchError(f"--judge-params is the judge LLM's parameter count (e.g. 13e9), not {judge_params:g}")
    if num_gpus is not None and not 1 <= num_gpus <= 4096:
        raise XmcbenchError(f"--num-gpus must be between 1 and 4096, not {num_gpus}")
    if gpu_mem_gb is not None and not 0 < gpu_mem_gb < 1e5:
        raise XmcbenchError(f"--gpu-mem is GB per device, more than 0, not {gpu_mem_gb:g}")
    if gpu is not None and not gpu.strip():
        raise XmcbenchError(f"--gpu is empty; use one of {', '.join(DEVICES)}, or leave it out for the recipe's")
    gpu = gpu or recipe.hardware.gpu or DEFAULT_GPU
    known = canonical_device(gpu)
    if known is None and gpu_mem_gb is None:
        raise XmcbenchError(f"unknown GPU {gpu!r}; use one of {', '.join(DEVICES)} or give --gpu-mem")
    gpu = known or gpu
    mem, tflops = DEVICES.get(gpu, (gpu_mem_gb, 312.0))
    mem = float(gpu_mem_gb if gpu_mem_gb is not None else mem)
    g = int(num_gpus if num_gpus is not None else recipe.hardware.num_gpus)
    from xmcbench.methods import METHODS

    if not getattr(METHODS.get(recipe.method.name), "uses_encoder", True):
        raise XmcbenchError(
            f"{recipe.name}: {recipe.method.name} uses no encoder and trains no network (a sparse fit on the "
            "CPU): there is no GPU memory or GPU time to plan"
        )
    one_process = getattr(METHODS.get(recipe.method.name), "single_process", None)
    if g > 1 and one_process:
        raise XmcbenchError(
            f"{recipe.method.name} trains in one process ({one_process}); plan it with --num-gpus 1 "
            "(a sweep runs several such runs side by side, one per GPU)"
        )
    name, n_train, n_labels = _dataset_counts(recipe)
    method = recipe.method.name
    params = recipe.method.params()
    source = encoder_source(recipe.encoder.name, recipe.encoder.revision)
    enc = encoder_size(source)
    h, layers = enc.hidden, enc.layers
    lengths = text_lengths(recipe, progress, source) if lengths is None else lengths
    seq, label_seq = lengths.query, lengths.label
    batch = int(recipe.training.batch_size)
    notes = [
        f"encoder size from its {'config' if enc.source == 'config' else 'known-size table (Hub id, offline)'}",
        lengths.how,
    ]
    recipe_batch, refusals = batch, []
    if 0 < n_train < batch:  # a step takes every query there is (the run warns and records this batch)
        notes.append(
            f"training.batch_size {batch:,} is more than the {n_train:,} training queries: planned at {n_train:,}"
        )
        if g > 1 and method not in ("tfidf", "zero_shot"):  # dual_encoder.make_sampler refuses it
            refusals.append(
                f"across {g} GPUs the run refuses training.batch_size {batch:,} (more than the {n_train:,} training "
                f"queries, and the incomplete last batch is dropped); set it to at most {n_train:,}"
            )
        batch = n_train
    config = _method_config(recipe)
    regime = (getattr(config, "regime", None) or params.get("regime")) if method == "dexml" else None

    memory: dict[str, float] = {}
    memory["model + grads + AdamW (fp32)"] = 16 * enc.params / GB
    per_token = layers * activation_bytes(h, seq)  # a query token (measured: module docstring)
    per_label_token = layers * activation_bytes(h, label_seq)  # the 2 s term is each text's own length
    label_table = n_labels * h * 4 / GB
    classifier = 0.0
    logits_flops = 0.0
    if method == "dexml" and regime == "all_negatives":
        shard = math.ceil(n_labels / g)
        chunk = int(params.get("gradcache_chunk", 1024))
        # The query graph (this GPU's share of the batch) lives through the loss; the label chunks
        # are re-embedded with a graph one at a time after it (gradient cache).
        label_chunk_tokens = min(chunk, shard) * label_seq
        memory["activations: max(query batch, label chunk), bf16"] = (
            max(batch / g * seq * per_token, label_chunk_tokens * per_label_token) / GB
        )
        memory["label embedding shard + grads (fp32)"] = 2 * shard * h * 4 / GB
        if _blockwise(config, params):
            memory["loss: score blocks (batch x shard)"] = blockwise_decoupled_softmax_gb(batch, shard)
        else:
            memory["logits + loss tensors (batch x shard, fp32)"] = LOGIT_TENSORS * batch * shard * 4 / GB
        # tokens through the encoder: queries forward + backward (x3); labels forward without a
        # graph, again with one, and backward (x4), every label every step, across GPUs
        step_tokens = batch * seq * 3 + n_labels * label_seq * 4
        logits_flops = (4 if _blockwise(config, params) else 3) * 2 * batch * n_labels * h  # + scores again
        notes.append("all-negatives: every label is re-encoded each step (gradient cache), labels sharded over GPUs")
    elif method == "maclr":
        # Stage I holds the most: contexts twice (Eq. 3's two dropout views h and h+, each its own
        # graph), the instance titles, and M label texts (Eq. 3's negatives)
        regularised = bool(getattr(config, "label_regularisation", True))
        negatives = int(getattr(config, "label_negatives", 32)) if regularised else 0
        contexts = (2 if regularised else 1) * batch * seq
        titles_and_labels = (batch + negatives) * label_seq
        tokens = contexts + titles_and_labels
        held = "contexts x2, titles, labels" if regularised else "contexts, titles"
        memory[f"activations ({held}), bf16"] = (contexts * per_token + titles_and_labels * per_label_token) / GB
        memory["pool loss tensors (batch x pool, fp32)"] = LOGIT_TENSORS * batch * (batch + negatives) * 4 / GB
        step_tokens = tokens * 3
        notes.append(
            "MACLR's memory at its largest step, Stage I's: "
            + ("two dropout views of each context, titles, label negatives" if regularised else "contexts, titles")
            + "; the step time shown is the mean over its stages (Stage II and fine-tuning steps hold one"
            " view of a batch of instances and of their labels, no negatives)"
        )
    elif method in ("tfidf", "zero_shot"):
        memory = {"model (inference, fp32)": 4 * enc.params / GB, "label embeddings (fp32)": label_table}
        step_tokens = batch * seq
    else:
        pool = _pool_size(method, config, batch, n_labels)
        pool_chunk = getattr(config, "pool_chunk", None) if method == "dexml" else None
        cached_pool = bool(pool_chunk) and math.ceil(pool / g) > pool_chunk
        if cached_pool:
            # DEXML's gradient-cached pool: the query graph, then one pool chunk's graph at a time
            memory["activations: max(query batch, pool chunk), bf16"] = (
                max(batch / g * seq * per_token, pool_chunk * label_seq * per_label_token) / GB
            )
            memory["pool embeddings + grads (fp32)"] = 2 * math.ceil(pool / g) * h * 4 / GB
        else:
            memory["activations (queries + pool labels), bf16"] = (
                (batch * seq * per_token + pool * label_seq * per_label_token) / g / GB
            )
        if method == "dexml" and _blockwise(config, params):
            memory["pool loss: score blocks (batch x pool)"] = blockwise_decoupled_softmax_gb(
                batch, math.ceil(pool / g)
            )
        else:
            memory["pool loss tensors (batch x pool, fp32)"] = LOGIT_TENSORS * batch * pool * 4 / g / GB
        step_tokens = (batch * seq + pool * label_seq) * 3
        if cached_pool:
            step_tokens += pool * label_seq  # the gradient cache's first, graph-free pass over the pool
            notes.append(f"pool embedded through a gradient cache, {pool_chunk:,} labels a chunk")
        notes.append(
            f"pool of {pool:,} labels a step (sampled positives + negatives, duplicates not removed: "
            "an upper bound; the recorded pool_size_mean says what a run drew)"
        )
        if method == "unidec":
            classifier = n_labels * int(getattr(config, "dim", None) or h) * 4 / GB
            memory["classifier + grads + AdamW (fp32)"] = (
                4 * classifier / g if params.get("shard", False) else 4 * classifier
            )
    lmtx = None
    if method == "lmtx" and config is not None:
        lmtx = _lmtx_work(config, n_train, n_labels, batch, lengths, judge_params, tflops * 1e12 * utilisation)
        memory.update(lmtx.judge.memory_gb)
        notes += lmtx.notes
    elif judge_params is not None:
        raise XmcbenchError(f"--judge-params is for LMTX recipes, whose judge is an LLM; {recipe.name} is {method}")
    memory["allocator margin (10%)"] = 0.1 * sum(memory.values())
    non_embedding = max(enc.params - enc.vocab * h, 1)
    flops = 2 * non_embedding * step_tokens + logits_flops
    step_s = flops / (g * tflops * 1e12 * utilisation)
    epochs = int(recipe.training.epochs)
    steps = epochs * math.ceil(n_train / batch) if method not in ("tfidf", "zero_shot") else 0
    other_s, judge = 0.0, None
    if method == "maclr":  # counted in steps, not epochs
        token_s = 2 * non_embedding / (g * tflops * 1e12 * utilisation)
        steps, step_s, encoded = _maclr_work(
            recipe, config, recipe_batch, n_train, n_labels, seq, label_seq, step_s, token_s
        )
        other_s = encoded * token_s
    if lmtx is not None:
        steps, judge = lmtx.steps, lmtx.judge
        other_s = 2 * non_embedding * lmtx.encoded_tokens / (g * tflops * 1e12 * utilisation)
        if judge.where == "training GPU":  # the run waits for it
            other_s += judge.gpu_hours * 3600
    notes.append(f"step time assumes {utilisation:.0%} of the {gpu}'s bf16 peak ({tflops:.0f} TFLOPS)")
    if recipe.hardware.devices == "cpu":
        notes.append(f"the recipe runs on the CPU (hardware.devices: cpu): this plan is for the same run on {gpu}")
    return Plan(
        recipe=recipe.name,
        method=method + (f" ({regime})" if regime else ""),
        dataset=name,
        n_train=n_train,
        n_labels=n_labels,
        encoder=recipe.encoder.name,
        encoder_params=enc.params,
        hidden=h,
        gpu=gpu,
        gpu_mem_gb=mem,
        num_gpus=g,
        batch_size=batch,
        memory_gb=memory,
        label_embeddings_gb=label_table,
        classifier_gb=classifier,
        step_s=step_s,
        steps=steps,
        gpu_hours=(step_s * steps + other_s) * g / 3600,
        notes=notes,
        other_s=other_s,
        judge=judge,
        lengths=lengths,
        advice=_advice(method, regime, config),
        refusals=refusals,
    )


def _maclr_work(
    recipe,
    config,
    batch: int,
    n_train: int,
    n_labels: int,
    seq: int,
    label_seq: int,
    stage1_step_s: float,
    token_s: float,
):
    """MACLR's steps, their mean time, and the tokens it encodes without a graph.

    Stage I's step is ``stage1_step_s``; ``token_s`` is the seconds of one token through the
    encoder's forward pass (a step's backward costs two more). A Stage II or fine-tuning step embeds one
    view of ``batch`` instances and their ``batch`` labels (the recipe's batch: pseudo and few-shot pairs
    can outnumber the instances; instances counted at the contexts' length, an upper bound where they
    are titles), forward and backward. Outside the steps: the K-means
    encodings of every context (the first and each refresh in Stage I's first half), Stage II's
    encoding of the instances and labels for its pseudo-labels, and the final label table."""
    zero_shot = recipe.supervision.mode == "zero_shot"
    pretrains = zero_shot or bool(config.pretrain)  # zero-shot has nothing else to train on
    stage1 = int(config.stage1_steps) * pretrains
    stage2 = int(config.stage2_steps) * bool(config.self_training) * pretrains
    finetune = 0 if zero_shot else int(config.finetune_steps)
    steps = stage1 + stage2 + finetune
    pair_step_s = (batch * seq + batch * label_seq) * 3 * token_s
    mean_step_s = (stage1 * stage1_step_s + (stage2 + finetune) * pair_step_s) / steps if steps else stage1_step_s
    encoded = n_labels * label_seq  # the final label table
    if stage1 and config.clustering and n_train >= config.k0:
        # Algorithm 1: re-clustered after every T_update-th step of Stage I's first half
        refreshes = max(stage1 // 2 - 1, 0) // config.t_update
        encoded += (1 + refreshes) * n_train * seq
    if stage2:
        encoded += n_train * seq + n_labels * label_seq
    return steps, mean_step_s, encoded


def _lmtx_work(config, n_train: int, n_labels: int, batch: int, lengths: TextLengths, judge_params, judge_flops_per_s):
    """(training steps, tokens encoded outside them, the judge's work, notes) of an LMTX run at its
    largest: every cycle up to max_cycles, every training document kept (a "yes" among its top-j).
    Mirrors ``LmtxMethod.fit``: the threshold (when "auto") judges the dev set's top-j and the start
    scores its top-1; each cycle shortlists the training documents (all labels encoded again),
    judges their top-j, trains, then scores the dev set's top-1 (all labels again); the end encodes
    the label table once more."""
    from xmcbench.judge.base import load_prompt

    dev = min(int(config.dev_docs), n_train // 2)
    docs = n_train - dev if config.train_docs is None else min(int(config.train_docs), n_train - dev)
    j = min(int(config.shortlist_j), n_labels)
    cycles = int(config.max_cycles)
    auto = config.threshold == "auto"
    steps = cycles * int(config.epochs_per_cycle) * math.ceil(docs / batch)
    seq, label_seq = lengths.query, lengths.label
    label_table = n_labels * label_seq
    start_tokens = (dev * seq + label_table) * (2 if auto else 1)
    cycle_tokens = (docs + dev) * seq + 2 * label_table
    encoded = start_tokens + cycles * cycle_tokens + label_table

    judge = config.judge
    params, size_from = judge_size(judge, judge_params)
    where = {"openai": "server", "fake": "none"}.get(judge.backend) or (
        "training GPU" if str(judge.device).startswith("cuda") else "CPU"
    )
    if judge.backend == "transformers":
        doc_tokens, cut = int(judge.max_doc_tokens), f"{judge.max_doc_tokens} tokens (max_doc_tokens)"
    else:
        doc_tokens = math.ceil(judge.max_doc_chars / CHARS_PER_TOKEN)
        cut = f"{judge.max_doc_chars:,} characters (max_doc_chars, ~{CHARS_PER_TOKEN} a token)"
    around = load_prompt(judge.prompt).template.replace("{doc}", "").replace("{label_text}", "")
    question_tokens = math.ceil(len(around) / CHARS_PER_TOKEN) + label_seq
    documents = (dev if auto else 0) + dev + cycles * (docs + dev)
    questions = (dev * j if auto else 0) + dev + cycles * (docs * j + dev)
    tokens = documents * doc_tokens + questions * question_tokens
    rounds = (2 if auto else 1) + 2 * cycles
    notes = [
        f"LMTX at most: {cycles} cycles (max_cycles; the judge-labelled dev set may stop it sooner) of "
        f"{config.epochs_per_cycle} epoch(s) over {docs:,} training documents (all counted as kept), "
        f"top-{j} judged a document; all {n_labels:,} labels encoded twice a cycle (shortlist, dev score)",
        f"judge: prefill only, 2 x parameters FLOPs a prompt token at the same utilisation; each document read "
        f"once a round (a server without prefix caching reads it once a question: up to {j}x its tokens), cut "
        f"at {cut}; every question counted (the judgement cache skips those asked before)",
    ]
    memory: dict[str, float] = {}
    if where == "training GPU" and params:  # the judge lives in the run's process, on its GPU
        width = 2 if judge.dtype == "bfloat16" else 4
        memory[f"judge LLM weights ({judge.dtype})"] = width * params / GB
        cfg = _judge_config(judge.model)
        if cfg.get("num_hidden_layers") and cfg.get("hidden_size"):
            heads = int(cfg.get("num_attention_heads") or 1)
            head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
            kv_per_token = 2 * int(cfg["num_hidden_layers"]) * int(cfg.get("num_key_value_heads") or heads) * head_dim
            prompt = doc_tokens + question_tokens
            memory["judge key/value cache (a batch of prompts)"] = judge.batch_size * prompt * kv_per_token * width / GB
        else:
            notes.append("judge's key/value cache not counted: its config.json is not on this machine")
    judge_plan = JudgePlan(
        model=judge.model,
        params=params,
        size_from=size_from,
        rounds=rounds,
        documents=documents,
        questions=questions,
        doc_tokens=doc_tokens,
        question_tokens=question_tokens,
        tokens=tokens,
        where=where,
        gpu_hours=2 * params * tokens / judge_flops_per_s / 3600 if where in ("server", "training GPU") else 0.0,
        memory_gb=memory,
    )
    return _LmtxWork(steps, encoded, judge_plan, notes)


class _LmtxWork(NamedTuple):
    steps: int  # training steps, at most
    encoded_tokens: int  # tokens encoded outside the steps (shortlists, dev scores, the label table)
    judge: JudgePlan
    notes: list[str]


def _advice(method: str, regime: str | None, config) -> str:
    """What to change when a plan will not fit, for what this method can change."""
    from xmcbench.methods import METHODS

    if getattr(METHODS.get(method), "single_process", None):
        return f"{method} trains on one GPU: lower training.batch_size or encoder.max_length, or use a larger device"
    if method == "dexml" and regime == "all_negatives":
        return "use more GPUs (label shards shrink), a smaller method.gradcache_chunk, or a larger device"
    if method == "dexml":
        hint = "a smaller method.pool_chunk" if getattr(config, "pool_chunk", None) else "method.pool_chunk (e.g. 1024)"
        return f"use more GPUs, {hint} to embed the pool through a gradient cache, or a larger device"
    return Plan.advice
