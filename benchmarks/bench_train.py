"""Training throughput of every method: queries/s and peak memory per training step.

    python benchmarks/bench_train.py --quick                 # tiny 2-layer BERT, ~1-2 min on 2 cores
    python benchmarks/bench_train.py                         # all-MiniLM-L6-v2, small scale (minutes)
    python benchmarks/bench_train.py --methods dexml_all,unidec --labels 5000 --train 8000
    python benchmarks/bench_train.py --device cuda --encoder distilbert --paper-batch --labels 100000

``--encoder distilbert`` is the papers' encoder shape with random weights (``save_random_distilbert``:
no download); ``--paper-batch`` trains each method at its paper's batch and pool sizes (scale 1)
with ``--train-batches`` batches of queries per epoch of the largest batch. On CUDA each row also
carries ``xmcbench plan``'s estimate for the same recipe and GPU (memory per device, step time), so
the plan can be checked against the recorded peaks (``tests/run/test_plan.py``).

Inputs: a synthetic dataset (``xmcbench.data.synth``) in a temporary XMCBENCH_HOME, generated and
prepared once. Each method starts from its paper recipe (``xmcbench/recipes/...``) with the paper's
batch and pool sizes scaled down by the same factor as the batch (``--batch`` / the paper's batch;
per-query counts such as DEXML's or UniDEC's hard negatives kept as published), the synthetic
dataset, the chosen encoder, CPU, fp32, 2 epochs, no validation split.

MACLR and LMTX start from their paper recipes too (MACLR's LF-Amazon-131K, LMTX's LF-Wikipedia-500K),
scaled the same way: MACLR trains on a dataset of its own (instances with a title and a body, for
the Inverse Cloze Task), each stage as many steps as two epochs of the others, K0 and M scaled by
the batch's ratio; LMTX runs one cycle with the deterministic word-overlap judge accepting every
shortlisted label (the LLM's own speed is the runner's ``judge`` row), so each step is a full batch.

Each method trains in its own process (its peak memory is its own) through its ordinary ``fit``.
A post-hook on every optimiser's ``step`` marks the end of each training step:

- stages: MACLR's Stage I and Stage II each step an optimiser of their own; each is timed apart
  (``stages`` in the output, the first stage's figures also at the top);
- step time: the median interval between consecutive steps (the first step of an epoch also
  carries the epoch's set-up: clustering, shortlists, checkpoints; the median leaves them out);
  queries/s = batch / step time;
- peak memory per step: the process's peak resident memory (VmHWM) is reset at every step
  (``/proc/self/clear_refs``) and read at the next, so each interval has its own peak; the row
  reports the largest over ordinary steps and the resident memory at step start (the model,
  optimiser and data) beside it. With CUDA, ``torch.cuda.max_memory_allocated`` per step.

Tokenisation is timed apart, in the parent: building the token caches of the training queries and
the labels, then loading them again (what every later run pays: they are cached on disk by
dataset version and tokenizer), next to one epoch of training.

The authors' released training steps (nilesh2797/DEXML, kunaldahiya/prime) are not run here: their
code cannot be vendored. ``bench_authors.py`` imports them from checkouts you give and times them
against ours on the same synthetic inputs (ratio ours / theirs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[1] / "xmcbench" / "recipes"


@dataclass(frozen=True)
class Shape:
    """What a method's paper settings are scaled to: the batch over the paper's (``scale``), labels,
    training queries, and the epochs the epoch-based methods train for."""

    scale: float
    labels: int
    train: int
    batch: int
    epochs: int

    @property
    def steps(self) -> int:
        """Steps of ``epochs`` passes over the training queries: what a step-based method is given."""
        return self.epochs * -(-self.train // self.batch)


@dataclass(frozen=True)
class Bench:
    recipe: str  # the paper recipe, under xmcbench/recipes/
    paper_batch: int | None  # None: read from the recipe
    overrides: Callable[[Shape], dict]  # method settings at this shape
    synthetic: dict = field(default_factory=dict)  # what the method's synthetic dataset needs beyond the shared one
    # the stages a method trains one after the other with an optimiser each (MACLR's Stage I and II),
    # named as the method's accounting names their batches; () for one optimiser throughout
    stages: tuple[str, ...] = ()
    supervised: bool = True


def _maclr(x: Shape) -> dict:
    return {
        # as many steps in each stage as an epoch-based method takes; one re-clustering half way
        "stage1_steps": x.steps,
        "stage2_steps": x.steps,
        "t_update": max(1, x.steps // 2),
        "t_k": x.steps,
        "k0": max(2, min(round(2048 * x.scale), x.train // 4)),  # K0 scaled, a few contexts a cluster at least
        "label_negatives": max(2, round(32 * x.scale)),  # M scaled like every pool
        "reuse_pretraining": False,  # a temporary home: nothing to keep
    }


def _lmtx(x: Shape) -> dict:
    dev = max(8, min(round(800 * x.scale), x.train // 4))
    return {
        # the deterministic word-overlap judge: the LLM's own throughput is the runner's ``judge`` row
        "judge": {"backend": "fake", "cache": False},
        "shortlist_j": min(10, max(1, x.labels // 4)),
        "dev_docs": dev,
        "train_docs": x.train - dev,
        "max_cycles": 1,
        "epochs_per_cycle": x.epochs,
        "threshold": 0.0,  # every shortlisted label a positive: steps of a full batch, whatever the judge says
    }


# name -> the paper recipe and how its settings scale (per-query counts such as DEXML's or UniDEC's
# hard negatives kept as published)
METHODS = {
    "dexml_all": Bench(
        "dexml/lf-amazontitles-131k-all-negatives.yaml",
        4096,
        lambda x: {"gradcache_chunk": max(64, round(2048 * x.scale))},  # η scaled; every label in the loss
    ),
    "dexml_hard": Bench(
        "dexml/lf-amazontitles-1.3m-hard-negatives.yaml",
        None,
        lambda x: {"hard_negative_start_epoch": 0, "refresh_every": 1, "shortlist_k": min(100, x.labels // 4)},
    ),
    "unidec": Bench(
        "unidec/lf-amazontitles-131k.yaml",
        576,
        lambda x: {"max_pool_size": max(16, round(1500 * x.scale)), "recluster_every": 1},
    ),
    "prime": Bench(
        "prime/lf-amazontitles-131k.yaml",
        3200,
        lambda x: {
            "free_vectors": _power_of_two_below(x.labels // 2),
            "cluster_start_epoch": 0,
            "recluster_every": 1,
        },
    ),
    # zero-shot: instances with a title and a body (ICT), paraphrasing their labels
    "maclr": Bench(
        "maclr.yaml", None, _maclr, synthetic={"paraphrase": True}, stages=("stage1", "stage2"), supervised=False
    ),
    "lmtx": Bench("lmtx/lf-wikipedia-500k.yaml", None, _lmtx, supervised=False),
}


def _power_of_two_below(n: int) -> int:
    return 1 << max(1, n.bit_length() - 1)


def build_recipe(method: str, args, encoder: str) -> tuple[dict, dict]:
    """The method's paper recipe, scaled down to ``args``; returns (recipe dict, what was scaled)."""
    from xmcbench.recipe.load import read_recipe

    bench = METHODS[method]
    data = read_recipe(RECIPES / bench.recipe)
    paper_batch = _paper_batch(method)
    batch = paper_batch if args.paper_batch else args.batch
    shape = Shape(batch / paper_batch, args.labels, _n_train(args), batch, args.epochs)
    overrides = bench.overrides(shape)
    data["name"] = f"bench-train-{method}"
    # one dataset for the methods that need nothing more, one of its own for a method that does
    name = "bench-train" + (f"-{method}" if bench.synthetic else "")
    data["dataset"] = {"name": name, "synthetic": {**_synthetic(args), **bench.synthetic}}
    data["method"].update(overrides)
    data["encoder"] = {**data.get("encoder", {}), "name": encoder, "max_length": args.max_length}
    data["encoder"].pop("label_max_length", None)
    data["training"].update(
        {"epochs": args.epochs, "batch_size": batch, "validation_fraction": 0.0, "warmup_ratio": 0.0}
    )
    data["training"]["precision"] = "bf16" if args.precision == "bf16-forced" else args.precision
    data["hardware"] = {"devices": args.device}
    data.pop("evaluation", None)
    data.pop("expect", None)
    scaled = {"paper_batch": paper_batch, "scale": shape.scale, "method_overrides": overrides}
    return data, {**scaled, "supervised": bench.supervised}


def _n_train(args) -> int:
    if args.paper_batch:  # the same dataset for every method: batches of the largest paper batch
        return args.train_batches * max(_paper_batch(m) for m in args.methods)
    return args.train


def _synthetic(args) -> dict:
    return {"labels": args.labels, "train": _n_train(args), "test": 10, "seed": 0}


def _paper_batch(method: str) -> int:
    from xmcbench.recipe.load import read_recipe

    bench = METHODS[method]
    return bench.paper_batch or read_recipe(RECIPES / bench.recipe)["training"]["batch_size"]


# ---------------------------------------------------------------------------------------------
# child: one method


def _rss_kb(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: resets VmHWM to the current RSS
        return True
    except OSError:
        return False


class StepClock:
    """Timestamps and peak memory of every optimiser step.

    One optimiser is followed at a time: the first that steps. A method with several optimisers
    stepping together (UniDEC's dense and sparse ones) is timed by the first; a new optimiser that
    steps once the followed one has stepped twice starts a new stage (MACLR's Stage II), followed
    from then on.
    """

    def __init__(self, cuda: bool):

        self.cuda = cuda
        self.stages: list[dict[str, list[float]]] = []
        self.owner: int | None = None
        self.seen: set[int] = set()
        self.resets = _reset_peak()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handle = register_optimizer_step_post_hook(self._hook)

    def _hook(self, optimizer, args, kwargs) -> None:
        new = id(optimizer) not in self.seen
        self.seen.add(id(optimizer))
        if self.owner is None or (new and len(self.stages[-1]["times"]) >= 2):
            self.owner = id(optimizer)
            self.stages.append({"times": [], "peaks_gb": [], "start_gb": []})
        if id(optimizer) != self.owner:
            return
        import torch

        stage = self.stages[-1]
        stage["times"].append(time.perf_counter())
        if self.cuda:
            stage["peaks_gb"].append(torch.cuda.max_memory_allocated() / 2**30)
            torch.cuda.reset_peak_memory_stats()
            stage["start_gb"].append(torch.cuda.memory_allocated() / 2**30)
        else:
            stage["peaks_gb"].append(_rss_kb("VmHWM") / 2**20)
            stage["start_gb"].append(_rss_kb("VmRSS") / 2**20)
            _reset_peak()

    def summary(self, batch: int, stage: int = 0) -> dict:
        """Step time (the median interval), queries/s at ``batch`` and peak memory of one stage."""
        if stage >= len(self.stages):
            return {"steps": 0}
        times, peaks_gb, start_gb = (self.stages[stage][k] for k in ("times", "peaks_gb", "start_gb"))
        gaps = [b - a for a, b in zip(times, times[1:])]
        if not gaps:
            return {"steps": len(times)}
        step = statistics.median(gaps)
        ordinary = [i + 1 for i, g in enumerate(gaps) if g <= 2 * step]  # steps without epoch set-up
        peaks = [peaks_gb[i] for i in ordinary] or peaks_gb[1:]
        return {
            "steps": len(times),
            "step_s": step,
            "step_s_mean": statistics.fmean(gaps),
            "queries_per_s": batch / step,
            "peak_step_gb": max(peaks),
            "resident_at_step_start_gb": min(start_gb[i] for i in ordinary) if ordinary else None,
            "peak_is_per_step": self.resets or self.cuda,
        }


def child(method: str, recipe_data: dict, run_dir: str) -> dict:
    import numpy as np
    import torch

    from xmcbench.train.precision import cpu_bf16_speedup

    speedup = cpu_bf16_speedup()
    stages = METHODS[method].stages

    from xmcbench.methods import METHODS as REGISTRY
    from xmcbench.methods.base import RunContext
    from xmcbench.metrics import inv_propensity
    from xmcbench.run import recipe_from_dict
    from xmcbench.run.phases import build_train_task, ensure_dataset
    from xmcbench.train.precision import resolve_precision

    recipe = recipe_from_dict(recipe_data)
    ds = ensure_dataset(recipe, progress=False)
    train = ds.labels("train")
    cls = REGISTRY.get(recipe.method.name)
    with_titles = getattr(cls, "uses_titles", False)
    task = build_train_task(recipe, ds, inv_propensity(train, ds.propensity_a, ds.propensity_b), with_titles)
    method = cls(recipe.method_config(), recipe)
    cuda = torch.cuda.is_available() and recipe.hardware.devices != "cpu"
    device = "cuda" if cuda else "cpu"
    precision = resolve_precision(recipe.training.precision, device)
    ctx = RunContext(run_dir=Path(run_dir), device=device, precision=precision, progress=False, seed=0)
    if os.environ.get("XMCBENCH_BENCH_ONE_GROUP"):
        import xmcbench.methods.dual_encoder as de

        de.embed_groups = lambda encoder, lengths, device: [np.arange(len(lengths))]
    profile_to = os.environ.get("XMCBENCH_BENCH_PROFILE")
    clock = StepClock(cuda)
    start = time.perf_counter()
    if profile_to:
        _profiled(lambda: method.fit(task, ctx), Path(profile_to))
    else:
        method.fit(task, ctx)
    fit_s = time.perf_counter() - start
    clock.handle.remove()
    if stages:  # the first stage's figures at the top, as for one optimiser; each stage's beside them
        by_stage = ctx.accounting.get("batch_size_by_stage") or {}
        out = {"stages": {name: clock.summary(by_stage.get(name, 0), i) for i, name in enumerate(stages)}}
        out.update(out["stages"][stages[0]])
    else:
        out = clock.summary(recipe.training.batch_size)
    out.update(
        fit_s=fit_s,
        pool_size_mean=ctx.accounting.get("pool_size_mean"),
        torch_threads=torch.get_num_threads(),
        device=ctx.device,
        precision=precision,
        cpu_bf16_speedup=speedup,
        n_queries=int(np.count_nonzero(np.diff(train.indptr))),
    )
    if cuda:
        out["gpu"] = torch.cuda.get_device_name()
        try:
            out.update(_plan(recipe))
        except Exception as err:  # keep the measured step whatever the estimate does
            out["plan_error"] = f"{type(err).__name__}: {err}"
    return out


def _profiled(fn, out: Path) -> None:
    """Run ``fn`` under cProfile; write its costliest calls (by cumulative and by own time) to ``out``."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(fn)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)  # own time: a call that waits for the GPU shows here
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text.getvalue())


def _plan(recipe) -> dict:
    """``xmcbench plan``'s estimate for this recipe on this GPU (the plan's device of the same family,
    H200 when none matches; the memory from torch)."""
    import torch

    from xmcbench.run.plan import DEVICES, plan_recipe

    words = set(re.split(r"[^A-Za-z0-9]+", torch.cuda.get_device_name()))  # "NVIDIA A100-SXM4-80GB"
    gpu = next((d for d in DEVICES if d.split("-")[0] in words), "H200-141GB")
    memory_gb = torch.cuda.get_device_properties(0).total_memory / 1e9
    p = plan_recipe(recipe, gpu=gpu, num_gpus=1, gpu_mem_gb=memory_gb)
    return {
        "plan_gb": p.per_device_gb,
        "plan_step_s": p.step_s,
        "plan_memory_gb": p.memory_gb,
        # what the plan counted the texts at, so tests can plan again without the data
        "text_lengths": {"query": p.lengths.query, "label": p.lengths.label, "bound": p.lengths.bound},
    }


# ---------------------------------------------------------------------------------------------
# parent


def tokenise_times(recipe_data: dict) -> dict:
    """Build the token caches (queries, labels) from scratch, then load them again (cached)."""
    from xmcbench.methods import dual_encoder as de
    from xmcbench.metrics import inv_propensity
    from xmcbench.run import recipe_from_dict
    from xmcbench.run.phases import build_train_task, ensure_dataset

    recipe = recipe_from_dict(recipe_data)
    ds = ensure_dataset(recipe, progress=False)
    train = ds.labels("train")
    task = build_train_task(recipe, ds, inv_propensity(train, ds.propensity_a, ds.propensity_b))
    encoder = de.build_encoder(recipe)
    start = time.perf_counter()
    tokens = de.tokenise(encoder, task, recipe, progress=False)
    built = time.perf_counter() - start
    start = time.perf_counter()
    de.tokenise(encoder, task, recipe, progress=False)
    loaded = time.perf_counter() - start
    texts = len(tokens.queries) + len(tokens.labels)
    return {"tokenise_build_s": built, "tokenise_load_s": loaded, "texts": texts}


def run(args) -> dict:
    if args.home:
        return _run(args, Path(args.home))
    with tempfile.TemporaryDirectory(prefix="xmcbench-bench-train-") as home:
        return _run(args, Path(home))


def _run(args, home: Path) -> dict:
    os.environ["XMCBENCH_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    encoder = args.encoder or (_tiny_bert(home) if args.quick else "all-MiniLM-L6-v2")
    if encoder == "distilbert":
        encoder = _random_distilbert(home, args.tokenizer)
    results: dict = {"encoder": encoder, "labels": args.labels, "train": args.train, "batch": args.batch, "methods": {}}
    first = None
    for method in args.methods:
        data, scaled = build_recipe(method, args, encoder)
        if first is None:
            first = data
            results.update(tokenise_times(data))  # also synthesises and prepares the dataset, once
        with tempfile.TemporaryDirectory(prefix=f"run-{method}-") as run_dir:
            command = [sys.executable, __file__, "--child", method, "--recipe", json.dumps(data), "--run-dir", run_dir]
            env = os.environ.copy()
            if args.profile:
                env["XMCBENCH_BENCH_PROFILE"] = str(Path(args.profile).resolve() / f"{method}.txt")
            if args.one_length_group:
                env["XMCBENCH_BENCH_ONE_GROUP"] = "1"
            if args.precision == "bf16-forced":  # measure what bf16 costs where xmcbench would not use it
                env["XMCBENCH_CPU_BF16"] = "on"
            try:
                done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.method_timeout)
            except subprocess.TimeoutExpired:  # the child is killed; the other methods still run
                results["methods"][method] = {"error": [f"timed out after {args.method_timeout} s"], **scaled}
                _save(args, results)
                continue
        if done.returncode != 0:
            results["methods"][method] = {"error": _last_error(done.stderr), **scaled}
        else:
            recorded = data
            if args.encoder == "distilbert":  # the temporary folder's name would not outlive the run: its shape
                recorded = {**data, "encoder": {**data["encoder"], "name": "distilbert-base-uncased"}}
            results["methods"][method] = {
                **json.loads(done.stdout.strip().splitlines()[-1]),
                **scaled,
                "recipe": recorded,
            }
        _save(args, results)
    return results


def _last_error(stderr: str) -> list[str]:
    """The last lines of a failed child's stderr that are not progress bars (the exception)."""
    lines = [line.split("\r")[-1].strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line and "it/s]" not in line and "s/it]" not in line]
    return lines[-3:] or ["?"]


def _save(args, results: dict) -> None:
    """What is measured so far, after every method (a run cut short keeps its rows)."""
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


def _random_distilbert(home: Path, tokenizer: str) -> str:
    """The papers' encoder shape with random weights (``save_random_distilbert``), saved once."""
    from xmcbench.encoders.tiny_bert import save_random_distilbert

    folder = home / "random-distilbert"
    if not (folder / "config.json").exists():
        save_random_distilbert(folder, tokenizer)
    return str(folder)


def _tiny_bert(home: Path) -> str:
    """The 2-layer BERT with MiniLM's tokenizer that the tests train, saved under ``home`` once."""
    from xmcbench.encoders.tiny_bert import save_tiny_bert

    folder = home / "tiny-bert"
    if not (folder / "config.json").exists():
        save_tiny_bert(folder)
    return str(folder)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny BERT, fewer queries")
    ap.add_argument("--methods", type=lambda s: s.split(","), default=list(METHODS))
    ap.add_argument(
        "--encoder",
        default=None,
        help="model name or folder, or 'distilbert' (the papers' shape, random weights); "
        "default: MiniLM, --quick: tiny BERT",
    )
    ap.add_argument("--tokenizer", default="all-MiniLM-L6-v2", help="tokenizer for --encoder distilbert (a folder)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--paper-batch", action="store_true", help="each method's paper batch and pool sizes")
    ap.add_argument("--train-batches", type=int, default=3, help="with --paper-batch: batches per epoch")
    ap.add_argument("--labels", type=int, default=None)
    ap.add_argument("--train", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument(
        "--precision",
        choices=("fp32", "bf16", "bf16-forced", "auto"),
        default="fp32",
        help="bf16: autocast (CUDA, CPUs where bf16 is faster); bf16-forced: also on CPUs with bf16 instructions"
        " where it is not (to measure it); auto: bf16 on CUDA, fp32 on CPU",
    )
    ap.add_argument("--method-timeout", type=float, default=None, help="seconds; a slower method is stopped")
    ap.add_argument("--out", default=None, help="also write the results here, after every method")
    ap.add_argument("--home", default=None, help="XMCBENCH_HOME for the synthetic data (default: a temp folder)")
    ap.add_argument(
        "--profile",
        default=None,
        help="a folder: each method's fit runs under cProfile, its 40 costliest calls (cumulative) and 25 "
        "by own time written to METHOD.txt there (with CUDA, the time the host waits for the GPU shows at the calls that wait)",
    )
    ap.add_argument(
        "--one-length-group",
        action="store_true",
        help="encode every training batch in one forward pass, without length groups (what the groups save or "
        "cost on a CPU; a GPU batch is one pass already)",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--recipe", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    defaults = (300, 600, 32) if args.quick else (256, 256, 32)
    args.labels = args.labels or defaults[0]
    args.train = args.train or defaults[1]
    args.batch = args.batch or defaults[2]
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        ap.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, json.loads(args.recipe), args.run_dir)))
        return
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
