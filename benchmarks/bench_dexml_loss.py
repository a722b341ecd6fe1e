"""Memory and time of DEXML's decoupled softmax over every label: the plain expression vs label blocks.

    python benchmarks/bench_dexml_loss.py                                    # CPU: 1024 x 50k, d 384
    python benchmarks/bench_dexml_loss.py --device cuda --batch 4096 --labels 100000 --dim 768

One forward + backward of the loss from (B, d) query and (L, d) label embeddings (float32, ~22
positives per row as LF-AmazonTitles), each implementation in its own process:

- ``plain``: ``decoupled_softmax_loss(q @ z.T / tau, targets)`` through autograd, what a
  one-GPU DEXML step ran before (``xmcbench.losses.decoupled_softmax``);
- ``blockwise``: ``sharded_decoupled_softmax_loss`` (``xmcbench.train``), scores formed in
  blocks of labels in forward and again in backward, against a dense (B, L) bool target mask;
- ``blockwise_sparse``: the same against a sparse COO target mask (what DEXML passes it).

The target mask is built inside each timed run, from the (B, p) positive columns, as a training
step builds it, so its memory is counted.

Reported: median seconds of ``--repeat`` runs and the peak memory above the inputs (CPU: the
process's peak resident memory, reset before the run via /proc/self/clear_refs; CUDA:
``torch.cuda.max_memory_allocated``), in bytes per (query, label) cell too; the loss values and
the largest gradient difference between the two (float32 rounding only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_train import _reset_peak, _rss_kb  # noqa: E402

IMPLEMENTATIONS = ("plain", "blockwise", "blockwise_sparse")


def _inputs(args, torch):
    gen = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(args.batch, args.dim, generator=gen), dim=1)
    z = torch.nn.functional.normalize(torch.randn(args.labels, args.dim, generator=gen), dim=1)
    cols = torch.randint(0, args.labels, (args.batch, args.positives), generator=gen)  # (B, p)
    return q.to(args.device), z.to(args.device), cols.to(args.device)


def _targets(cols, n_labels: int, sparse: bool, torch):
    """(B, L) bool mask of the positive columns: dense, or sparse COO (repeated cells count once)."""
    if sparse:
        rows = torch.arange(cols.shape[0], device=cols.device).repeat_interleave(cols.shape[1])
        values = torch.ones(cols.numel(), dtype=torch.bool, device=cols.device)
        return torch.sparse_coo_tensor(torch.stack([rows, cols.reshape(-1)]), values, (cols.shape[0], n_labels))
    targets = torch.zeros(cols.shape[0], n_labels, dtype=torch.bool, device=cols.device)
    return targets.scatter_(1, cols, True)


def child(args) -> dict:
    import torch

    from xmcbench.losses.decoupled_softmax import decoupled_softmax_loss
    from xmcbench.train.sharded_decoupled_softmax import sharded_decoupled_softmax_loss

    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    q0, z0, cols = _inputs(args, torch)

    def run():
        q, z = q0.clone().requires_grad_(True), z0.clone().requires_grad_(True)
        targets = _targets(cols, args.labels, args.impl == "blockwise_sparse", torch)
        if args.impl == "plain":
            loss = decoupled_softmax_loss(q @ z.T / args.temperature, targets)
        else:
            loss = sharded_decoupled_softmax_loss(q, z, targets, args.temperature)
        loss.backward()
        return loss.detach(), q.grad, z.grad

    run()  # warm-up (allocator pools, kernels)
    seconds, peaks = [], []
    for i in range(args.repeat):
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            _reset_peak()
            base = _rss_kb("VmRSS") * 1024
        start = time.perf_counter()
        loss, q_grad, z_grad = run()
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        peak = torch.cuda.max_memory_allocated() if cuda else _rss_kb("VmHWM") * 1024
        peaks.append(peak - base)
        if i < args.repeat - 1:  # the next run's baseline without them
            del q_grad, z_grad
    if args.grads:  # for the parent's comparison of the two
        torch.save({"q": q_grad.cpu(), "z": z_grad.cpu()}, args.grads)
    return {
        "impl": args.impl,
        "seconds": statistics.median(seconds),
        "peak_extra_gb": max(peaks) / 1e9,
        "bytes_per_cell": max(peaks) / (args.batch * args.labels),
        "loss": float(loss),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--labels", type=int, default=50_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--positives", type=int, default=22, help="positives drawn per query (with repeats)")
    ap.add_argument("--temperature", type=float, default=0.05)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="also write the results here (JSON)")
    ap.add_argument("--impl", choices=IMPLEMENTATIONS, help=argparse.SUPPRESS)
    ap.add_argument("--grads", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.impl:
        print(json.dumps(child(args)))
        return

    import tempfile

    import torch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for impl in IMPLEMENTATIONS:
            cmd = [sys.executable, __file__, "--impl", impl, "--grads", f"{tmp}/{impl}.pt"]
            for name in ("batch", "labels", "dim", "positives", "temperature", "device", "threads", "repeat"):
                cmd += [f"--{name}", str(getattr(args, name))]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                rows.append({"impl": impl, "error": done.stderr.strip().splitlines()[-1:]})
                print(f"{impl}: failed: {rows[-1]['error']}", file=sys.stderr)
                continue
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
        saved = [torch.load(f"{tmp}/{impl}.pt") for impl in IMPLEMENTATIONS if Path(f"{tmp}/{impl}.pt").exists()]
    result = {
        "command": "python benchmarks/bench_dexml_loss.py " + " ".join(sys.argv[1:]),
        "shape": {k: getattr(args, k) for k in ("batch", "labels", "dim", "positives", "temperature")},
        "device": torch.cuda.get_device_name() if args.device == "cuda" else f"cpu, {args.threads} threads",
        "torch": torch.__version__,
        "rows": rows,
    }
    if len(saved) == len(IMPLEMENTATIONS):
        result["max_grad_difference"] = max(
            float((saved[0][k] - other[k]).abs().max()) for other in saved[1:] for k in ("q", "z")
        )
        result["max_grad"] = max(float(saved[0][k].abs().max()) for k in ("q", "z"))
    ok = {r["impl"]: r for r in rows if "error" not in r}
    for impl in IMPLEMENTATIONS[1:]:
        if impl in ok and "plain" in ok:
            result[f"{impl}_over_plain"] = {
                "seconds": ok[impl]["seconds"] / ok["plain"]["seconds"],
                "peak_memory": ok[impl]["peak_extra_gb"] / ok["plain"]["peak_extra_gb"],
            }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
