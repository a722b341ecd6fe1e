"""Search over label embeddings: exact top-k by inner product (faiss on CPU, torch chunked on GPU).

``from xmcbench.search import exact_topk``. Importing this package does not import torch or faiss;
the backends are imported when a search runs.
"""

from typing import Literal

from xmcbench.search.exact import exact_topk, resolve_backend

SearchBackend = Literal["auto", "torch", "faiss"]  # what a method's `search_backend` may say

__all__ = ["SearchBackend", "exact_topk", "resolve_backend"]
