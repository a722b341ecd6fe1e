"""``load_dataset``: the one place that decides how a dataset gets ready, and the lock around it.

For a dataset name (case-insensitive), a current prepared cache is opened at once, without a
lock (nothing is written, so a read-only $XMCBENCH_HOME serves it). Otherwise, under a per-dataset
lock between processes (so parallel runs never generate, download or prepare one dataset twice):

1. ``synthetic=`` parameters given -> create the synthetic dataset (local spec + raw files) unless an
   identical one exists; other parameters under that name are an error unless ``force``;
2. a prepared cache that matches the raw files (or whose raw files were deleted) -> load it
   (``rebuild=True`` skips this step);
3. raw files present -> prepare, then load;
4. a synthetic dataset -> regenerate its raw files from the saved parameters, prepare, load;
5. ``download=True`` -> download (from ``source`` if given), prepare, load;
6. otherwise an XmcbenchError saying how to download it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Literal

from xmcbench import fsutil, paths
from xmcbench.data.catalog import DatasetSpec, check_dataset_name, get_spec, local_spec_path, save_local_spec
from xmcbench.data.fetch import download_dataset, raw_lock
from xmcbench.data.fetch.common import say_for
from xmcbench.data.prepared import (
    META_NAME,
    PreparedDataset,
    cache_problem,
    is_prepared_current,
    load_prepared,
    prepare,
    read_meta,
)
from xmcbench.data.raw import raw_complete, raw_status
from xmcbench.data.synth import make_synthetic_spec, materialize
from xmcbench.errors import XmcbenchError

log = logging.getLogger("xmcbench.data")

# recipe / CLI spelling of the generator parameters -> synthesize's
_SYNTH_KEYS = {"labels": "n_labels", "train": "n_train", "test": "n_test"}


def dataset_lock(name: str, progress: bool = True):
    """The lock held while dataset ``name`` is created, downloaded or prepared.

    Waiting for another process is said on the terminal, or logged without one (a sweep's runs
    write logs: a run that waits must say why).
    """
    check_dataset_name(name)

    def on_wait(message: str) -> None:
        if progress:
            say_for(progress)(message, highlight=False)
        else:
            log.info(message)

    return fsutil.file_lock(paths.locks_dir() / f"{name.lower()}.lock", on_wait=on_wait, what=f"dataset {name}")


def load_dataset(
    name: str,
    *,
    download: bool = False,
    source: str | None = None,
    synthetic: dict[str, Any] | None = None,
    progress: bool = True,
    force: bool = False,
    rebuild: bool = False,
) -> PreparedDataset:
    """The prepared dataset ``name``, created, downloaded or prepared as needed (module docstring).

    ``synthetic``: generator parameters ``{"labels", "train", "test", "seed"}`` (or ``synthesize``'s
    own ``n_labels``, ``n_train``, ...); ``force`` lets them replace a synthetic dataset of that name
    made with other parameters. ``rebuild`` prepares the cache again even when it is current.
    """
    check_dataset_name(name)
    if synthetic is None and not rebuild:
        # Reading a current cache needs no lock, so a read-only (shared) $XMCBENCH_HOME serves it.
        spec = get_spec(name)
        prepared_dir = paths.dataset_prepared_dir(spec.name)
        if is_prepared_current(spec, paths.dataset_raw_dir(spec.raw_group), prepared_dir):
            with contextlib.suppress(XmcbenchError):  # replaced at this very moment: wait for the lock
                return load_prepared(prepared_dir)
    with dataset_lock(name, progress):
        spec = _create_synthetic(name, synthetic, force) if synthetic is not None else get_spec(name)
        raw_dir = paths.dataset_raw_dir(spec.raw_group)
        prepared_dir = paths.dataset_prepared_dir(spec.name)
        if not rebuild and is_prepared_current(spec, raw_dir, prepared_dir):
            return load_prepared(prepared_dir)
        if not raw_complete(spec, raw_dir):
            if spec.synthetic is not None:
                with raw_lock(spec, progress):
                    materialize(spec, raw_dir)
            elif download:
                download_dataset(spec, source=source, progress=progress)
            else:
                raise XmcbenchError(
                    f"dataset {spec.name} is not downloaded here{_damaged_note(prepared_dir)}; "
                    f"run `xmcbench datasets download {spec.name}`"
                )
        prepare(spec, raw_dir, prepared_dir, progress=progress)
        return load_prepared(prepared_dir)


def _damaged_note(prepared_dir: Path) -> str:
    """Why a cache that is there cannot be used, for the message that asks for a download."""
    meta = read_meta(prepared_dir)
    problem = None if meta is None else cache_problem(prepared_dir, meta)
    return "" if problem is None else f" and its prepared cache in {prepared_dir} is damaged ({problem})"


def _synthetic_spec(name: str, params: dict[str, Any]) -> DatasetSpec:
    return make_synthetic_spec(name, **{_SYNTH_KEYS.get(k, k): v for k, v in params.items()})


def synthetic_conflict(name: str, params: dict[str, Any]) -> str | None:
    """How synthetic dataset ``name``, already made here, differs from one made with ``params``
    ("labels 40 here, 60 asked; ..."); None when it is not here or is the same."""
    if not local_spec_path(name).exists():
        return None
    have, wanted = get_spec(name).synthetic, _synthetic_spec(name, params).synthetic
    if have is None:  # the user's own local dataset: never overwritten by a synthetic one
        return "it is a local dataset of yours, not a synthetic one"
    if have == wanted:
        return None
    return "; ".join(
        f"{key} {have.get(key)!r} here, {wanted.get(key)!r} asked"
        for key in sorted(set(have) | set(wanted))
        if have.get(key) != wanted.get(key)
    )


def _create_synthetic(name: str, params: dict[str, Any], force: bool) -> DatasetSpec:
    """The spec of synthetic dataset ``name`` made with ``params``, generating it unless an identical
    complete one exists."""
    spec = _synthetic_spec(name, params)
    if local_spec_path(name).exists() and not force:
        differ = synthetic_conflict(name, params)
        if differ is not None:
            raise XmcbenchError(
                f"dataset {name} already exists with other parameters ({differ}); pass --force "
                f"(datasets synth) to replace it, choose another name, or delete {paths.datasets_dir() / name}"
            )
        old = get_spec(name)
        if raw_status(old) == "complete":
            return old
    with raw_lock(spec):
        materialize(spec, paths.dataset_raw_dir(spec.raw_group))
    save_local_spec(spec)
    return spec


def dataset_status(spec: DatasetSpec) -> Literal["prepared", "complete", "partial", "missing"]:
    """What of ``spec`` is on this machine: a current prepared cache, else the raw files' status."""
    if is_prepared_current(spec, paths.dataset_raw_dir(spec.raw_group), paths.dataset_prepared_dir(spec.name)):
        return "prepared"
    return raw_status(spec)


def prepared_if_current(name: str, synthetic: dict[str, Any] | None = None) -> PreparedDataset | None:
    """Dataset ``name``'s prepared cache when it is current here (for ``synthetic``: made with those
    generator parameters), else None. Creates, downloads and prepares nothing: for estimates made
    before a run (``xmcbench plan``)."""
    try:
        spec = get_spec(name)
    except XmcbenchError:
        return None
    if synthetic is not None:
        if spec.synthetic != _synthetic_spec(name, synthetic).synthetic:
            return None
    prepared_dir = paths.dataset_prepared_dir(spec.name)
    if not is_prepared_current(spec, paths.dataset_raw_dir(spec.raw_group), prepared_dir):
        return None
    return load_prepared(prepared_dir)


def prepared_version(name: str) -> str | None:
    """The version of dataset ``name``'s prepared cache here, None when it is not prepared."""
    try:
        folder = get_spec(name).name
    except XmcbenchError:
        folder = name
    try:
        meta = json.loads((paths.dataset_prepared_dir(folder) / META_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta.get("dataset_version") if isinstance(meta, dict) else None
