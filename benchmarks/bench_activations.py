"""Activation memory of a DistilBERT-shaped encoder per token and layer, by sequence length, next to
``xmcbench plan``'s model of it (``xmcbench.run.plan.activation_bytes``, fitted on this script's H100 run).

    python benchmarks/bench_activations.py --device cuda --seqs 32,64,128,256,512   # benchmarks/gpu.sh
    python benchmarks/bench_activations.py --device cpu --tokens 4096 --seqs 32,128

Why: Korthikanti et al.'s 34 h + 5 a s bytes count the attention matrix kept for backward (scores,
softmax, dropout mask), which a fused attention kernel (PyTorch's SDPA on a GPU) never stores. On an
H100 (benchmarks/results/activations-gpu-h100.json) the kept bytes were 42.5 h + 2 s from 32 to 512
tokens: no a s term, and more per h than 34 (autocast keeps float32 copies). The plan uses that.

On CUDA: memory allocated after a bf16-autocast forward in train mode (what backward will read),
less the same for a 1 x 8 batch (the autocast weight copies), per token and layer. On a CPU the
same bytes are counted as the tensors autograd saves (``saved_tensors_hooks``; the weights' shapes
excluded), which depends on the CPU's attention kernel, not the GPU's: GPU figures decide.
Padding is real: half the rows have their last quarter masked, so the masked attention path runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import torch


def _model(hidden: int, layers: int, heads: int, device: str):
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=30_522, dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=4 * hidden)
    return DistilBertModel(config).to(device).train()


def _inputs(batch: int, seq: int, device: str):
    ids = torch.randint(1000, 30_000, (batch, seq), device=device)
    mask = torch.ones(batch, seq, dtype=torch.long, device=device)
    mask[::2, seq - seq // 4 :] = 0
    return ids, mask


def _kept_bytes(model, batch: int, seq: int, device: str) -> int:
    """Bytes the forward keeps for backward (see the module docstring for how, per device)."""
    ids, mask = _inputs(batch, seq, device)
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.cuda.synchronize()
        kept = torch.cuda.memory_allocated() - before
        del out
        return kept
    weights = {tuple(p.shape) for p in model.parameters() if p.dim() > 1}
    storages: dict[int, int] = {}

    def pack(t):
        if tuple(t.shape) not in weights and tuple(t.shape[::-1]) not in weights:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
    del out
    return sum(storages.values())


def measure(seqs, tokens: int, device: str, hidden: int = 768, layers: int = 6, heads: int = 12) -> list[dict]:
    """One row per sequence length: kept bytes per token and layer, and the plan's figure."""
    from xmcbench.run.plan import activation_bytes

    model = _model(hidden, layers, heads, device)
    overhead = _kept_bytes(model, 1, 8, device)
    rows = []
    for seq in seqs:
        batch = max(1, tokens // seq)
        kept = _kept_bytes(model, batch, seq, device) - overhead
        per = kept / (batch * seq * layers)
        plan = activation_bytes(hidden, seq)
        rows.append(
            {
                "seq": seq,
                "batch": batch,
                "kept_gb": kept / 1e9,
                "bytes_per_token_layer": per,
                "plan_bytes_per_token_layer": plan,
                "plan_over_measured": plan / per,
                "per_h": per / hidden,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seqs", default="32,64,128,256,512")
    ap.add_argument("--tokens", type=int, default=65_536, help="tokens a batch (batch = tokens / seq)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    import transformers

    rows = measure([int(s) for s in args.seqs.split(",")], args.tokens, args.device)
    result = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attn_implementation": _model(64, 1, 2, "cpu").config._attn_implementation,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))


if __name__ == "__main__":
    main()
