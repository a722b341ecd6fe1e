"""How long does an AdamW step take over a MiniLM-sized encoder: xmcbench's (fused) vs torch's defaults?

    python -m benchmarks.bench_optimizer                       # CPU, one thread, 22.7M parameters
    python -m benchmarks.bench_optimizer --threads 2 --out /tmp/h/optim.json

The parameters are those of all-MiniLM-L6-v2's shape (BERT, 6 layers, hidden 384; built, not
downloaded), in two groups (decayed / not) as ``build_optimizer`` makes them. Each way takes the
same seeded gradients for ``--steps`` steps; the time is the median step after the first (which
allocates the moment buffers). Peers: torch's CPU default (``foreach=False``, a loop of elementwise
passes a parameter) and ``foreach=True``. The largest difference from the default is reported:
the update is the same up to float rounding. Saved as JSON (``--out``) with the machine and the versions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch


def _steps(params: list[torch.Tensor], steps: int, **kwargs) -> tuple[float, list[torch.Tensor]]:
    from xmcbench.train.optim import build_optimizer

    own = [torch.nn.Parameter(p.clone()) for p in params]
    named = [(f"p{i}.bias" if p.dim() == 1 else f"p{i}.weight", p) for i, p in enumerate(own)]
    if kwargs:  # a peer: the same groups, torch's own implementation
        groups = build_optimizer([(named, 1e-4)], weight_decay=0.01).param_groups
        opt = torch.optim.AdamW(
            [{k: v for k, v in g.items() if k in ("params", "lr", "weight_decay")} for g in groups], **kwargs
        )
    else:
        opt = build_optimizer([(named, 1e-4)], weight_decay=0.01)
    gen = torch.Generator().manual_seed(1)
    times = []
    for _ in range(steps):
        for p in own:
            p.grad = torch.randn(p.shape, generator=gen)
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]), [p.detach() for p in own]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=9)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/optimizer-cpu.json"))
    args = parser.parse_args(argv)
    from transformers import BertConfig, BertModel

    from benchmarks.runner import machine, save_result

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    params = [p.detach() for p in BertModel(config).parameters()]
    ours, got = _steps(params, args.steps)
    rows = []
    for peer, kwargs in (
        ("torch AdamW, foreach=False (the CPU default)", {"foreach": False}),
        ("torch AdamW, foreach=True", {"foreach": True}),
    ):
        theirs, want = _steps(params, args.steps, **kwargs)
        diff = max((a - b).abs().max().item() for a, b in zip(got, want, strict=True))
        rows.append(
            {
                "name": "adamw_step",
                "work": f"one AdamW step, {sum(p.numel() for p in params) / 1e6:.1f}M parameters, {args.threads} thread(s)",
                "xmcbench_s": ours,
                "peer": peer,
                "peer_s": theirs,
                "ratio": ours / theirs,
                "max_abs_diff_after_steps": diff,
            }
        )
        print(
            f"fused {ours * 1e3:7.1f} ms  {peer}: {theirs * 1e3:7.1f} ms  ratio {ours / theirs:.3f}  max |diff| {diff:.2e}"
        )
    result = {
        "schema_version": 1,
        "steps": args.steps,
        "rows": rows,
        "machine": machine(),
        "load_average": os.getloadavg(),
    }
    return save_result(result, args.out)


if __name__ == "__main__":
    main()
