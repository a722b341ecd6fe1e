"""Import faiss with its bundled OpenBLAS on the right kernels for this CPU.

    >>> faiss = import_faiss()        # instead of ``import faiss``

The faiss-cpu wheels bundle an OpenBLAS of their own (0.3.15 in faiss-cpu 1.15), which picks its
matrix kernels once, when it is loaded, by the CPU's model number. It predates the Xeons of the
last years (Sapphire and Emerald Rapids), reads them as "Prescott" and runs SSE3 kernels on them:
``IndexFlatIP.search`` of 2,000 x 100k x 384 took 4.6 s on a 2-core Emerald Rapids, 0.74 s with the
AVX-512 ("SkylakeX") kernels the same library has inside, and faiss K-means pays the same.

numpy's OpenBLAS (scipy-openblas, newer: 0.3.31 here) has already recognised the CPU by the time
faiss is imported, so its choice, read with threadpoolctl, is handed to faiss's through
``OPENBLAS_CORETYPE`` while faiss loads (that library reads it once, at load time), and the
variable is put back as it was, so child processes and later libraries see the environment they
were given. The kernel named is one that a library on this very CPU chose, so its instructions
are there; where no OpenBLAS is loaded beside faiss (numpy built on MKL or Accelerate), or it
names a kernel the older library does not know, faiss's own choice stands. A value the user set
is never touched, and faiss imported before this function ran (by the caller's own code) keeps
whatever its library chose.
"""

from __future__ import annotations

import os
import sys
import threading

from xmcbench.errors import XmcbenchError

__all__ = ["blas_kernels", "faiss_or_error", "import_faiss"]

_LOCK = threading.Lock()

# Kernel names that both a current OpenBLAS reports and faiss's older one accepts, mapped to the
# name the older one knows: newer cores run the kernels of the family they extend.
_KNOWN_TO_OLDER = {
    "SkylakeX": "SkylakeX",
    "Cooperlake": "Cooperlake",
    "SapphireRapids": "Cooperlake",
    "Haswell": "Haswell",
    "Zen": "Zen",
    "Sandybridge": "Sandybridge",
}


def import_faiss():
    """The ``faiss`` module, its OpenBLAS on the kernels numpy's OpenBLAS chose (see module doc).

    Raises ImportError, as ``import faiss`` would, when faiss is not installed.
    """
    with _LOCK:  # one thread sets and restores the variable; the others wait for the loaded module
        if sys.modules.get("faiss") is not None:  # already loaded: its BLAS has chosen
            return sys.modules["faiss"]
        kernel = None if "OPENBLAS_CORETYPE" in os.environ else _numpy_kernel()
        if kernel is not None:
            os.environ["OPENBLAS_CORETYPE"] = kernel
        try:
            import faiss
        finally:
            if kernel is not None:
                os.environ.pop("OPENBLAS_CORETYPE", None)
        return faiss


def faiss_or_error(why: str):
    """``import_faiss()``, or an XmcbenchError saying ``why`` faiss is needed and how to install it."""
    try:
        return import_faiss()
    except ImportError:
        raise XmcbenchError(
            f"{why}, and faiss is not installed: pip install 'xmcbench[faiss-cpu]' "
            "(or 'xmcbench[gpu]' on a CUDA machine)"
        ) from None


def blas_kernels() -> dict[str, str]:
    """{library file name: kernel} of every OpenBLAS loaded in this process (for benchmark notes)."""
    return {os.path.basename(info["filepath"]): str(info.get("architecture")) for info in _openblas_infos()}


def _numpy_kernel() -> str | None:
    """The kernel numpy's OpenBLAS runs on this CPU, in a name faiss's OpenBLAS knows; None if unknown."""
    import numpy  # noqa: F401  (loads numpy's OpenBLAS, if it is not loaded yet)

    # faiss is not loaded yet, so every OpenBLAS here is someone else's; numpy's first
    infos = sorted(_openblas_infos(), key=lambda i: "numpy" not in str(i.get("filepath", "")))
    for info in infos:
        kernel = _KNOWN_TO_OLDER.get(str(info.get("architecture")))
        if kernel is not None:
            return kernel
    return None


def _openblas_infos() -> list[dict]:
    """threadpoolctl's record of each OpenBLAS loaded here; [] where it cannot tell."""
    try:
        from threadpoolctl import threadpool_info

        return [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    except Exception:  # noqa: BLE001 - threadpoolctl reads libraries through ctypes: never stop an import
        return []
