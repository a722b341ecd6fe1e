"""``xmcbench evaluate``: files and datasets in, the library's numbers out, clear errors."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.data.formats.xc_sparse import read_filter_file, save_sparse
from xmcbench.metrics import evaluate, evaluate_with_ci, inv_propensity

runner = CliRunner()


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    truth = sp.csr_matrix((rng.random((60, 25)) < 0.12).astype(np.float32))
    pred = sp.random(60, 25, density=0.3, format="csr", random_state=1, dtype=np.float32)
    pred.data = np.round(pred.data, 1)  # ties
    train = sp.csr_matrix((rng.random((300, 25)) < rng.random(25) * 0.3).astype(np.float32))
    save_sparse(tmp_path / "pred.npz", pred)
    save_sparse(tmp_path / "pred.txt", pred)
    save_sparse(tmp_path / "tst.txt", truth)
    save_sparse(tmp_path / "trn.npz", train)
    (tmp_path / "filter.txt").write_text("0 1\n3 4\n7 0\n")
    return {"dir": tmp_path, "pred": pred, "truth": truth, "train": train}


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_matches_library(files):
    d = files["dir"]
    got = _json(
        runner.invoke(app, ["evaluate", "-p", str(d / "pred.npz"), "-t", str(d / "tst.txt"), "--format", "json"])
    )
    expected = evaluate(files["pred"], files["truth"])
    assert got == {name: round(value, 4) for name, value in expected.items()}


def test_text_predictions_filter_and_propensity_defaults(files):
    d = files["dir"]
    args = [
        "evaluate",
        "-p",
        str(d / "pred.txt"),
        "-t",
        str(d / "tst.txt"),
        "--train-truth",
        str(d / "trn.npz"),
        "--filter",
        str(d / "filter.txt"),
        "--k",
        "1,5,10",
        "--format",
        "json",
    ]
    got = _json(runner.invoke(app, args))
    flt = read_filter_file(d / "filter.txt", files["truth"].shape)
    w = inv_propensity(files["train"], 0.55, 1.5)  # the documented defaults
    expected = evaluate(files["pred"], files["truth"], k=(1, 5, 10), inv_propensity=w, filter=flt)
    assert got == {name: round(value, 4) for name, value in expected.items()}
    assert "PSP@10" in got and "PSnDCG@1" in got

    got_ab = _json(runner.invoke(app, args + ["--A", "0.6", "--B", "2.6"]))
    w = inv_propensity(files["train"], 0.6, 2.6)
    expected = evaluate(files["pred"], files["truth"], k=(1, 5, 10), inv_propensity=w, filter=flt)
    assert got_ab == {name: round(value, 4) for name, value in expected.items()}


def test_rich_table_two_decimals(files):
    d = files["dir"]
    result = runner.invoke(app, ["evaluate", "-p", str(d / "pred.npz"), "-t", str(d / "tst.txt"), "--k", "1,3"])
    assert result.exit_code == 0, result.output
    expected = evaluate(files["pred"], files["truth"], k=(1, 3))
    for name in ("P@1", "nDCG@3", "R@3"):
        assert f"{expected[name]:.2f}" in result.output
    assert "60 queries" in result.output


def test_markdown_and_ci(files):
    d = files["dir"]
    base = ["evaluate", "-p", str(d / "pred.npz"), "-t", str(d / "tst.txt"), "--k", "1"]
    md = runner.invoke(app, base + ["--format", "markdown"])
    assert md.exit_code == 0, md.output
    assert "| metric | @1 |" in md.output and "| P |" in md.output
    got = _json(runner.invoke(app, base + ["--format", "json", "--ci", "--n-boot", "100", "--seed", "3"]))
    expected = evaluate_with_ci(files["pred"], files["truth"], k=1, n_boot=100, seed=3)
    assert got == {name: [round(x, 4) for x in v] for name, v in expected.items()}


def test_dataset_option(synth_dataset, tmp_path):
    from xmcbench.data import load_dataset

    ds = load_dataset("synth-test", progress=False)
    truth = ds.labels("test")
    rng = np.random.default_rng(1)
    pred = (truth * 2 + sp.random(*truth.shape, density=0.05, random_state=2, format="csr")).tocsr()
    pred.data += rng.random(pred.nnz).astype(pred.dtype) * 0.01
    save_sparse(tmp_path / "pred.npz", pred)
    got = _json(
        runner.invoke(
            app, ["evaluate", "-p", str(tmp_path / "pred.npz"), "--dataset", "synth-test", "--format", "json"]
        )
    )
    w = inv_propensity(ds.labels("train"), ds.propensity_a, ds.propensity_b)
    expected = evaluate(pred, truth, inv_propensity=w, filter=ds.filter("test"))
    assert got == {name: round(value, 4) for name, value in expected.items()}

    clash = runner.invoke(
        app, ["evaluate", "-p", str(tmp_path / "pred.npz"), "--dataset", "synth-test", "-t", str(tmp_path / "pred.npz")]
    )
    assert clash.exit_code == 2 and "--dataset replaces --truth" in clash.output  # the command line: usage


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give the ground truth"),
        (["-t", "{d}/trn.npz"], "shape (60, 25) but the ground truth has shape (300, 25)"),
        (["-t", "{d}/tst.txt", "--A", "0.6"], "need training labels"),
        (["-t", "{d}/tst.txt", "--k", "0,1"], "positive integers"),
        (["-t", "{d}/missing.txt"], "not found"),
        (["-t", "{d}/tst.txt", "--filter", "{d}/badfilter.txt"], "out of range"),
    ],
)
def test_errors(files, extra, message):
    d = files["dir"]
    (d / "badfilter.txt").write_text("0 1\n99 2\n")
    args = ["evaluate", "-p", str(d / "pred.npz")] + [a.format(d=d) for a in extra]
    result = runner.invoke(app, args)
    assert result.exit_code == (2 if not extra else 1)  # no ground truth at all: a usage error
    assert message in " ".join(result.output.split())


@pytest.mark.parametrize("ci", [False, True])
def test_threads_reach_the_ranking_and_leave_the_scores_alone(files, monkeypatch, ci):
    module = importlib.import_module("xmcbench.metrics.evaluate")  # the package re-exports a function of that name

    asked, real = [], module.rank_truth_in_blocks
    monkeypatch.setattr(module, "rank_truth_in_blocks", lambda *a, **kw: asked.append(kw["blocks"]) or real(*a, **kw))
    d = files["dir"]
    base = ["evaluate", "-p", str(d / "pred.npz"), "-t", str(d / "tst.txt"), "--format", "json"]
    base += ["--ci", "--n-boot", "100"] if ci else []
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one = _json(runner.invoke(app, base))
    three = _json(runner.invoke(app, [*base, "--threads", "3"]))
    assert asked == [1, 3] and one == three
    refused = runner.invoke(app, [*base, "--threads", "0"])
    assert refused.exit_code == 2 and "--threads" in refused.output
