"""``xmcbench site``: every page loads in headless Chromium with no console errors; screenshots are checked.

Skips cleanly where Chromium is absent (.ci/run installs Debian's ``chromium``). Set
``XMCBENCH_SITE_SHOTS=DIR`` to keep the screenshots.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.store import Store
from xmcbench.store.record import new_record, write_record

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)"),
    pytest.mark.slow,
]
SMOKE = "synth-smoke"


def _smoke_run(root: Path, run_id: str, method: str, p1: float, dataset: str = SMOKE, losses=(), gpus=0) -> Path:
    """A run record as the smoke recipes leave it (scores with CIs, compute, accounting, train_log.jsonl)."""
    record = new_record(
        run_id,
        task={
            "dataset": dataset,
            "dataset_version": "v1",
            "split": "test",
            "n_queries": 1000,
            "n_queries_evaluated": 1000,
            "n_labels": 2000,
            "propensity_a": 0.55,
            "propensity_b": 1.5,
            "supervision": "full",
        },
        model={"method": method, "encoder": "all-MiniLM-L6-v2"},
    )
    record["status"] = "finished"
    record["scores"] = [
        {"name": "P@1", "value": p1, "ci_lo": p1 - 1.1, "ci_hi": p1 + 0.9},
        {"name": "P@5", "value": p1 / 3, "ci_lo": p1 / 3 - 0.5, "ci_hi": p1 / 3 + 0.5},
    ]
    record["compute"] = (
        {"device_type": "cuda", "device_names": ["NVIDIA H100"] * gpus, "device_count": gpus, "gpu_hours": 0.4 * gpus}
        if gpus
        else {"device_type": "cpu", "device_names": ["cpu"], "device_count": 1, "gpu_hours": 0.0}
    )
    record["accounting"] = {"batch_size": 64, "pool_size_mean": 320.0, "pool_size_max": 330} if losses else {}
    write_record(root / run_id, record)
    with open(root / run_id / "train_log.jsonl", "w") as fh:
        for epoch, loss in enumerate(losses, 1):
            fh.write(
                json.dumps(
                    {
                        "epoch": epoch,
                        "epochs": len(losses),
                        "loss": loss,
                        "lr": 2e-4,
                        "queries_per_s": 40.0,
                        "pool_size": 320.0,
                    }
                )
                + "\n"
            )
    return root / run_id


REAL = "synth-tiny"


def _real_runs(tmp: Path, encoder: str, db: Path) -> None:
    """Real runs, as `xmcbench run` makes them: TF-IDF and a 3-epoch DEXML on the tiny encoder (seconds on CPU)."""
    from xmcbench.run import load_recipe, run_recipe

    for name, method, epochs in (
        ("tfidf", "{name: tfidf}", 0),
        ("dexml", "{name: dexml, regime: hard_negatives, refresh_every: 1, hard_negative_start_epoch: 0}", 3),
    ):
        path = tmp / f"{name}.yaml"
        path.write_text(
            f"name: site-{name}\n"
            f"dataset: {{name: {REAL}, synthetic: {{labels: 60, train: 300, test: 60, seed: 1}}}}\n"
            f"method: {method}\n"
            f"encoder: {{name: '{encoder}', max_length: 16}}\n"
            f"training: {{epochs: {epochs}, batch_size: 32, lr: 0.001, warmup_ratio: 0.0}}\n"
            "evaluation: {k: [1, 5], top_k: 10, bootstrap: 100}\n"
            "hardware: {devices: cpu}\n"
        )
        result = run_recipe(load_recipe(path), runs_dir=tmp / "real-runs", db=db, progress=False)
        assert result.record["status"] == "finished"


@pytest.fixture(scope="module")
def site(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("site")
    runs = tmp / "runs"
    db = tmp / "x.duckdb"
    with pytest.MonkeyPatch.context() as mp:  # module scope: the per-test home is not set up yet
        mp.setenv("XMCBENCH_HOME", str(tmp / "home"))
        _real_runs(tmp, tiny_encoder_dir, db)
    _smoke_run(runs, "20261123-101500-tfidf-synth-smoke-aaaaaa", "tfidf", 46.3)
    _smoke_run(runs, "20261123-102000-dexml-synth-smoke-bbbbbb", "dexml", 41.5, losses=[3.2, 2.1, 1.7])
    _smoke_run(runs, "20261123-103000-unidec-synth-smoke-cccccc", "unidec", 38.0, losses=[2.5, 2.0])
    # a reproduced DEXML beside the published one, with GPU-hours and a label pool
    _smoke_run(
        runs,
        "20261123-104000-dexml-lf-amazontitles-131k-dddddd",
        "dexml",
        41.0,
        dataset="LF-AmazonTitles-131K",
        losses=[4.0, 3.0, 2.5, 2.2],
        gpus=2,
    )
    with Store.open(db) as store:
        for run_dir in sorted(runs.iterdir()):
            store.ingest_record(json.loads((run_dir / "record.json").read_text()), run_dir)
    out = tmp / "out"
    result = CliRunner().invoke(app, ["site", "--out", str(out), "--db", str(db)])
    assert result.exit_code == 0, result.output
    return out


def _chromium(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="xmcbench-chromium-")
    try:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-extensions",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def _console_errors(stderr: str) -> list[str]:
    return [
        line
        for line in stderr.splitlines()
        if "CONSOLE" in line and ("Uncaught" in line or "rror" in line.split("CONSOLE", 1)[1])
    ]


def _png_pixels(path: Path):
    """(width, height, (H*W, 3) uint8 pixels) of an 8-bit non-interlaced RGB(A) PNG, as Chromium writes them."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, width * channels + 1)
    out = np.zeros((height, width * channels), dtype=np.uint8)
    prev = np.zeros(width * channels, dtype=np.uint8)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:]
        if f == 0:
            row = line.copy()
        elif f == 1:  # Sub: running sum per channel (uint8 wraps modulo 256)
            row = np.cumsum(line.reshape(width, channels), axis=0, dtype=np.uint8).reshape(-1)
        elif f == 2:  # Up
            row = line + prev
        else:  # Average / Paeth: sequential along the row
            row = bytearray(line.tobytes())
            up = prev.tobytes()
            for i in range(len(row)):
                a = row[i - channels] if i >= channels else 0
                b = up[i]
                if f == 3:
                    row[i] = (row[i] + (a + b) // 2) & 255
                else:
                    c = up[i - channels] if i >= channels else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            row = np.frombuffer(bytes(row), dtype=np.uint8)
        out[y] = row
        prev = row
    return width, height, out.reshape(height, width, channels)[:, :, :3].reshape(-1, 3)


def _near(pixels, rgb: tuple[int, int, int], tol: int = 40) -> int:
    """How many pixels are within ``tol`` of ``rgb`` in every channel."""
    return int((np.abs(pixels.astype(np.int16) - np.array(rgb, dtype=np.int16)) <= tol).all(axis=1).sum())


def test_every_page_loads_without_console_errors(site):
    pages = sorted(site.glob("*.html"))
    assert site / "index.html" in pages and site / "synth-smoke.html" in pages and len(pages) >= 4
    real = (site / f"{REAL}.html").read_text()
    # the real DEXML run: its 3 epochs' loss curve, and both CPU runs placed at their wall-clock hours
    assert real.count("<title>epoch ") == 3 and "CPU wall-clock hours" in real
    for page in pages:
        text = page.read_text()
        assert (
            "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
        )  # no CDN
        result = _chromium("--dump-dom", page.as_uri())
        assert result.returncode == 0, result.stderr[-2000:]
        dom = result.stdout
        assert 'data-ready="1"' in dom, f"{page.name}: the page's script did not finish"
        assert 'id="js-errors"' not in dom, f"{page.name}: {dom[dom.find('js-errors') :][:300]}"
        assert not _console_errors(result.stderr), f"{page.name}: {_console_errors(result.stderr)}"
        assert "<table" in dom and "<svg" in dom


def test_screenshots_show_table_and_plots(site):
    keep = os.environ.get("XMCBENCH_SITE_SHOTS")
    shots = Path(keep) if keep else site
    shots.mkdir(parents=True, exist_ok=True)
    for page, size in (
        ("index.html", "1280,900"),
        ("LF-AmazonTitles-131K.html", "1280,1400"),
        (f"{REAL}.html", "1280,1400"),
    ):
        png = shots / (page.replace(".html", ".png"))
        result = _chromium(
            f"--screenshot={png}",
            f"--window-size={size}",
            "--hide-scrollbars",
            "--virtual-time-budget=3000",
            (site / page).as_uri(),
        )  # painted in full first
        assert result.returncode == 0 and png.is_file(), result.stderr[-2000:]
        width, height, pixels = _png_pixels(png)
        assert (width, height) == tuple(int(v) for v in size.split(","))
        white = _near(pixels, (255, 255, 255), 0)
        assert white < 0.97 * len(pixels), f"{png} is (almost) empty"
        header = _near(pixels, (0xF1, 0xF3, 0xF5), 3)  # the table's header row
        assert header > 2000, f"{png}: no table header visible"
        reproduced = _near(pixels, (0xD9, 0x48, 0x0F), 30)  # reproduced points / loss curves
        bars = _near(pixels, (0x2F, 0x9E, 0x44), 30) + _near(pixels, (0xE0, 0x31, 0x31), 30)
        assert reproduced > 30 or bars > 200, f"{png}: no plot marks visible"
