"""A stage of training kept under the inputs that determine it, for the next run that needs it.

MACLR pre-trains an encoder once per dataset and then both evaluates it zero-shot and fine-tunes
it few-shot (Xiong et al. 2022, Sec. 4.4: Tables 1-3 share one pre-training). Its recipes are
separate runs, so without this every few-shot recipe would repeat the pre-training (on the paper's
datasets 2 x 100,000 steps, GPU-hours each time). A stage entry holds what the stage left behind:
the weights, every random generator's state (so the stages after it draw exactly what they would
have drawn), the bookkeeping the run record reports, and the id of the run that computed it.

The key is a sha256 of everything the stage's result depends on: the caller's settings and data
fingerprint, plus xmcbench's own source, the library versions, the device, the precision and the
thread count (float sums depend on the latter two), so a reused stage is bit for bit the one this
run would have computed. One writer per key at a time: a second run with the same key waits for the
first (an inter-process lock, released if the holder dies) and then reuses its result.
Entries live under ``$XMCBENCH_HOME/cache/stages/`` and can be deleted at any time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from xmcbench.fsutil import file_lock, install_dir, remove_stale_temps, temp_path, write_json
from xmcbench.paths import cache_dir
from xmcbench.train.precision import rng_state, set_rng_state

log = logging.getLogger(__name__)

FORMAT = 1
WEIGHTS = "weights.safetensors"
RNG = "rng.pt"
FACTS = "stage.json"
_PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "scipy", "scikit-learn", "faiss-cpu", "faiss-gpu")


def fingerprint_texts(*columns: Iterable[str] | None) -> str:
    """sha256 of text columns (None allowed), each text length-prefixed so no two columns collide."""
    h = hashlib.sha256()
    for column in columns:
        if column is None:
            h.update(b"\xff")
            continue
        h.update(b"\xfe")
        for text in column:
            raw = text.encode("utf-8", "surrogatepass")
            h.update(len(raw).to_bytes(8, "little"))
            h.update(raw)
    return h.hexdigest()


def module_fingerprint(module: torch.nn.Module, *extra: str) -> str:
    """sha256 of a module's weights (names, dtypes, shapes, bytes) and ``extra`` texts (its config,
    its tokenizer): what a model's name alone does not pin (a re-saved folder, an unpinned revision)."""
    h = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    for text in extra:
        h.update(b"\x00" + text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 of xmcbench's own Python source: any change to the code that ran a stage retires it."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def environment(device: str, precision: str) -> dict[str, Any]:
    """What, besides the settings, makes two computations of a stage bit for bit the same."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    where = device
    if device.startswith("cuda") and torch.cuda.is_available():
        where = f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return {
        "code": code_fingerprint(),
        "packages": versions,
        "device": where,
        "precision": precision,
        "threads": torch.get_num_threads(),
    }


@dataclass
class StageEntry:
    """What a finished stage left behind."""

    weights: dict[str, torch.Tensor]
    rng: dict[str, Any]  # xmcbench.train.precision.rng_state() after the stage
    facts: dict[str, Any] = field(default_factory=dict)  # JSON: the caller's bookkeeping, the run that made it


class StageCache:
    """Entries of one kind of stage (``kind``, e.g. "maclr-pretraining") under one key."""

    def __init__(self, kind: str, inputs: dict[str, Any], *, root: Path | None = None):
        self.kind = kind
        self.inputs = inputs
        payload = json.dumps({"format": FORMAT, "kind": kind, "inputs": inputs}, sort_keys=True, default=str)
        self.key = hashlib.sha256(payload.encode()).hexdigest()
        self.folder = (root or cache_dir() / "stages") / kind / self.key

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Held while the stage is looked up, computed and kept: a second run with the key waits."""
        with file_lock(
            self.folder.parent / f".{self.key}.lock",
            on_wait=lambda message: log.warning("%s: another run is computing the same %s", message, self.kind),
            what=f"the {self.kind} cache entry {self.key[:12]}",
        ):
            yield

    def load(self) -> StageEntry | None:
        """The kept entry, or None (never kept, or unreadable: then it is recomputed and replaced)."""
        if not (self.folder / FACTS).is_file():
            return None
        try:
            from safetensors.torch import load_file

            facts = json.loads((self.folder / FACTS).read_text())
            if facts.get("format") != FORMAT or facts.get("key") != self.key:
                raise ValueError("written for another key or format")
            weights = load_file(self.folder / WEIGHTS)
            rng = torch.load(self.folder / RNG, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - a damaged cache entry only costs its recomputation
            log.warning("the kept %s %s cannot be read (%s); computing it again", self.kind, self.folder, exc)
            return None
        return StageEntry(weights=weights, rng=rng, facts=facts.get("facts", {}))

    def save(self, module: torch.nn.Module, facts: dict[str, Any]) -> bool:
        """Keep ``module``'s weights, the current random states and ``facts``; False (said) when the disk refuses."""
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(self.folder.parent)
        tmp = temp_path(self.folder)
        try:
            tmp.mkdir(parents=True)
            _write_weights(module, tmp / WEIGHTS)
            torch.save(rng_state(), tmp / RNG)
            write_json(
                tmp / FACTS,
                {"format": FORMAT, "kind": self.kind, "key": self.key, "inputs": self.inputs, "facts": facts},
            )
            install_dir(tmp, self.folder)
        except Exception as exc:  # noqa: BLE001 - a full disk reaches us as OSError, SafetensorError or RuntimeError
            shutil.rmtree(tmp, ignore_errors=True)
            log.warning(
                "could not keep the %s for later runs (%s: %s); this run goes on, the next one computes it again",
                self.kind,
                type(exc).__name__,
                exc,
            )
            return False
        return True

    @staticmethod
    def restore(module: torch.nn.Module, entry: StageEntry) -> bool:
        """Put the entry's weights into ``module`` and its random states back; False, touching nothing,
        when the weights do not fit the module (names or shapes)."""
        own = module.state_dict()
        fits = set(own) == set(entry.weights) and all(own[k].shape == entry.weights[k].shape for k in own)
        if not fits:
            log.warning("the kept weights do not fit this encoder; computing the stage again")
            return False
        module.load_state_dict(entry.weights)
        set_rng_state(entry.rng)
        return True


def _write_weights(module: torch.nn.Module, path: Path) -> None:
    from safetensors.torch import save_file

    # contiguous copies: safetensors refuses shared or strided storage (tied or sliced weights)
    save_file({k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}, path)
