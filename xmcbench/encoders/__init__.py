"""Text encoders: Hugging Face AutoModel + pooling, loadable offline."""

from xmcbench.encoders.text_encoder import TextEncoder, resolve_model_path

__all__ = ["TextEncoder", "resolve_model_path"]
