"""Search over label embeddings: exact top-k by inner product (torch, chunked, GPU when present; or faiss).

``from xmcbench.search import exact_topk``. Importing this package does not import torch or faiss;
the backends are imported when a search runs.
"""

from xmcbench.search.exact import exact_topk

__all__ = ["exact_topk"]
