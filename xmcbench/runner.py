"""Run one recipe end to end and leave a self-contained run record.

    prepare dataset -> build method -> fit -> predict top-k -> remove filter pairs -> evaluate
    -> record.json (+ recipe.yaml, predictions.npz, checkpoints/) -> ingest into the store

The record is written at every status change (running / finished / failed / interrupted), so a
run that dies leaves a record saying so; Ctrl-C and SIGTERM are recorded as interrupted and the
phases already done (trained model, predictions) are kept, which ``resume`` picks up. A process
killed outright (SIGKILL, OOM) leaves status "running" with a pid that is no longer alive;
``resume`` and ``load_record`` treat that as interrupted.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import resource
import secrets
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy import sparse

from xmcbench import __version__, paths
from xmcbench.errors import XmcbenchError
from xmcbench.methods import METHODS
from xmcbench.methods.base import RunContext, TrainTask, timed
from xmcbench.recipe import Recipe, check_floor, recipe_from_dict
from xmcbench.store.record import EVAL_ROWS_FILE

SCHEMA_VERSION = 1
RECORDED_PACKAGES = ("torch", "transformers", "numpy", "scipy", "scikit-learn", "duckdb", "faiss-cpu", "faiss-gpu")
MODEL_DIR = "model"  # inside checkpoints/: the fitted model, written when fit completes


class RunInterrupted(KeyboardInterrupt):
    """Raised from the SIGTERM handler so a terminated run is recorded like Ctrl-C."""


@dataclass
class RunResult:
    run_dir: Path
    record: dict[str, Any]

    @property
    def scores(self) -> dict[str, float]:
        return {s["name"]: s["value"] for s in self.record["scores"]}

    def failed_floors(self, expect: dict[str, str]) -> list[str]:
        """The recipe's ``expect`` floors this run misses (a missing metric counts as missed)."""
        scores = self.scores
        return [
            f"{metric} = {scores.get(metric, float('nan')):.2f}, expected {rule}"
            for metric, rule in expect.items()
            if metric not in scores or not check_floor(scores[metric], rule)
        ]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def load_record(run_dir: Path) -> dict[str, Any]:
    """Read a run's record; a 'running' run whose process is gone on this host is 'interrupted'."""
    path = Path(run_dir) / "record.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise XmcbenchError(f"{run_dir} is not a run directory (no record.json)") from None
    except json.JSONDecodeError as exc:
        raise XmcbenchError(f"{path}: corrupt run record ({exc})") from None
    prov = record.get("provenance", {})
    if (
        record.get("status") == "running"
        and prov.get("host") == socket.gethostname()
        and isinstance(prov.get("pid"), int)
        and not _pid_alive(prov["pid"])
    ):
        record["status"] = "interrupted"
        record["error"] = record.get("error") or "process ended without recording (killed?)"
    return record


# --------------------------------------------------------------------------------------------
# Provenance and compute facts


def _git_state() -> tuple[str | None, bool | None]:
    """The commit of xmcbench itself (not of the working directory the user runs from)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None, None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "xmcbench", "pyproject.toml"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip() != ""
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def _packages() -> dict[str, str]:
    out = {}
    for name in RECORDED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _resolve_device(requested: str) -> str:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise XmcbenchError("hardware.devices is 'cuda' but no CUDA GPU is visible; use devices: auto or cpu")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def _compute_facts(device: str, world_size: int) -> dict[str, Any]:
    import torch

    device = device.split(":")[0]  # cuda:LOCAL_RANK under torchrun
    facts: dict[str, Any] = {
        "device_type": device,
        "device_names": [],
        "device_count": world_size if device == "cuda" else 1,
        "cuda_version": torch.version.cuda,
        "driver_version": None,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "ram_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 2)
        if hasattr(os, "sysconf") else None,
        "wall_time_s": {},
        "gpu_hours": 0.0,
        "peak_gpu_mem_gb": None,
        "peak_host_mem_gb": None,
    }
    if device == "cuda":
        facts["device_names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())][:world_size]
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
            facts["driver_version"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    else:
        facts["device_names"] = [facts["cpu"]]
    return facts


def _peak_memory(record: dict[str, Any], device: str) -> None:
    """Peak memory of this process, kept as the maximum over the run's attempts (resumes)."""
    compute = record["compute"]
    host = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 3)  # ru_maxrss: KiB on Linux
    compute["peak_host_mem_gb"] = max(host, compute.get("peak_host_mem_gb") or 0.0)
    if device.startswith("cuda"):
        import torch

        gpu = round(torch.cuda.max_memory_allocated() / 1024**3, 3)
        compute["peak_gpu_mem_gb"] = max(gpu, compute.get("peak_gpu_mem_gb") or 0.0)


# --------------------------------------------------------------------------------------------
# Data for the method, per supervision regime


def ensure_dataset(recipe: Recipe, progress: bool = True):
    """Load the prepared dataset, synthesising or downloading it first when the recipe allows."""
    from xmcbench.data import load_dataset

    ds = recipe.dataset
    return load_dataset(ds.name, download=True, source=ds.source,
                        synthetic=ds.synthetic.model_dump() if ds.synthetic else None, progress=progress)


def build_train_task(recipe: Recipe, dataset, inv_prop: np.ndarray) -> TrainTask:
    sup = recipe.supervision
    labels = dataset.labels("train")
    seen = None
    if sup.mode == "zero_shot":
        labels = None
    elif sup.mode == "few_shot":
        rng = np.random.default_rng(sup.seed)
        n_keep = max(1, int(round(sup.label_fraction * dataset.n_labels)))
        seen = np.zeros(dataset.n_labels, dtype=bool)
        seen[rng.choice(dataset.n_labels, size=n_keep, replace=False)] = True
        labels = sparse.csr_matrix(labels.multiply(seen[None, :].astype(np.float32)))
        labels.eliminate_zeros()
    return TrainTask(
        dataset_name=dataset.name,
        train_texts=dataset.query_texts("train"),
        label_texts=dataset.label_texts(),
        train_labels=labels,
        seen_labels=seen,
        inv_propensity=inv_prop,
        dataset_version=dataset.version,
    )


def _eval_rows(recipe: Recipe, n: int) -> np.ndarray | None:
    m = recipe.evaluation.max_queries
    if m is None or m >= n:
        return None
    rng = np.random.default_rng(recipe.training.seed)
    return np.sort(rng.choice(n, size=m, replace=False))


# --------------------------------------------------------------------------------------------
# The run


def _new_run_dir(runs_dir: Path, recipe: Recipe) -> tuple[str, Path]:
    slug = re.sub(r"[^a-z0-9.]+", "-", recipe.dataset.name.lower()).strip("-")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-{recipe.method.name.lower()}-{slug}-{secrets.token_hex(3)}"
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_id, run_dir


def _initial_record(run_id: str, recipe: Recipe, recipe_path: str | None, command: str | None) -> dict[str, Any]:
    commit, dirty = _git_state()
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "name": recipe.name,
        "status": "running",
        "created_at": _now(),
        "updated_at": _now(),
        "finished_at": None,
        "error": None,
        "phases_done": [],
        "task": {"dataset": recipe.dataset.name, "dataset_variant": recipe.dataset.variant,
                 "split": recipe.evaluation.split, "supervision": recipe.supervision.mode,
                 "label_fraction": recipe.supervision.label_fraction},
        "model": {"method": recipe.method.name,
                  "encoder": recipe.encoder.name if METHODS.get(recipe.method.name).uses_encoder else None,
                  "encoder_revision": recipe.encoder.revision if METHODS.get(recipe.method.name).uses_encoder else None, "params_total": None, "params_trainable": None},
        "scores": [],
        "groups": {},
        "provenance": {
            "xmcbench_version": __version__, "git_commit": commit, "git_dirty": dirty,
            "recipe_hash": recipe.hash(), "recipe_path": recipe_path,
            "command": _redact(command or " ".join(["xmcbench", *sys.argv[1:]])),
            "seed": recipe.training.seed, "packages": _packages(), "python": platform.python_version(),
            "platform": platform.platform(), "host": socket.gethostname(), "pid": os.getpid(),
        },
        "compute": {},
        "accounting": {"batch_size": None, "pool_size_mean": None, "pool_size_max": None,
                       "positives_per_query": None, "hard_negatives_per_query": None,
                       "refresh_interval": None, "steps": None},
    }


def run_recipe(
    recipe: Recipe,
    *,
    recipe_path: str | None = None,
    runs_dir: str | Path | None = None,
    db: str | Path | None = None,
    resume: str | None = None,
    progress: bool = True,
    command: str | None = None,
    ingest: bool = True,
) -> RunResult:
    """Run ``recipe`` (or resume run ``resume``) and return its directory and record."""
    dist = _init_distributed(recipe, resume)
    if not dist.is_main:
        return _run_worker(recipe, runs_dir, resume, dist, progress)

    if resume:
        run_dir = _find_run(Path(runs_dir or paths.runs_dir()).expanduser(), resume)
        record = load_record(run_dir)
        if record["status"] == "finished":
            raise XmcbenchError(f"run {record['run_id']} already finished; nothing to resume")
        if record["status"] == "running":
            raise XmcbenchError(f"run {record['run_id']} is still running (pid {record['provenance'].get('pid')})")
        recipe = recipe_from_dict(yaml.safe_load((run_dir / "recipe.yaml").read_text()), str(run_dir / "recipe.yaml"))
        record.update(status="running", error=None, updated_at=_now())
        commit, dirty = _git_state()
        # Each resume may run other code: keep what every attempt ran with.
        record.setdefault("attempts", []).append({
            "resumed_at": _now(), "git_commit": commit, "git_dirty": dirty, "xmcbench_version": __version__,
            "packages": _packages(), "command": _redact(command or " ".join(["xmcbench", *sys.argv[1:]])),
            "host": socket.gethostname(),
        })
        record["provenance"].update(pid=os.getpid(), host=socket.gethostname())
    else:
        runs_root = Path(runs_dir or recipe.output.runs_dir or paths.runs_dir()).expanduser()
        runs_root.mkdir(parents=True, exist_ok=True)
        run_id, run_dir = _new_run_dir(runs_root, recipe)
        resolved = recipe.resolved()
        if resolved["dataset"].get("source"):
            resolved["dataset"]["source"] = _redact(resolved["dataset"]["source"])
        (run_dir / "recipe.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
        record = _initial_record(run_id, recipe, recipe_path, command)
    write_json_atomic(run_dir / "record.json", record)
    _share_run_dir(run_dir, record["phases_done"])
    db_path = Path(db or recipe.output.db or paths.default_db_path()).expanduser()

    previous = signal.signal(signal.SIGTERM, _raise_interrupt) if _in_main_thread() else None
    try:
        _execute(recipe, record, run_dir, progress, dist)
        record["status"] = "finished"
        record["finished_at"] = _now()
    except KeyboardInterrupt:
        record["status"] = "interrupted"
        record["error"] = "interrupted (Ctrl-C or SIGTERM); resume with: xmcbench run --resume " + record["run_id"]
        raise
    except BaseException as exc:
        record["status"] = "failed"
        record["error"] = _redact(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        record["updated_at"] = _now()
        write_json_atomic(run_dir / "record.json", record)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if ingest:
            _ingest(db_path, record, run_dir)
    return RunResult(run_dir, record)


def _init_distributed(recipe: Recipe | None, resume: str | None):
    """Join torchrun's process group when WORLD_SIZE > 1 (one process per GPU), else a no-op."""
    from xmcbench.train import init_distributed

    world = int(os.environ.get("WORLD_SIZE", "1"))
    wanted = recipe.hardware.num_gpus if recipe is not None else None
    if wanted is not None and wanted > 1 and world != wanted:
        raise XmcbenchError(
            f"the recipe asks for hardware.num_gpus={wanted} but this is {world} process(es); launch with "
            f"`torchrun --nproc-per-node {wanted} -m xmcbench run RECIPE`, or set hardware.num_gpus={world}"
        )
    if world <= 1:
        return init_distributed()
    device = recipe.hardware.devices if recipe is not None else "auto"
    return init_distributed(device=None if device == "auto" else device)


def _share_run_dir(run_dir: Path | None, phases_done: list[str] | None = None) -> tuple[Path, list[str]]:
    """Rank 0 names the run and says which phases are done; every rank gets both."""
    from xmcbench.train.distributed import all_gather_objects

    shared = all_gather_objects((str(run_dir) if run_dir else None, list(phases_done or [])))[0]
    return Path(shared[0]), shared[1]


def _run_worker(recipe: Recipe | None, runs_dir, resume: str | None, dist, progress: bool) -> RunResult:
    """A non-zero rank under torchrun: train with the others; rank 0 records, predicts and evaluates."""
    from xmcbench.train import barrier

    run_dir, phases_done = _share_run_dir(None)
    if recipe is None:  # resume: rank 0 has checked the run; read the same recorded recipe
        recipe = recipe_from_dict(yaml.safe_load((run_dir / "recipe.yaml").read_text()), str(run_dir / "recipe.yaml"))
    record = _initial_record(run_dir.name, recipe, None, None)
    if "train" in phases_done:
        barrier()  # matches rank 0's barrier after preparing the dataset; rank 0 loads the trained model
        return RunResult(run_dir, record)
    _execute(recipe, record, run_dir, False, dist)
    return RunResult(run_dir, record)


def _redact(text: str) -> str:
    """Tokens (URL credentials, ?token=, hf_...) never reach a record, a log or the database."""
    from xmcbench.redact import redact

    return redact(text)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum, frame):
    raise RunInterrupted()


def _find_run(runs_root: Path, run_id: str) -> Path:
    if Path(run_id).is_dir() and (Path(run_id) / "record.json").exists():
        return Path(run_id)
    exact = runs_root / run_id
    if exact.is_dir():
        return exact
    matches = sorted(p for p in runs_root.glob(f"{run_id}*") if p.is_dir())
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise XmcbenchError(f"no run {run_id!r} under {runs_root}; list runs with `xmcbench runs list`")
    raise XmcbenchError(f"{run_id!r} matches {len(matches)} runs: {', '.join(p.name for p in matches[:5])}")


def _ingest(db_path: Path, record: dict[str, Any], run_dir: Path) -> None:
    from xmcbench.store import Store

    with Store.open(db_path) as store:
        store.ingest_record(record, run_dir)


def _execute(recipe: Recipe, record: dict[str, Any], run_dir: Path, progress: bool, dist) -> None:
    from xmcbench import metrics
    from xmcbench.search.sparse_topk import remove_pairs, topk_csr
    from xmcbench.train import barrier

    world_size = dist.world_size
    device = _resolve_device(recipe.hardware.devices)
    if device == "cuda" and world_size > 1:
        device = str(dist.device)  # cuda:LOCAL_RANK
    precision = recipe.training.precision
    if precision == "auto":
        precision = "bf16" if device.startswith("cuda") else "fp32"
    ctx = RunContext(run_dir=run_dir, device=device, precision=precision, seed=recipe.training.seed,
                     progress=progress, world_size=world_size, accounting=record["accounting"])
    ctx.seed_everything()
    walls: dict[str, float] = dict(record["compute"].get("wall_time_s", {}))
    peaks = {k: record["compute"].get(k) for k in ("peak_host_mem_gb", "peak_gpu_mem_gb")}
    record["compute"] = _compute_facts(device, world_size)
    record["compute"].update(wall_time_s=walls, precision=precision, **{k: v for k, v in peaks.items() if v})
    done: list[str] = record["phases_done"]

    def mark(phase: str) -> None:
        if not dist.is_main:
            return
        if phase not in done:
            done.append(phase)
        record["compute"]["gpu_hours"] = (
            (walls.get("train", 0.0) + walls.get("predict", 0.0)) / 3600 * record["compute"]["device_count"]
            if device.startswith("cuda") else 0.0
        )
        _peak_memory(record, device)
        record["updated_at"] = _now()
        write_json_atomic(run_dir / "record.json", record)

    # 1. prepare
    with timed(walls, "prepare"):
        if not dist.is_main:
            barrier()  # rank 0 synthesises / downloads / prepares first
        dataset = ensure_dataset(recipe, progress)
        if dist.is_main:
            barrier()
        split = recipe.evaluation.split
        a = recipe.evaluation.propensity_a if recipe.evaluation.propensity_a is not None else dataset.spec.propensity_a
        b = recipe.evaluation.propensity_b if recipe.evaluation.propensity_b is not None else dataset.spec.propensity_b
        train_truth = dataset.labels("train")
        inv_prop = metrics.inv_propensity(train_truth, a, b)
        truth = dataset.labels(split)
        filt = dataset.filter(split)
        rows = _eval_rows(recipe, truth.shape[0])
        eval_texts = dataset.query_texts(split)
        if rows is not None:
            np.save(run_dir / EVAL_ROWS_FILE, rows)  # so `compare` can rebuild the same truth
            truth = truth[rows]
            filt = filt[rows] if filt is not None else None
            eval_texts = [eval_texts[int(i)] for i in rows]
        record["task"].update(
            dataset=dataset.name, dataset_version=dataset.version,
            n_queries=int(dataset.labels(split).shape[0]), n_queries_evaluated=int(truth.shape[0]),
            n_labels=int(dataset.n_labels), propensity_a=a, propensity_b=b,
            filter=(f"filter_labels_{split}.txt" if filt is not None else None),
        )
    mark("prepare")

    # 2. train (or load the model a previous attempt finished fitting)
    method_cls = METHODS.get(recipe.method.name)
    method = method_cls(recipe.method_config(), recipe)
    if method_cls.requires_labels and recipe.supervision.mode == "zero_shot":
        raise XmcbenchError(f"method {recipe.method.name} needs training labels; it cannot run zero_shot")
    model_dir = ctx.checkpoint_dir / MODEL_DIR
    with timed(walls, "train"):
        if "train" in done and model_dir.exists():
            method.load(model_dir)
        else:
            method.fit(build_train_task(recipe, dataset, inv_prop), ctx)
            if dist.is_main:
                method.save(model_dir)
    if not dist.is_main:
        return  # prediction and evaluation happen once, on rank 0
    record["compute"]["world_size"] = world_size
    total, trainable = method.parameter_counts()
    record["model"].update(params_total=int(total), params_trainable=int(trainable))
    mark("train")

    # 3. predict: a few extra candidates so that removing filter pairs still leaves top_k
    pred_path = run_dir / "predictions.npz"
    k = recipe.evaluation.top_k
    with timed(walls, "predict"):
        if "predict" in done and pred_path.exists():
            preds = sparse.load_npz(pred_path).tocsr()
        else:
            slack = int(np.diff(filt.indptr).max()) if filt is not None and filt.nnz else 0
            preds = method.predict(eval_texts, min(k + slack, dataset.n_labels), ctx)
            preds = topk_csr(remove_pairs(preds, filt), k)
            tmp = run_dir / ".predictions.tmp.npz"
            sparse.save_npz(tmp, preds)
            os.replace(tmp, pred_path)
    mark("predict")

    # 4. evaluate (filter pairs are already gone from the predictions)
    with timed(walls, "evaluate"):
        ev = recipe.evaluation
        use_ps = any(m in ev.metrics for m in ("PSP", "PSnDCG"))
        scored = metrics.evaluate_with_ci(
            preds, truth, k=tuple(ev.k), inv_propensity=inv_prop if use_ps else None,
            metrics=tuple(ev.metrics), n_boot=ev.bootstrap, seed=recipe.training.seed,
        )
        record["scores"] = [
            {"name": name, "metric": name.split("@")[0], "k": int(name.split("@")[1]), "value": float(value),
             "ci_lo": None if lo is None else float(lo), "ci_hi": None if hi is None else float(hi),
             "higher_is_better": True}
            for name, (value, lo, hi) in scored.items()
        ]
        if ev.groups:
            groups = metrics.evaluate_by_group(
                preds, truth, train_truth, k=tuple(ev.k),
                inv_propensity=inv_prop if use_ps else None, metrics=tuple(ev.metrics),
            )
            record["groups"] = {g: info["scores"] for g, info in groups.items()}
            record["group_sizes"] = {g: {"labels": info["labels"], "rows": info["rows"]} for g, info in groups.items()}
    mark("evaluate")
