"""The wheel carries the recipes: built, installed in a fresh venv, ``xmcbench recipes list`` works from anywhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def test_wheel_ships_recipes_and_runs_recipes_list(tmp_path):
    # build from a copy of the tree (a build writes build/ and *.egg-info next to the sources)
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        symlinks=True,
        # caches other test workers may be writing (hypothesis renames files in .hypothesis mid-copy)
        ignore=shutil.ignore_patterns(
            ".git",
            "build",
            "*.egg-info",
            "__pycache__",
            ".pytest_cache",
            "tests",
            ".hypothesis",
            ".*_cache",
            ".benchmarks",
        ),
    )
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
        cwd=tmp_path,
        timeout=180,
    )
    wheel = next(dist.glob("xmcbench-*.whl"))

    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    assert "xmcbench/recipes/smoke/tfidf.yaml" in names and "xmcbench/recipes/base/synthetic-smoke.yaml" in names
    assert "xmcbench/recipes/smoke/timings.json" in names  # what orders a first smoke sweep from the wheel
    assert "xmcbench/leaderboard_data/dexml.yaml" in names

    # a fresh venv; the dependencies come from this interpreter's site-packages (a plain path entry,
    # so this checkout's editable install is not seen)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)]
        if _pip_has_python_option()
        else [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--target",
            _site_packages(python),
            str(wheel),
        ],
        cwd=tmp_path,
    )
    site = Path(_site_packages(python))
    (site / "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XMCBENCH_RECIPES_DIR")}
    env["XMCBENCH_HOME"] = str(tmp_path / "home")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run(
        [
            str(python),
            "-c",
            "import xmcbench, xmcbench.run.smoke as s; print(xmcbench.__file__); print(s.default_smoke_dir())",
        ],
        cwd=elsewhere,
        env=env,
    ).stdout.split()
    assert where[0].startswith(str(site)) and where[1].startswith(str(site))
    listed = json.loads(
        _run([str(python), "-m", "xmcbench", "recipes", "list", "--format", "json"], cwd=elsewhere, env=env).stdout
    )
    names = {r["name"] for r in listed}
    assert {"smoke/tfidf", "smoke/dexml", "tfidf"} <= names and not any(n.startswith("base/") for n in names)
    assert all(r["path"].startswith(str(site)) for r in listed)


def _pip_has_python_option() -> bool:
    import pip

    return tuple(int(p) for p in pip.__version__.split(".")[:2]) >= (22, 3)


def _site_packages(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
