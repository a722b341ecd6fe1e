"""faiss is loaded with its OpenBLAS on the kernels numpy's newer OpenBLAS chose for this CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from xmcbench.search import faiss_loader

_PROBE = """
import json, os, sys
import numpy
from threadpoolctl import threadpool_info
from xmcbench.search import faiss_loader
if sys.argv[1] != "-":  # stand in for numpy's choice: a kernel faiss's library would not pick itself
    faiss_loader._numpy_kernel = lambda: sys.argv[1]
before = {i["filepath"]: i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"}
faiss_loader.import_faiss()
after = {i["filepath"]: i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"}
faiss_kernels = [k for f, k in after.items() if f not in before]
print(json.dumps({"numpy": list(before.values()), "faiss": faiss_kernels, "env": os.environ.get("OPENBLAS_CORETYPE")}))
"""


def _probe(kernel: str = "-", env_extra: dict | None = None) -> dict:
    """Load faiss through the loader in a fresh interpreter (a library picks its kernels once, on load)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", _PROBE, kernel], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probe():
    try:
        faiss_loader.import_faiss()
    except ImportError:
        pytest.skip("faiss is not installed")
    pytest.importorskip("threadpoolctl")
    found = _probe()
    if not found["faiss"] or not found["numpy"]:
        pytest.skip(f"faiss or numpy carries no OpenBLAS of its own here: {found}")
    return found


def test_faiss_blas_runs_the_kernel_it_is_handed(probe):
    """Sandybridge (AVX) is a kernel no OpenBLAS picks on a CPU of the last ten years by itself."""
    found = _probe("Sandybridge")
    assert found["faiss"] == ["Sandybridge"]
    assert found["env"] is None  # put back: child processes see the environment they were given


def test_faiss_blas_runs_the_kernels_numpy_chose(probe):
    wanted = faiss_loader._KNOWN_TO_OLDER.get(probe["numpy"][0])
    if wanted is None:
        pytest.skip(f"numpy's OpenBLAS runs {probe['numpy'][0]!r}, a kernel the loader leaves to faiss's own choice")
    assert probe["faiss"] == [wanted]
    assert probe["env"] is None


def test_a_kernel_the_user_chose_is_kept(probe):
    found = _probe("Haswell", {"OPENBLAS_CORETYPE": "Sandybridge"})
    assert found["faiss"] == ["Sandybridge"] and found["env"] == "Sandybridge"


@pytest.mark.parametrize(
    ("reported", "expected"),
    [("SkylakeX", "SkylakeX"), ("SapphireRapids", "Cooperlake"), ("Zen", "Zen"), ("Prescott", None), (None, None)],
)
def test_numpy_kernel_maps_to_a_name_the_older_library_knows(monkeypatch, reported, expected):
    import threadpoolctl

    infos = [
        {"internal_api": "openmp", "filepath": "/x/libgomp.so", "architecture": None},
        {"internal_api": "openblas", "filepath": "/x/libscipy_openblas64_.so", "architecture": reported},
    ]
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: infos)
    assert faiss_loader._numpy_kernel() == expected


def test_faiss_already_loaded_is_returned_untouched(monkeypatch):
    sentinel = object()
    monkeypatch.setitem(sys.modules, "faiss", sentinel)
    monkeypatch.setattr(faiss_loader, "_numpy_kernel", lambda: pytest.fail("kernel looked up for a loaded faiss"))
    assert faiss_loader.import_faiss() is sentinel


def test_missing_faiss_raises_import_error_and_leaves_the_environment(monkeypatch):
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr(faiss_loader, "_numpy_kernel", lambda: "SkylakeX")
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss now raises ImportError
    with pytest.raises(ImportError):
        faiss_loader.import_faiss()
    assert "OPENBLAS_CORETYPE" not in os.environ
