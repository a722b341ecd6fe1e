"""Real transformer encoders with random weights and MiniLM's tokenizer, saved as model folders.

``save_tiny_bert``: 2 layers, 32-d. Tests train it end to end and ``python -m benchmarks --quick``
times training steps with it: every code path of a real encoder (tokenizer, attention, pooling,
save/load) at a cost a CPU test can pay. Dropout is off so that training on it is deterministic.

``save_random_distilbert``: the papers' encoder, DistilBERT (6 layers, 768-d, 12 heads, 3072 FFN,
66.4M parameters with the bert-base-uncased vocabulary that MiniLM's tokenizer has), randomly
initialised. A training step costs what it costs with distilbert-base-uncased's weights, so the
benchmarks time the papers' shapes on machines that cannot download it.
"""

from __future__ import annotations

from pathlib import Path


def save_random_distilbert(folder: str | Path, tokenizer: str = "all-MiniLM-L6-v2", seed: int = 0) -> Path:
    """Write a DistilBERT-shaped model with random weights and ``tokenizer`` (a folder or packaged model)."""
    import torch
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    from xmcbench.encoders.text_encoder import resolve_model_path

    folder = Path(folder)
    tok = AutoTokenizer.from_pretrained(resolve_model_path(tokenizer))
    torch.manual_seed(seed)
    config = DistilBertConfig(vocab_size=tok.vocab_size, dim=768, n_layers=6, n_heads=12, hidden_dim=3072)
    DistilBertModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def save_tiny_bert(folder: str | Path, seed: int = 0) -> Path:
    """Write the model and MiniLM's tokenizer into ``folder`` (the same weights for the same seed)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from xmcbench.encoders.text_encoder import resolve_model_path

    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
