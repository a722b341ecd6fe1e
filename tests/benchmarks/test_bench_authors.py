"""``benchmarks/bench_authors.py`` without the authors' checkouts (CI has none): arguments and skips.

Nothing here needs nilesh2797/DEXML or kunaldahiya/prime: a method whose checkout is missing is
skipped with its reason before any dataset or encoder is made, which is what these tests check.
"""

import json

import pytest

from benchmarks import bench_authors
from benchmarks.bench_authors import METHODS, main, parse_args, repo_commit, skip_reason, summary_lines


def test_defaults():
    args = parse_args([])
    assert args.methods == ["dexml_all", "dexml_hard", "prime"] == list(METHODS)
    assert (args.threads, args.max_length, args.labels, args.batch) == (2, 32, 1000, 128)
    assert args.dexml_repo is args.prime_repo is args.deepxml_repo is None
    assert args.steps >= 1 and args.warmup >= 0 and not args.merge


def test_arguments_are_read():
    args = parse_args(
        ["--methods", "prime", "--prime-repo", "/p", "--deepxml-repo", "/d", "--batch", "64", "--labels", "2000"]
    )
    assert args.methods == ["prime"] and (args.prime_repo, args.deepxml_repo) == ("/p", "/d")
    assert (args.batch, args.labels) == (64, 2000)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--methods", "dexml_all,nope"], "unknown methods"),
        (["--steps", "0"], "--steps >= 1"),
        (["--batch", "1"], "--batch >= 2"),
    ],
)
def test_bad_arguments_are_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_help_explains_what_it_compares(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for text in ("nilesh2797/DEXML", "kunaldahiya/prime", "deepxml-base", "--dexml-repo", "--prime-repo", "ratio"):
        assert text in out


def test_no_repo_given_skips_every_method_with_a_reason(tmp_path, capsys):
    out, home = tmp_path / "authors.json", tmp_path / "home"
    results = main(["--out", str(out), "--home", str(home)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(results))
    rows = saved["methods"]
    assert set(rows) == set(METHODS)
    assert (
        rows["dexml_all"]
        == rows["dexml_hard"]
        == {"skipped": "no --dexml-repo given: pass a checkout of nilesh2797/DEXML"}
    )
    assert rows["prime"]["skipped"].startswith("no --prime-repo given")
    assert saved["benchmark"] == "bench_authors" and saved["threads"] == 2 and saved["torch"]
    assert len(saved["commands"]) == 1
    assert not home.exists()  # nothing was built: no dataset, no encoder
    printed = capsys.readouterr().out
    assert "dexml_all: skipped: no --dexml-repo given" in printed and "prime: skipped:" in printed


def test_prime_also_needs_deepxml(tmp_path):
    (tmp_path / "prime" / "prime").mkdir(parents=True)
    (tmp_path / "prime" / "prime" / "main.py").write_text("")
    args = parse_args(["--methods", "prime", "--prime-repo", str(tmp_path / "prime")])
    reason = skip_reason("prime", args)
    assert reason.startswith("no --deepxml-repo given") and "kunaldahiya/deepxml-base" in reason


def test_a_folder_that_is_not_the_checkout_is_skipped(tmp_path):
    args = parse_args(["--dexml-repo", str(tmp_path)])
    assert skip_reason("dexml_all", args) == (
        f"--dexml-repo {tmp_path} is not a checkout of nilesh2797/DEXML (no train.py)"
    )


def test_merge_keeps_the_methods_already_measured(tmp_path):
    out = tmp_path / "authors.json"
    measured = {"ours_s_per_step": 2.0, "theirs_s_per_step": 4.0, "ratio_ours_over_theirs": 0.5}
    out.write_text(json.dumps({"methods": {"prime": measured}}))
    main(["--methods", "dexml_all", "--out", str(out), "--merge"])
    rows = json.loads(out.read_text())["methods"]
    assert rows["prime"] == measured and "skipped" in rows["dexml_all"]
    main(["--methods", "dexml_all", "--out", str(out)])  # without --merge the file is replaced
    assert set(json.loads(out.read_text())["methods"]) == {"dexml_all"}


def test_summary_lines():
    row = {
        "ours_s_per_step": 1.5,
        "theirs_s_per_step": 3.0,
        "ratio_ours_over_theirs": 0.5,
        "ratio_of_min": 0.6,
        "batch": 64,
        "labels": 1000,
        "encoder": "all-MiniLM-L6-v2",
        "seq_length": 32,
    }
    lines = summary_lines({"methods": {"dexml_all": row, "prime": {"skipped": "why"}, "dexml_hard": {"error": ["x"]}}})
    assert lines[0].startswith("dexml_all: ours 1.500 s/step, theirs 3.000 s/step, ours/theirs 0.50")
    assert lines[1:] == ["prime: skipped: why", "dexml_hard: error: x"]


def test_repo_commit(tmp_path):
    assert repo_commit(str(tmp_path), "abc123") == "abc123"
    assert repo_commit(str(tmp_path), None) is None  # not a git work tree (e.g. a `git archive` export)


def test_the_authors_code_is_not_vendored():
    from pathlib import Path

    root = Path(bench_authors.__file__).resolve().parents[1]
    for name in ("nets.py", "losses.py", "optimizer_bundles.py"):
        assert not list(root.glob(f"benchmarks/**/{name}"))
    assert not (root / "deepxml").exists() and not (root / "benchmarks" / "deepxml").exists()
