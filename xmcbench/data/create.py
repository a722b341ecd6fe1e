"""Create a synthetic dataset under $XMCBENCH_HOME: generate, record checksums, register.

Shared by ``xmcbench datasets synth`` and by recipes that carry a ``dataset.synthetic`` block, so
both produce exactly the same files, manifest and local spec.
"""

from __future__ import annotations

from xmcbench import paths
from xmcbench.data.catalog import DatasetSpec, check_dataset_name, get_spec, local_spec_path, save_local_spec
from xmcbench.errors import XmcbenchError


def create_synthetic_dataset(
    name: str,
    *,
    n_labels: int,
    n_train: int,
    n_test: int,
    seed: int = 0,
    exist_ok: bool = False,
    force: bool = False,
) -> DatasetSpec:
    """Generate dataset ``name`` unless an identical one is already complete (with ``exist_ok``).

    An existing dataset of that name made with other parameters is an error unless ``force``.
    """
    from xmcbench.data.fetch import raw_status, record_manifest
    from xmcbench.data.synth import make_synthetic_spec, synthesize

    check_dataset_name(name)
    spec = make_synthetic_spec(name, n_labels=n_labels, n_train=n_train, n_test=n_test, seed=seed)
    if local_spec_path(name).exists() and not force:
        old = get_spec(name)
        if old.synthetic != spec.synthetic:
            raise XmcbenchError(
                f"dataset {name} already exists with other parameters ({old.synthetic}); pass --force "
                f"(datasets synth) to replace it, choose another name, or delete {paths.datasets_dir() / name}"
            )
        if exist_ok and raw_status(old) == "complete":
            return old
    raw_dir = paths.dataset_raw_dir(spec.raw_group)
    synthesize(raw_dir, n_labels=n_labels, n_train=n_train, n_test=n_test, seed=seed)
    record_manifest(raw_dir, list(spec.files),
                    source=f"synthetic (labels={n_labels}, train={n_train}, test={n_test}, seed={seed})")
    save_local_spec(spec)
    return spec
