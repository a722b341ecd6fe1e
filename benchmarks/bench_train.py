"""Training throughput of the supervised methods: queries/s and peak memory per training step.

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

Each method trains in its own process (its peak memory is its own) through its ordinary ``fit``.
A post-hook on every optimiser's ``step`` marks the end of each training step:

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
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[1] / "xmcbench" / "recipes"

# name -> (paper recipe, paper batch, method overrides given the scale factor s and the label count L)
METHODS = {
    "dexml_all": (
        "dexml/lf-amazontitles-131k-all-negatives.yaml",
        4096,
        lambda s, L: {"gradcache_chunk": max(64, round(2048 * s))},  # η scaled; every label in the loss
    ),
    "dexml_hard": (
        "dexml/lf-amazontitles-1.3m-hard-negatives.yaml",
        None,  # read from the recipe
        lambda s, L: {"hard_negative_start_epoch": 0, "refresh_every": 1, "shortlist_k": min(100, L // 4)},
    ),
    "unidec": (
        "unidec/lf-amazontitles-131k.yaml",
        576,
        lambda s, L: {"max_pool_size": max(16, round(1500 * s)), "recluster_every": 1},
    ),
    "prime": (
        "prime/lf-amazontitles-131k.yaml",
        3200,
        lambda s, L: {"free_vectors": _power_of_two_below(L // 2), "cluster_start_epoch": 0, "recluster_every": 1},
    ),
}


def _power_of_two_below(n: int) -> int:
    return 1 << max(1, n.bit_length() - 1)


def build_recipe(method: str, args, encoder: str) -> tuple[dict, dict]:
    """The method's paper recipe, scaled down to ``args``; returns (recipe dict, what was scaled)."""
    from xmcbench.recipe.load import read_recipe

    path, paper_batch, overrides = METHODS[method]
    data = read_recipe(RECIPES / path)
    paper_batch = paper_batch or data["training"]["batch_size"]
    batch = paper_batch if args.paper_batch else args.batch
    s = batch / paper_batch
    data["name"] = f"bench-train-{method}"
    data["dataset"] = {"name": "bench-train", "synthetic": _synthetic(args)}
    data["method"].update(overrides(s, args.labels))
    data["encoder"] = {**data.get("encoder", {}), "name": encoder, "max_length": args.max_length}
    data["encoder"].pop("label_max_length", None)
    data["training"].update(
        {"epochs": args.epochs, "batch_size": batch, "validation_fraction": 0.0, "warmup_ratio": 0.0}
    )
    data["training"]["precision"] = "bf16" if args.precision == "bf16-forced" else args.precision
    data["hardware"] = {"devices": args.device}
    data.pop("evaluation", None)
    data.pop("expect", None)
    return data, {"paper_batch": paper_batch, "scale": s, "method_overrides": overrides(s, args.labels)}


def _synthetic(args) -> dict:
    train = args.train
    if args.paper_batch:  # the same dataset for every method: batches of the largest paper batch
        train = args.train_batches * max(_paper_batch(m) for m in args.methods)
    return {"labels": args.labels, "train": train, "test": 10, "seed": 0}


def _paper_batch(method: str) -> int:
    from xmcbench.recipe.load import read_recipe

    path, paper_batch, _ = METHODS[method]
    return paper_batch or read_recipe(RECIPES / path)["training"]["batch_size"]


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
    """Timestamps and peak memory of every optimiser step (the first optimiser seen counts)."""

    def __init__(self, cuda: bool):

        self.cuda = cuda
        self.times: list[float] = []
        self.peaks_gb: list[float] = []
        self.start_rss_gb: list[float] = []
        self.owner: int | None = None
        self.resets = _reset_peak()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handle = register_optimizer_step_post_hook(self._hook)

    def _hook(self, optimizer, args, kwargs) -> None:
        if self.owner is None:
            self.owner = id(optimizer)
        if id(optimizer) != self.owner:  # a method with several optimisers steps them together
            return
        import torch

        self.times.append(time.perf_counter())
        if self.cuda:
            self.peaks_gb.append(torch.cuda.max_memory_allocated() / 2**30)
            torch.cuda.reset_peak_memory_stats()
            self.start_rss_gb.append(torch.cuda.memory_allocated() / 2**30)
        else:
            self.peaks_gb.append(_rss_kb("VmHWM") / 2**20)
            self.start_rss_gb.append(_rss_kb("VmRSS") / 2**20)
            _reset_peak()

    def summary(self, batch: int) -> dict:
        gaps = [b - a for a, b in zip(self.times, self.times[1:])]
        if not gaps:
            return {"steps": len(self.times)}
        step = statistics.median(gaps)
        ordinary = [i + 1 for i, g in enumerate(gaps) if g <= 2 * step]  # steps without epoch set-up
        peaks = [self.peaks_gb[i] for i in ordinary] or self.peaks_gb[1:]
        return {
            "steps": len(self.times),
            "step_s": step,
            "step_s_mean": statistics.fmean(gaps),
            "queries_per_s": batch / step,
            "peak_step_gb": max(peaks),
            "resident_at_step_start_gb": min(self.start_rss_gb[i] for i in ordinary) if ordinary else None,
            "peak_is_per_step": self.resets or self.cuda,
        }


def child(method: str, recipe_data: dict, run_dir: str) -> dict:
    import numpy as np
    import torch

    from xmcbench.train.precision import cpu_bf16_speedup

    speedup = cpu_bf16_speedup()

    from xmcbench.methods import METHODS as REGISTRY
    from xmcbench.methods.base import RunContext
    from xmcbench.metrics import inv_propensity
    from xmcbench.run import recipe_from_dict
    from xmcbench.run.phases import build_train_task, ensure_dataset
    from xmcbench.train.precision import resolve_precision

    recipe = recipe_from_dict(recipe_data)
    ds = ensure_dataset(recipe, progress=False)
    train = ds.labels("train")
    task = build_train_task(recipe, ds, inv_propensity(train, ds.propensity_a, ds.propensity_b))
    cls = REGISTRY.get(recipe.method.name)
    method = cls(recipe.method_config(), recipe)
    cuda = torch.cuda.is_available() and recipe.hardware.devices != "cpu"
    device = "cuda" if cuda else "cpu"
    precision = resolve_precision(recipe.training.precision, device)
    ctx = RunContext(run_dir=Path(run_dir), device=device, precision=precision, progress=False, seed=0)
    clock = StepClock(cuda)
    start = time.perf_counter()
    method.fit(task, ctx)
    fit_s = time.perf_counter() - start
    clock.handle.remove()
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
            results["methods"][method] = {**json.loads(done.stdout.strip().splitlines()[-1]), **scaled, "recipe": data}
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
