"""How fast is ``prepare`` at LF-AmazonTitles-1.3M's size, next to merely decompressing its files?

    python benchmarks/bench_prepare.py --dir /tmp/bench-1.3m            # full size (~6 GB disk, minutes)
    python benchmarks/bench_prepare.py --dir /tmp/bench-0.1 --scale 0.1
    python benchmarks/bench_prepare.py --dir /tmp/bench-131k --shape lf-amazon-131k   # full texts
    python benchmarks/bench_prepare.py --dir /tmp/bench-131k-esc --shape lf-amazon-131k --escape-every 9

1. generate (or reuse, when ``--dir`` already holds one made with the same parameters) a synthetic
   dataset of 2,248,619 train / 970,237 test queries and 1,305,265 labels, times ``--scale``, with
   about 22 labels per query as in the real dataset (42 drawn, the rest repeats); or, with
   ``--shape lf-amazon-131k``, 294,805 / 134,835 queries and 131,073 labels with ~180-word
   descriptions (most holding an HTML entity, as product descriptions do), read as title + content;
2. time decompressing its three JSON files (zlib in Python, and ``gzip -dc > /dev/null``);
3. time ``prepare`` (fresh cache) and its peak memory;
4. time ``load_prepared`` and touching the whole train label matrix (plus decoding 10,000 texts).

Each phase runs in its own process so its peak resident memory (ru_maxrss) is its own, and
reports its CPU seconds (user + system, all threads) beside its wall time: prepare runs the
decompression, the parsers and the sha256 on threads, zlib on one, so on a busy machine the wall
ratio tends to the CPU ratio and on an idle one it can fall below it.

Where the time goes (cProfile, scale 0.05; ``benchmarks/results/prepare-*.json`` for the figures):
before, the per-record path spent it on orjson building one dict per line (~20%), pulling the
columns back out of the dicts and ``np.array`` over the flattened label lists (~25%), freeing the
dicts (~15%), encoding the texts (~7%), HTML-unescaping (~4%), waiting for the decompressor (~7%).
After (``lf_json_columns``: whole blocks checked and cut with numpy), ~60% of the parse is the
label lists (validating ``target_ind`` and ``target_rel`` byte by byte and reading the indices),
~15% cutting the texts out, ~12% decoding the texts with entities or escapes, the rest finding
quotes, keys and separators. At full size on 2 shared cores at load ~1: prepare 31.5 s -> 16.1 s
wall (6.3x -> 2.9x zlib), 33.4 -> 18.3 CPU seconds (6.7x -> 3.3x zlib's), peak RSS 1.25 -> 1.39 GB;
at load 2-5 the wall ratio was 5.9x -> 3.7x.

Then (``prepare-1.0-isal.json``): ISA-L's inflate in place of zlib's (the reader thread's 6 s of
CPU -> 2.7 s, same bytes); ``target_rel``'s lists, all "1.0" in the XC files, checked as rows of
bytes against the repeated number (they were half the items parsed one by one, and the decimal
points cost a sort); label indices read 8 digits per 64-bit word; keys compared 8 bytes at a time;
label counts in chunks (the int32 -> intp copy of 45M indices cost 0.4 s). Full size: 16.1 ->
11.0 s wall (2.9x -> 1.8x zlib), 18.3 -> 17.3 CPU seconds, peak RSS 1.39 -> 0.99 GB.

Then, on the Intel CI machine (``prepare-1.0-intel-stream*.json``): a timeline of the threads
showed no block being parsed for ~4 s of ~16: after each split the main thread joined the 45M
train label indices into one array, made a 180 MB array of ones for scipy, checked the rows and
saved, then computed the statistics, all while the parsers waited. Fresh memory is also slow to
touch on this VM (1 GB took 3.9 s the first time in a new process, 0.2 s once recycled), so
those three 180 MB arrays cost more than their copies. Now the indices go to disk block by
block, each block's rows are checked (sorted, no label twice; a block that is not is merged on
its own, 1.6 ms for 180k labels) and counted per label as they come. Blocks are ~3 MB instead
of ~12 MB (the numpy passes over a block stay in the core's 2 MB L2 more often: ~10% less
parse CPU). Full size: 14.5-22.1 s (median 1.72x zlib) -> see the README's table; 23 -> 18-19
CPU seconds; peak RSS 0.98 -> 0.30 GB. Single-threaded, the block parser reads the 977 MB
train file in 7.5 s; pyarrow.json (explicit schema) takes 9.3 s and polars.read_ndjson 13.2 s
(CPU seconds, one thread each, same blocks).

Full texts (``--shape lf-amazon-131k``, ``prepare-131k-intel*.json``): nearly every product
description holds an HTML reference, and each such text went through ``html.unescape`` alone, half
of a block's parse (1.41 s for a quarter of the train file, one thread). References closed by ';'
are now resolved once per distinct string and spliced in with numpy, and long texts are joined to
their titles row by row: 0.58-0.74 s. Full size: 6.9-8.4 s (2.66x zlib) -> 4.2-4.9 s (1.56x).
With JSON escapes every 9th word (``--escape-every 9``), decoded a column at a time instead of by
orjson text by text (a Python loop holding the GIL the other parser needs): 2.28x -> 2.16-2.28x
(``prepare-131k-escaped-intel*.json``), still over 2x.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

# The datasets' sizes (train / test queries, labels), and what a query holds: LF-AmazonTitles-1.3M
# has titles only and ~22 labels a query; LF-Amazon-131K titles and product descriptions (read as
# title + content) and ~5 labels a query. Its descriptions' length is not published; ~180 words
# makes its raw files ~1 KB a query.
SHAPES = {
    "lf-amazontitles-1.3m": {
        "n_labels": 1_305_265,
        "n_train": 2_248_619,
        "n_test": 970_237,
        "labels_per_query": 42.0,
        "query_text": "title",  # contents: synthesize's default 12 words, unread
    },
    "lf-amazon-131k": {
        "n_labels": 131_073,
        "n_train": 294_805,
        "n_test": 134_835,
        "labels_per_query": 7.0,
        "content_words": 180,
        "query_text": "title+content",
    },
}
JSON_FILES = ("trn.json.gz", "tst.json.gz", "lbl.json.gz")


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kB


def _cpu_s(who=resource.RUSAGE_SELF) -> float:
    """CPU seconds (user + system, all threads) used so far: on a shared machine, what a phase costs."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _params(args: argparse.Namespace) -> dict:
    shape = SHAPES[args.shape]
    return {
        "n_labels": max(2, round(shape["n_labels"] * args.scale)),
        "n_train": max(1, round(shape["n_train"] * args.scale)),
        "n_test": args.test if args.test is not None else max(1, round(shape["n_test"] * args.scale)),
        "seed": args.seed,
        "labels_per_query": args.labels_per_query or shape["labels_per_query"],
        "n_topics": max(2, round(shape["n_labels"] * args.scale / args.labels_per_topic)),
        **({"content_words": shape["content_words"]} if "content_words" in shape else {}),
    }


def phase_generate(folder: Path, params: dict, escape_every: int = 0) -> dict:
    from xmcbench.data.synth import synthesize

    raw = folder / "raw"
    stamp = folder / "params.json"
    stamped = {**params, "escape_every": escape_every} if escape_every else params
    if stamp.exists() and json.loads(stamp.read_text()) == stamped and all((raw / f).exists() for f in JSON_FILES):
        return {"generated": False}
    shutil.rmtree(raw, ignore_errors=True)
    start = time.perf_counter()
    synthesize(raw, **params)
    if escape_every:
        _add_escapes(raw, escape_every)
    seconds = time.perf_counter() - start
    stamp.write_text(json.dumps(stamped))
    return {"generated": True, "generate_s": seconds, "generate_peak_gb": _peak_gb()}


def _add_escapes(raw: Path, every: int) -> None:
    """Rewrite the queries' contents with JSON escapes, as full-text articles hold them: after every
    ``every``-th word an escaped newline, and in place of every fifth of those an escaped quote and
    an escaped non-ASCII letter (``\\"x\\u00e9``)."""
    import gzip

    for name in ("trn.json.gz", "tst.json.gz"):
        part = raw / f"{name}.part"
        with gzip.open(raw / name, "rb") as f, gzip.open(part, "wb", compresslevel=6) as g:
            for line in f:
                head, key, tail = line.partition(b'"content":"')  # synthesize writes compact JSON
                end = tail.rindex(b'"', 0, tail.index(b'"target_ind"') - 1)  # the content's closing quote
                words = tail[:end].split(b" ")
                for j in range(0, len(words), every):
                    words[j] += b"\\n" if j % (5 * every) else b'\\"x\\u00e9'
                g.write(head + key + b" ".join(words) + tail[end:])
        part.replace(raw / name)


def phase_decompress(folder: Path) -> dict:
    raw = folder / "raw"
    python_s, python_cpu, uncompressed = _inflate_all(raw, zlib)
    isal = _time_isal(raw)
    start, cpu = time.perf_counter(), _cpu_s(resource.RUSAGE_CHILDREN)
    subprocess.run(f"gzip -dc {' '.join(str(raw / n) for n in JSON_FILES)} > /dev/null", shell=True, check=True)
    gzip_s, gzip_cpu = time.perf_counter() - start, _cpu_s(resource.RUSAGE_CHILDREN) - cpu
    return {
        "decompress_zlib_s": python_s,
        "decompress_zlib_cpu_s": python_cpu,
        "decompress_gzip_cli_s": gzip_s,
        "decompress_gzip_cli_cpu_s": gzip_cpu,
        "compressed_mb": sum((raw / n).stat().st_size for n in JSON_FILES) / 1e6,
        "uncompressed_mb": uncompressed / 1e6,
        **isal,
    }


def _inflate_all(raw: Path, module) -> tuple[float, float, int]:
    """(seconds, CPU seconds, bytes out) of inflating the JSON files with ``module`` (zlib's API)."""
    start, cpu = time.perf_counter(), _cpu_s()
    uncompressed = 0
    for name in JSON_FILES:
        inflater = module.decompressobj(wbits=31)
        with open(raw / name, "rb") as f:
            for block in iter(lambda: f.read(4 << 20), b""):
                uncompressed += len(inflater.decompress(block))
    return time.perf_counter() - start, _cpu_s() - cpu, uncompressed


def _time_isal(raw: Path) -> dict:
    """ISA-L's inflate (what prepare decompresses with when isal is installed), beside the zlib floor."""
    try:
        from isal import isal_zlib
    except ImportError:
        return {"decompress_isal_s": None}
    seconds, cpu, _ = _inflate_all(raw, isal_zlib)
    return {"decompress_isal_s": seconds, "decompress_isal_cpu_s": cpu}


def phase_prepare(folder: Path, params: dict, query_text: str) -> dict:
    from xmcbench.data.prepared import prepare
    from xmcbench.data.synth import make_synthetic_spec

    spec = make_synthetic_spec("bench", query_text=query_text, **params)
    out = folder / "prepared"
    shutil.rmtree(out, ignore_errors=True)
    start, cpu = time.perf_counter(), _cpu_s()
    prepare(spec, folder / "raw", out, progress=False)
    seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu
    size = sum(p.stat().st_size for p in out.iterdir())
    return {"prepare_s": seconds, "prepare_cpu_s": cpu, "prepare_peak_gb": _peak_gb(), "cache_mb": size / 1e6}


def phase_load(folder: Path) -> dict:
    from xmcbench.data.prepared import load_prepared

    start = time.perf_counter()
    ds = load_prepared(folder / "prepared")
    labels = ds.labels("train")
    opened = time.perf_counter() - start
    # touch every page of the label matrix: per-label counts over all train positives
    counts = labels.sum(axis=0)
    touched = time.perf_counter() - start
    texts = ds.query_texts("train")[:10_000]
    decoded = time.perf_counter() - start
    return {
        "load_s": opened,
        "load_and_touch_labels_s": touched,
        "load_touch_decode_10k_s": decoded,
        "train_positives": int(labels.nnz),
        "avg_labels_per_query": labels.nnz / labels.shape[0],
        "max_label_count": int(counts.max()),
        "decoded": len(texts),
        "load_peak_gb": _peak_gb(),
    }


PHASES = {"generate": phase_generate, "decompress": phase_decompress, "prepare": phase_prepare, "load": phase_load}


def _run_phase(name: str, args: argparse.Namespace) -> dict:
    command = [
        sys.executable,
        __file__,
        "--dir",
        str(args.dir),
        "--shape",
        args.shape,
        "--scale",
        str(args.scale),
        "--seed",
        str(args.seed),
        "--labels-per-query",
        str(args.labels_per_query or SHAPES[args.shape]["labels_per_query"]),
        "--labels-per-topic",
        str(args.labels_per_topic),
        "--escape-every",
        str(args.escape_every),
        "--phase",
        name,
    ]
    if args.test is not None:
        command += ["--test", str(args.test)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def best_of_turns(decompress, prepare, args: argparse.Namespace) -> dict:
    """The floors and prepare, run in turns ``--repeat`` times: each floor's best time, every run's
    seconds, the CPU seconds of the fastest zlib run and of the fastest prepare (each its own run's),
    and the largest peak memory of any prepare.

    A machine's speed drifts over minutes (a neighbour on the host): timed in turns, the floor and
    prepare see the same moments, as the runner's other rows do.
    """
    floors, prepares = [], []
    for i in range(args.repeat):
        floors.append(decompress())
        prepares.append(prepare())
        print(f"round {i + 1}/{args.repeat}: prepare {prepares[-1]['prepare_s']:.2f} s", file=sys.stderr)
    fastest_floor = min(floors, key=lambda run: run["decompress_zlib_s"])
    walls = [k for k, v in fastest_floor.items() if k.endswith("_s") and not k.endswith("_cpu_s") and v is not None]
    fastest = min(prepares, key=lambda run: run["prepare_s"])
    return {
        **fastest_floor,
        **{key: min(run[key] for run in floors) for key in walls},  # isal: None when not installed
        **fastest,
        "prepare_peak_gb": max(run["prepare_peak_gb"] for run in prepares),
        "runs": {
            "prepare_s": [run["prepare_s"] for run in prepares],
            "decompress_zlib_s": [run["decompress_zlib_s"] for run in floors],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="folder for the synthetic raw files and cache")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default="lf-amazontitles-1.3m", help="which dataset's size and texts"
    )
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the shape's size")
    parser.add_argument("--test", type=int, default=None, help="test queries (default: the shape's x scale)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeat", type=int, default=1, help="time the floors and prepare this many times, in turns (best of each)"
    )
    parser.add_argument(
        "--labels-per-query",
        type=float,
        default=None,
        help="mean labels drawn per query (default: the shape's; 42 leaves ~22 after de-duplication, "
        "LF-AmazonTitles-1.3M's 22.20)",
    )
    parser.add_argument("--labels-per-topic", type=int, default=400, help="labels per synthetic topic")
    parser.add_argument(
        "--escape-every",
        type=int,
        default=0,
        help="JSON escapes in the contents: after every N-th word (0: none; 9: as dense as article text's newlines and quotes)",
    )
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    params = _params(args)
    args.dir.mkdir(parents=True, exist_ok=True)

    if args.phase:  # child process: one phase, JSON on the last line
        fn = PHASES[args.phase]
        if args.phase == "generate":
            result = fn(args.dir, params, args.escape_every)
        elif args.phase == "prepare":
            result = fn(args.dir, params, SHAPES[args.shape]["query_text"])
        else:
            result = fn(args.dir)
        print(json.dumps(result))
        return

    results = {
        "shape": args.shape,
        "query_text": SHAPES[args.shape]["query_text"],
        "escape_every": args.escape_every,
        "params": params,
    }
    results.update(_run_phase("generate", args))
    results.update(best_of_turns(lambda: _run_phase("decompress", args), lambda: _run_phase("prepare", args), args))
    results.update(_run_phase("load", args))
    results["prepare_over_decompress"] = results["prepare_s"] / results["decompress_zlib_s"]
    results["prepare_cpu_over_decompress_cpu"] = results["prepare_cpu_s"] / results["decompress_zlib_cpu_s"]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
