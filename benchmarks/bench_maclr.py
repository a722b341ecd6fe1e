"""Speed and memory of MACLR's two pre-training stages on CPU (steps/s, peak host memory).

Run:  python benchmarks/bench_maclr.py                         # all-MiniLM-L6-v2, 30 + 30 steps
      python benchmarks/bench_maclr.py --steps 10 --encoder /path/to/bert --max-length 288

Data: a synthetic paraphrase dataset (``xmcbench.data.synth``, ``paraphrase=True``) generated in a
temporary XMCBENCH_HOME, so nothing of the user's home is touched. Timed separately:

- Stage I: ``--steps`` steps of ICT + cluster SupCon (Eq. 2) + label regularisation (Eq. 3), the
  initial K-means and one re-clustering included (T_update = steps // 2);
- Stage II: building the pseudo pairs (encoder top-k + TF-IDF top-k), then ``--steps`` steps of Eq. 2.

Peak memory is the process's max RSS (``resource.getrusage``), read after each stage: the Stage II
figure is the peak over both. Speed is never asserted in a test; this script only reports.

Measured (2 shared cores while the load fell from ~15 to idle, torch 2 threads, MiniLM, batch 32, lengths 32/16):
``--steps 4 --train 200 --labels 100``: Stage I 0.35 steps/s (11.4 s, K-means encodings included),
Stage II 0.61 steps/s (6.6 s, pseudo-pair search included), peak RSS 1.70 GB. The smoke recipe
(batch 16, lengths 24/12, 567 ICT pairs) ran Stage I at 12 steps / 413 s and Stage II at
24 steps / 856 s on a machine at load ~17 (peak 1.24 GB); idle, the whole smoke run takes 44 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time


def peak_rss_gb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / (1024**2 if sys.platform != "darwin" else 1024**3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default="all-MiniLM-L6-v2")
    ap.add_argument("--labels", type=int, default=500)
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--label-max-length", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    home = tempfile.mkdtemp(prefix="xh-bench-maclr-")
    os.environ["XMCBENCH_HOME"] = home

    import numpy as np
    import torch

    from xmcbench.methods.base import RunContext
    from xmcbench.methods.maclr import MaclrConfig, MaclrMethod, ict_pairs
    from xmcbench.run import recipe_from_dict
    from xmcbench.run.phases import build_train_task, ensure_dataset

    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = recipe_from_dict(
        {
            "name": "bench-maclr",
            "dataset": {
                "name": "bench-paraphrase",
                "synthetic": {"labels": args.labels, "train": args.train, "test": 10, "seed": 0, "paraphrase": True},
            },
            "supervision": {"mode": "zero_shot"},
            "method": {"name": "maclr"},
            "encoder": {"name": args.encoder, "max_length": args.max_length, "label_max_length": args.label_max_length},
            "training": {"batch_size": args.batch_size, "lr": 1e-4, "warmup_ratio": 0.1},
            "hardware": {"devices": "cpu"},
        }
    )
    config = MaclrConfig(
        stage1_steps=args.steps,
        stage2_steps=args.steps,
        k0=min(32, args.train // 4),
        t_k=args.steps,
        t_update=max(1, args.steps // 4),
        label_negatives=16,
        projection_dim=None,
        temperature=0.05,
    )
    ds = ensure_dataset(recipe, progress=False)
    task = build_train_task(recipe, ds, np.ones(ds.n_labels), with_titles=True)
    ctx = RunContext(run_dir=tempfile.mkdtemp(prefix="bench-run-"), progress=False)
    method = MaclrMethod(config, recipe)
    from xmcbench.methods.dual_encoder import build_encoder

    method.encoder = build_encoder(recipe, projection_dim=config.projection_dim)
    rng = np.random.default_rng(0)
    contexts, titles = ict_pairs(task, config.title_removal, rng)
    labels = list(task.label_texts)
    print(
        f"encoder {args.encoder}, {len(contexts):,} ICT pairs, {len(labels):,} labels, batch {args.batch_size}, "
        f"lengths {args.max_length}/{args.label_max_length}, torch threads {torch.get_num_threads()}"
    )

    start = time.perf_counter()
    method._stage1(contexts, titles, labels, ctx, rng)
    s1 = time.perf_counter() - start
    peak1 = peak_rss_gb()
    start = time.perf_counter()
    method._stage2(list(task.train_texts), labels, ctx, rng)
    s2 = time.perf_counter() - start
    peak2 = peak_rss_gb()
    print("| stage | steps | wall s | steps/s | peak RSS GB |")
    print("|---|---|---|---|---|")
    print(f"| I (ICT + clustering + label reg.) | {args.steps} | {s1:.1f} | {args.steps / s1:.2f} | {peak1:.2f} |")
    print(f"| II (pseudo pairs + Eq. 2) | {args.steps} | {s2:.1f} | {args.steps / s2:.2f} | {peak2:.2f} |")
    print("(wall times include the K-means encodings of Stage I and the pseudo-pair search of Stage II)")


if __name__ == "__main__":
    main()
