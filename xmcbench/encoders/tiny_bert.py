"""A tiny real BERT (2 layers, 32-d, random weights) with MiniLM's tokenizer, saved as a model folder.

Tests train it end to end and ``python -m benchmarks --quick`` times training steps with it: every
code path of a real encoder (tokenizer, attention, pooling, save/load) at a cost a CPU test can pay.
Dropout is off so that training on it is deterministic.
"""

from __future__ import annotations

from pathlib import Path


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
