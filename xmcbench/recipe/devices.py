"""GPUs a recipe may name (``hardware.gpu``) and ``xmcbench plan`` can size a run for.

name -> (memory in GB, dense bf16 peak TFLOPS), from the vendors' data sheets.
"""

from __future__ import annotations

DEVICES: dict[str, tuple[float, float]] = {
    "V100-16GB": (16.0, 125.0),
    "V100-32GB": (32.0, 125.0),
    "A10-24GB": (24.0, 125.0),
    "L4-24GB": (24.0, 121.0),
    "A100-40GB": (40.0, 312.0),
    "A100-80GB": (80.0, 312.0),
    "A6000-48GB": (48.0, 155.0),
    "L40S-48GB": (48.0, 362.0),
    "H100-80GB": (80.0, 989.0),
    "H200-141GB": (141.0, 989.0),
}


def canonical_device(name: str) -> str | None:
    """The table's spelling of ``name`` (case-insensitive), or None when it is not in the table."""
    return {key.lower(): key for key in DEVICES}.get(name.lower())
