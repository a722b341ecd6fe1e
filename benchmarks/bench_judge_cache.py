"""How long does the judgement cache take to store a batch: one set-based statement vs the former
row-by-row ``executemany``?

    python -m benchmarks.bench_judge_cache                              # 5,000 and 50,000 rows
    python -m benchmarks.bench_judge_cache --rows 5000 --repeat 1 --out /tmp/h/judge-cache.json

Each timing stores ``rows`` judgements (seeded pairs, a few repeated within the batch as a re-run
gives them) into a fresh cache file, through ``JudgementCache``'s own write path (file lock,
read-write connection, schema, one transaction), so the two differ in the INSERT only:

- ``xmcbench``: ``JudgementCache.store`` (the arrays registered, ``INSERT OR IGNORE ... SELECT``);
- ``executemany``: the peer, written here as ``store`` was before: a list of Python tuples and
  ``executemany("INSERT OR IGNORE ... VALUES (?, ?, ?, ?, ?, ?)")``, which DuckDB runs row by row.

Both files must then hold the same rows (checked). Best of ``--repeat`` (the peer: of
``--peer-repeat``, once by default: 17 minutes at 50,000 rows on a busy 2-core machine); the
two back to back for each size. Saved as JSON (``--out``) with the machine and the versions.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

from benchmarks.runner import save_result
from xmcbench.judge.cache import JudgementCache

STORE_ARGS = ("v1", "eurlex-4k", "judge@rev")


def make_batch(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(doc_ids, label_ids, p_yes): ``rows`` pairs, about 1% of them repeats of an earlier pair."""
    rng = np.random.default_rng(seed)
    docs = rng.integers(0, max(1, rows // 5), rows)
    labels = rng.integers(0, 100_000, rows)
    again = rng.random(rows) < 0.01
    source = rng.integers(0, rows, rows)
    docs[again], labels[again] = docs[source[again]], labels[source[again]]
    return docs, labels, rng.random(rows)


def store_executemany(cache: JudgementCache, docs, labels, p_yes) -> None:
    """The peer: ``JudgementCache.store`` as it was, row by row."""
    dataset_version, prompt_id, model = STORE_ARGS
    rows = [
        (dataset_version, int(d), int(lab), prompt_id, model, float(p))
        for d, lab, p in zip(docs, labels, p_yes, strict=False)
    ]
    with cache._write() as con:
        con.execute("BEGIN")
        con.executemany(
            "INSERT OR IGNORE INTO judgements (dataset_version, doc_id, label_id, prompt_id, model, "
            "p_yes) VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        con.execute("COMMIT")


def store_xmcbench(cache: JudgementCache, docs, labels, p_yes) -> None:
    cache.store(*STORE_ARGS, docs, labels, p_yes)


def contents(path: Path) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(
            "SELECT dataset_version, doc_id, label_id, prompt_id, model, p_yes FROM judgements ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()


def best_of(store, batch, folder: Path, name: str, repeat: int) -> tuple[float, Path]:
    """Best seconds of ``repeat`` stores, each into a fresh file; the last file, to compare."""
    best, path = float("inf"), folder
    for i in range(repeat):
        path = folder / f"{name}-{i}.duckdb"
        cache = JudgementCache(path)
        start = time.perf_counter()
        store(cache, *batch)
        best = min(best, time.perf_counter() - start)
    return best, path


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="5000,50000", help="batch sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many stores, the new way")
    parser.add_argument(
        "--peer-repeat", type=int, default=1, help="best of this many stores, the old way (minutes at 50,000 rows)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/judge-cache.json"))
    args = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-judge-cache-") as tmp:
        for n in (int(x) for x in args.rows.split(",")):
            batch = make_batch(n, args.seed)
            folder = Path(tmp) / str(n)
            folder.mkdir()
            ours, ours_file = best_of(store_xmcbench, batch, folder, "xmcbench", args.repeat)
            peer, peer_file = best_of(store_executemany, batch, folder, "executemany", args.peer_repeat)
            stored = contents(ours_file)
            assert stored == contents(peer_file), f"{n} rows: the two ways stored different rows"
            row = {
                "name": f"judge_cache_store_{n}",
                "work": f"store {n:,} judgements ({len(stored):,} distinct pairs) into a fresh cache file",
                "xmcbench_s": ours,
                "peer": "executemany (row by row, the former store)",
                "peer_s": peer,
                "ratio": ours / peer,
                "rows_per_s": n / ours,
                "peer_rows_per_s": n / peer,
            }
            print(
                f"{n:>7,} rows: xmcbench {ours:8.3f} s  executemany {peer:8.3f} s  "
                f"ratio {row['ratio']:.4f} ({peer / ours:,.0f}x faster)",
                flush=True,
            )
            rows.append(row)
    result = {
        "schema_version": 1,
        "repeat": args.repeat,
        "peer_repeat": args.peer_repeat,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "versions": {"python": platform.python_version(), "duckdb": duckdb.__version__, "numpy": np.__version__},
        },
        "load_average": os.getloadavg(),
        "rows": rows,
    }
    return save_result(result, args.out)


if __name__ == "__main__":
    main()
