"""Text encoders: Hugging Face AutoModel + pooling, loadable offline.

``TextEncoder`` is imported on first use: it needs torch (a second to import), and the CLI reaches
this package through ``encoders.hub_ref`` for every command, ``--help`` included.
"""

from __future__ import annotations

__all__ = ["TextEncoder", "resolve_model_path"]


def __getattr__(name: str):
    if name in __all__:
        from xmcbench.encoders import text_encoder

        return getattr(text_encoder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
