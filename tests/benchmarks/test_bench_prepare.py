"""``benchmarks/bench_prepare.py``: the floors and prepare timed in turns, and the full-text shape."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_prepare import SHAPES, best_of_turns

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_prepare.py"


def test_floors_and_prepare_run_in_turns_and_each_keeps_its_best():
    calls = []
    floors = iter(
        [
            {
                "decompress_zlib_s": 3.0,
                "decompress_zlib_cpu_s": 2.9,
                "decompress_gzip_cli_s": 1.5,
                "decompress_isal_s": None,
            },
            {
                "decompress_zlib_s": 2.0,
                "decompress_zlib_cpu_s": 1.9,
                "decompress_gzip_cli_s": 1.6,
                "decompress_isal_s": None,
            },
        ]
    )
    prepares = iter(
        [
            {"prepare_s": 4.0, "prepare_cpu_s": 7.0, "prepare_peak_gb": 0.3},
            {"prepare_s": 5.0, "prepare_cpu_s": 6.0, "prepare_peak_gb": 0.4},
        ]
    )

    def decompress():
        calls.append("decompress")
        return next(floors)

    def prepare():
        calls.append("prepare")
        return next(prepares)

    best = best_of_turns(decompress, prepare, argparse.Namespace(repeat=2))
    assert calls == ["decompress", "prepare", "decompress", "prepare"]
    assert best["decompress_zlib_s"] == 2.0 and best["decompress_isal_s"] is None  # isal not installed: kept as None
    assert best["decompress_gzip_cli_s"] == 1.5  # each floor's best, whichever run it came from
    assert best["decompress_zlib_cpu_s"] == 1.9  # the fastest zlib run's own CPU seconds
    assert best["prepare_s"] == 4.0 and best["prepare_cpu_s"] == 7.0  # the fastest run's own CPU seconds
    assert best["prepare_peak_gb"] == 0.4  # the largest peak of any run
    assert best["runs"] == {"prepare_s": [4.0, 5.0], "decompress_zlib_s": [3.0, 2.0]}


def test_the_full_text_shape_prepares_titles_with_their_descriptions_and_escapes(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--dir",
            str(tmp_path),
            "--shape",
            "lf-amazon-131k",
            "--scale",
            "0.001",
            "--repeat",
            "2",
            "--escape-every",
            "3",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout[done.stdout.index("{") :])
    assert result["shape"] == "lf-amazon-131k" and result["query_text"] == "title+content"
    assert result["params"]["content_words"] == SHAPES["lf-amazon-131k"]["content_words"]
    assert len(result["runs"]["prepare_s"]) == len(result["runs"]["decompress_zlib_s"]) == 2
    assert result["prepare_s"] == min(result["runs"]["prepare_s"])
    from xmcbench.data.prepared import load_prepared

    texts = load_prepared(tmp_path / "prepared").query_texts("train")[:50]
    assert sum(len(t.split()) for t in texts) / len(texts) > 100  # ~180 words of description each
    assert all("\n" in t and '"x\u00e9' in t for t in texts if len(t.split()) > 20)  # the escapes, decoded
