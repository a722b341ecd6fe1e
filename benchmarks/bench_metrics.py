"""Speed of xmcbench.metrics against napkinXC (and pyxclib when importable).

Run:  python benchmarks/bench_metrics.py                  # 200,000 rows, napkinXC on a 20,000-row subset
      python benchmarks/bench_metrics.py --rows 50000 --skip-napkinxc
      python benchmarks/bench_metrics.py --big-rows 0     # skip the 1,000,000-row time/memory run

Data (seeded): ``--labels`` labels (500,000) with Zipfian popularity (p_l ~ 1/l^0.9); each row has
1 + Poisson(4) true labels (~5) and exactly ``--per-row`` (100) scored predictions: about 60% of
its true labels with high-ish scores, the rest popular-biased random labels; scores are float32
with some deliberate ties. Metrics timed: P, nDCG, PSP, PSnDCG at 1..5 and R@100 — the set the
XMC papers report. Data generation is not timed.

napkinXC is a Python loop per row, so it is timed on the first ``--napkinxc-rows`` rows when fed
ranked label lists (its fastest input; the ranking is done by xmcbench and not timed) and on a
quarter of those when fed the CSR matrices directly (it then argsorts every row itself), and
extrapolated linearly to ``--rows``; the table says so. pyxclib is not
on PyPI; it is timed only if ``xclib`` imports. The values of both are checked against xmcbench on
the rows they ran on.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
import tracemalloc

import numpy as np
import scipy.sparse as sp

from xmcbench.metrics import evaluate, inv_propensity, top_k

KS = (1, 2, 3, 4, 5)
FAMILIES = ["P", "nDCG", "PSP", "PSnDCG", "R@100"]


def make_data(rows: int, labels: int = 500_000, per_row: int = 100, seed: int = 0, block: int = 50_000):
    """(predictions CSR float32, test truth CSR, train truth CSR) with Zipfian labels.

    Generated ``block`` rows at a time so that a million rows need ~2 GB, not ten.
    """
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, labels + 1) ** 0.9)
    cdf /= cdf[-1]

    def zipf(size: int) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, rng.random(size)), labels - 1)

    def labels_matrix(n: int) -> sp.csr_matrix:
        counts = rng.poisson(4, n) + 1
        r = np.repeat(np.arange(n, dtype=np.int64), counts)
        m = sp.csr_matrix((np.ones(r.size, np.float32), (r, zipf(r.size))), shape=(n, labels))
        m.sum_duplicates()
        m.data[:] = 1.0
        return m

    def predictions_block(truth: sp.csr_matrix) -> sp.csr_matrix:
        n = truth.shape[0]
        # Candidates: ~60% of each row's true labels (scores in [0.3, 1)), then random labels (half
        # Zipfian, half uniform; scores in [0, 0.7)). Scores are multiples of 1/4096: some exact ties.
        t_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(truth.indptr))
        keep = rng.random(t_rows.size) < 0.6
        half = n * (per_row + 40) // 2  # draw more than needed: repeats are dropped below
        c_rows = np.concatenate([t_rows[keep], np.repeat(np.arange(n, dtype=np.int64), per_row + 40)[: 2 * half]])
        c_labels = np.concatenate([truth.indices[keep].astype(np.int64), zipf(half), rng.integers(0, labels, half)])
        # 1. Unique (row, label); a true label wins over a random repeat (flag bit 0 sorts first).
        flag = np.concatenate([np.zeros(keep.sum(), np.int64), np.ones(2 * half, np.int64)])
        packed = np.sort(((c_rows * labels + c_labels) << 1) | flag)
        del c_rows, c_labels, flag
        packed = packed[np.concatenate(([True], (packed[1:] >> 1) != (packed[:-1] >> 1)))]
        is_true = (packed & 1) == 0
        c_rows, c_labels = (packed >> 1) // labels, (packed >> 1) % labels
        low, high = np.where(is_true, 0.3, 0.0), np.where(is_true, 1.0, 0.7)
        level = np.round(rng.uniform(low, high) * 4096).astype(np.int64)  # score = level / 4096
        # 2. Keep each row's per_row best: sort (row, descending level, label) packed in one int64.
        label_bits = int(labels - 1).bit_length()
        order = np.sort((c_rows << (13 + label_bits)) | ((4096 - level) << label_bits) | c_labels)
        c_rows = order >> (13 + label_bits)
        c_level = 4096 - ((order >> label_bits) & 0x1FFF)
        c_labels = order & ((1 << label_bits) - 1)
        starts = np.searchsorted(c_rows, np.arange(n))
        sel = (np.arange(c_rows.size) - starts[c_rows]) < per_row
        m = sp.csr_matrix(((c_level[sel] / 4096).astype(np.float32), (c_rows[sel], c_labels[sel])), shape=(n, labels))
        m.sort_indices()
        return m

    truth = labels_matrix(rows)
    train = labels_matrix(max(rows, 100_000))
    parts = [predictions_block(truth[s : s + block]) for s in range(0, rows, block)]
    predictions = sp.vstack(parts, format="csr")
    predictions.sort_indices()
    return predictions, truth, train


def time_xmcbench(predictions, truth, w, repeat: int = 3) -> tuple[float, float, dict]:
    """Best wall and best CPU seconds of ``repeat`` runs (evaluate is single-threaded, so CPU time is
    what the wall time would be on an idle machine), and the scores."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        scores = evaluate(predictions, truth, k=KS, inv_propensity=w, metrics=FAMILIES)
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best_wall, best_cpu, scores


def time_napkinxc(predictions, truth, w, rows: int) -> tuple[float, float, dict]:
    import napkinxc.metrics as nm

    top = top_k(predictions[:rows], 100)  # napkinXC takes ranked lists; ranking is not timed
    pred_lists = [[int(x) for x in r if x >= 0] for r in top]
    sub = truth[:rows]
    true_lists = [sub.indices[sub.indptr[i] : sub.indptr[i + 1]].tolist() for i in range(rows)]
    t0, c0 = time.perf_counter(), time.process_time()
    values = {
        "P": nm.precision_at_k(true_lists, pred_lists, k=5),
        "nDCG": nm.ndcg_at_k(true_lists, pred_lists, k=5),
        "PSP": nm.psprecision_at_k(true_lists, pred_lists, w, k=5),
        "PSnDCG": nm.psndcg_at_k(true_lists, pred_lists, w, k=5),
    }
    r100 = nm.recall_at_k(true_lists, pred_lists, k=100)[-1]
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    scores = {f"{f}@{k}": float(v[k - 1]) * 100 for f, v in values.items() for k in KS}
    scores["R@100"] = float(r100) * 100
    return elapsed, cpu, scores


def time_napkinxc_csr(predictions, truth, w, rows: int) -> tuple[float, float, dict]:
    """napkinXC fed the CSR matrices themselves (it ranks each row with an argsort of its scores)."""
    import napkinxc.metrics as nm

    pred, sub = predictions[:rows], truth[:rows]
    t0, c0 = time.perf_counter(), time.process_time()
    values = {
        "P": nm.precision_at_k(sub, pred, k=5),
        "nDCG": nm.ndcg_at_k(sub, pred, k=5),
        "PSP": nm.psprecision_at_k(sub, pred, w, k=5),
        "PSnDCG": nm.psndcg_at_k(sub, pred, w, k=5),
    }
    r100 = nm.recall_at_k(sub, pred, k=100)[-1]
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    scores = {f"{f}@{k}": float(v[k - 1]) * 100 for f, v in values.items() for k in KS}
    scores["R@100"] = float(r100) * 100
    return elapsed, cpu, scores


def time_pyxclib(predictions, truth, w) -> tuple[float, float, dict] | None:
    try:
        from xclib.evaluation import xc_metrics  # not on PyPI
    except ImportError:
        return None
    t0, c0 = time.perf_counter(), time.process_time()
    acc = xc_metrics.Metrics(true_labels=truth, inv_psp=w).eval(predictions, 5)
    recall = xc_metrics.recall(predictions, truth, k=100)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    names = ["P", "nDCG", "PSP", "PSnDCG"]
    scores = {f"{n}@{k}": float(acc[i][k - 1]) * 100 for i, n in enumerate(names) for k in KS}
    scores["R@100"] = float(recall[-1]) * 100
    return elapsed, cpu, scores


def max_abs_diff(a: dict, b: dict) -> float:
    return max(abs(a[k] - b[k]) for k in b)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--labels", type=int, default=500_000)
    parser.add_argument("--per-row", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-napkinxc", action="store_true")
    parser.add_argument("--napkinxc-rows", type=int, default=20_000, help="rows napkinXC runs on (then extrapolated)")
    parser.add_argument("--big-rows", type=int, default=1_000_000, help="rows of the time/memory run (0 skips it)")
    args = parser.parse_args(argv)

    print(f"data: {args.rows:,} rows x {args.per_row} predictions, {args.labels:,} labels (seed {args.seed})")
    predictions, truth, train = make_data(args.rows, args.labels, args.per_row, args.seed)
    w = inv_propensity(train, 0.55, 1.5)
    print(
        f"      {truth.nnz / args.rows:.2f} true labels per row, {predictions.nnz / args.rows:.1f} predictions per row"
    )

    rows = []  # (tool, rows run, wall s, cpu s, scale to --rows, note)
    t_x, c_x, s_x = time_xmcbench(predictions, truth, w)
    rows.append(("xmcbench", args.rows, t_x, c_x, 1.0, "best of 3"))

    if not args.skip_napkinxc:
        n_sub = min(args.napkinxc_rows, args.rows)
        t_n, c_n, s_n = time_napkinxc(predictions, truth, w, n_sub)
        check = evaluate(predictions[:n_sub], truth[:n_sub], k=KS, inv_propensity=w, metrics=FAMILIES)
        note = f"ranked lists in (ranking not timed); max |diff| vs xmcbench {max_abs_diff(check, s_n):.1e} pts"
        if n_sub < args.rows:
            note = f"EXTRAPOLATED x{args.rows / n_sub:.0f} from {n_sub:,} rows; " + note
        rows.append(("napkinxc (lists)", n_sub, t_n, c_n, args.rows / n_sub, note))
        n_csr = max(1, n_sub // 4)
        t_c, c_c, s_c = time_napkinxc_csr(predictions, truth, w, n_csr)
        check = evaluate(predictions[:n_csr], truth[:n_csr], k=KS, inv_propensity=w, metrics=FAMILIES)
        note = (
            f"EXTRAPOLATED x{args.rows / n_csr:.0f} from {n_csr:,} rows; CSR in (its own unstable argsort per "
            f"row: tied scores may rank differently); max |diff| vs xmcbench {max_abs_diff(check, s_c):.1e} pts"
        )
        rows.append(("napkinxc (CSR)", n_csr, t_c, c_c, args.rows / n_csr, note))

    pyx = time_pyxclib(predictions, truth, w)
    if pyx is None:
        rows.append(("pyxclib", 0, float("nan"), float("nan"), 1.0, "skipped: xclib not importable (not on PyPI)"))
    else:
        t_p, c_p, s_p = pyx
        rows.append(("pyxclib", args.rows, t_p, c_p, 1.0, f"max |diff| vs xmcbench {max_abs_diff(s_x, s_p):.1e} pts"))

    load = os.getloadavg()[0]
    print(
        f"\nP/nDCG/PSP/PSnDCG@1..5 + R@100 on {args.rows:,} rows "
        f"({os.cpu_count()} CPUs, load average {load:.1f} at the end: wall times include waiting for a CPU)"
    )
    at = f"cpu@{args.rows:,}"
    print(f"{'tool':<18}{'rows run':>10}{'wall s':>9}{'cpu s':>9}{at:>14}{'vs xmcbench':>13}  note")
    for tool, n_run, wall, cpu, scale, note in rows:
        scaled = cpu * scale
        ratio = scaled / c_x if np.isfinite(scaled) else float("nan")
        print(f"{tool:<18}{n_run:>10,}{wall:>9.2f}{cpu:>9.2f}{scaled:>14.2f}{ratio:>12.1f}x  {note}")
    print("\nxmcbench scores: " + ", ".join(f"{k} {v:.2f}" for k, v in s_x.items()))

    if args.big_rows:
        del predictions, truth, train
        gc.collect()
        print(f"\nbig run: {args.big_rows:,} rows")
        predictions, truth, train = make_data(args.big_rows, args.labels, args.per_row, args.seed + 1)
        w = inv_propensity(train, 0.55, 1.5)
        del train
        gc.collect()
        input_mb = (
            predictions.data.nbytes
            + predictions.indices.nbytes
            + predictions.indptr.nbytes
            + truth.data.nbytes
            + truth.indices.nbytes
            + truth.indptr.nbytes
        ) / 2**20
        t_big, c_big, _ = time_xmcbench(predictions, truth, w, repeat=2)
        tracemalloc.start()
        evaluate(predictions, truth, k=KS, inv_propensity=w, metrics=FAMILIES)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(
            f"  evaluate time        {t_big:8.2f} s wall, {c_big:.2f} s CPU (best of 2; load average "
            f"{os.getloadavg()[0]:.1f})"
        )
        print(f"  inputs (CSR arrays)  {input_mb:8.0f} MB")
        print(f"  evaluate peak extra  {peak / 2**20:8.0f} MB (tracemalloc peak during one evaluate call)")
        print(f"  process peak RSS     {maxrss_mb:8.0f} MB (ru_maxrss; includes data generation)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
