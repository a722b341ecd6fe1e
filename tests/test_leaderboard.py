"""Tests for xmcbench.leaderboard: the shipped reference files and the loader's error handling.

The spot checks below were verified by reading the papers' tables; each quotes the table line
(from the text extractions in the project's shared/papers folder, which CI does not have).
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from xmcbench.errors import DataFormatError, XmcbenchError
from xmcbench.leaderboard import (
    CANONICAL_DATASETS,
    ENV_DIR,
    PAPERS,
    ReferenceRow,
    load_reference_file,
    load_reference_files,
    load_reference_results,
    reference_dir,
)
from xmcbench.metrics.names import is_metric_name


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(ENV_DIR, raising=False)


@pytest.fixture(scope="module")
def rows() -> list[ReferenceRow]:
    return load_reference_results()


def values_by_k(row: ReferenceRow, family: str) -> list[float]:
    """The row's values of one metric family, in increasing k."""
    pairs = [(int(m.split("@")[1]), v) for m, v in row.metrics.items() if m.split("@")[0] == family]
    return [v for _, v in sorted(pairs)]


def find(rows, paper, table, dataset, method, variant=None, setting=None) -> ReferenceRow:
    hits = [
        r
        for r in rows
        if (r.paper, r.table, r.dataset, r.method) == (paper, table, dataset, method)
        and r.variant == variant
        and (setting is None or r.setting == setting)
    ]
    assert len(hits) == 1, f"expected one row, found {len(hits)}: {hits}"
    return hits[0]


# ------------------------------------------------------------------------------ shipped files


def test_every_paper_has_a_file_that_validates():
    files = load_reference_files()
    assert sorted(f.paper.id for f in files) == sorted(PAPERS)
    for f in files:
        assert f.rows, f.paper.id
        assert {r.table for r in f.rows} == set(f.tables), f"{f.paper.id}: caption without rows"


def test_row_counts_per_paper(rows):
    # Counts of the transcription (see leaderboard/README.md); a change here must be deliberate.
    assert Counter(r.paper for r in rows) == {
        "dexml": 46,
        "prime": 102,
        "unidec": 43,
        "maclr": 94,
        "lmtx": 29,
    }


def test_dataset_names_are_canonical(rows):
    assert {r.dataset for r in rows} <= set(CANONICAL_DATASETS)
    assert {r.dataset for r in rows if r.paper == "dexml"} == {
        "EURLex-4K",
        "LF-AmazonTitles-131K",
        "LF-Wikipedia-500K",
        "LF-AmazonTitles-1.3M",
    }
    assert {r.dataset for r in rows if r.paper == "maclr"} == {
        "LF-Amazon-131K",
        "LF-WikiSeeAlso-320K",
        "LF-Wikipedia-500K",
    }


def test_metric_names_and_values(rows):
    for r in rows:
        assert r.metrics, r
        for name, value in r.metrics.items():
            assert is_metric_name(name), (r.key, name)
            assert 0.0 <= value <= 100.0, (r.key, name, value)


def test_no_duplicate_rows(rows):
    keys = Counter(r.key for r in rows)
    assert [k for k, n in keys.items() if n > 1] == []


def test_recall_never_decreases_with_k(rows):
    # Catches a column shifted during transcription: R@k is monotone in k by definition.
    for r in rows:
        recall = values_by_k(r, "R")
        assert recall == sorted(recall), r.key


def test_precision_rarely_increases_with_k(rows):
    # P@k usually falls with k; the two rows where it does not are printed that way.
    rising = set()
    for r in rows:
        p = values_by_k(r, "P")
        if p != sorted(p, reverse=True):
            rising.add((r.paper, r.table, r.dataset, r.method))
    assert rising == {
        ("maclr", "Table 1", "LF-Amazon-131K", "XR-Linear"),  # 'XR-Linear 7.56 7.84 7.30 ...'
        ("lmtx", "Table 3", "EURLex-4K", "ICXML"),  # 'ICXML (w/o reranking) 3.2 2.33 2.56 ...'
    }


def test_settings(rows):
    assert Counter(r.setting for r in rows) == {
        "full": 191,
        "zero-shot": 53,
        "few-shot-1%": 21,
        "few-shot-5%": 21,
        "few-shot-1%-pairs": 14,
        "few-shot-5%-pairs": 14,
    }
    assert {r.paper for r in rows if r.setting != "full"} == {"maclr", "lmtx"}


# ------------------------------------------------------------------------------- spot checks


def test_spot_checks_dexml(rows):
    # Table 1: "DecoupledSoftmax DEXML 85.78 50.53 77.11 58.97 58.40 45.46 54.30 36.58"
    wiki = find(rows, "dexml", "Table 1", "LF-Wikipedia-500K", "DEXML", "DecoupledSoftmax")
    assert wiki.metrics == {"P@1": 85.78, "P@5": 50.53, "nDCG@5": 77.11, "PSP@5": 58.97}
    amazon = find(rows, "dexml", "Table 1", "LF-AmazonTitles-1.3M", "DEXML", "DecoupledSoftmax")
    assert amazon.metrics["PSP@5"] == 36.58
    # Table 9: 16 GPUs, 66 hours on LF-AmazonTitles-1.3M; Table 7: batch_size 8192.
    assert (amazon.gpus, amazon.train_time_hours, amazon.batch_size) == (16, 66, 8192)
    assert amazon.gpu_hours == 16 * 66
    # Table 2: "XR-Transformer×3 88.41 63.18 - - 38.10 18.32 40.71 39.59"
    xrt = find(rows, "dexml", "Table 2", "EURLex-4K", "XR-Transformer", "×3 ensemble")
    assert xrt.metrics == {"P@1": 88.41, "P@5": 63.18}
    # Table 2: "NGAME DE - - - - 42.61 20.69 - 48.71"
    ngame_de = find(rows, "dexml", "Table 2", "LF-AmazonTitles-131K", "NGAME", "DE (encoder only)")
    assert ngame_de.metrics == {"P@1": 42.61, "P@5": 20.69, "PSP@5": 48.71}
    # Table 3: "2048 10 ∼ 22528 84.77 50.31 75.52 90.29"
    hard = find(rows, "dexml", "Table 3", "LF-Wikipedia-500K", "DEXML", "DecoupledSoftmax, 10 hard negatives per query")
    assert hard.metrics == {"P@1": 84.77, "P@5": 50.31, "R@10": 75.52, "R@100": 90.29}
    assert (hard.batch_size, hard.label_pool, hard.label_pool_count) == (2048, "~22528", 22528)


def test_spot_checks_prime(rows):
    # Table 2 (LF-AmazonTitles-1.3M): "| PRIME | 58.58 | 50.83 | 45.44 | 39.07 |"
    prime = find(rows, "prime", "Table 2", "LF-AmazonTitles-1.3M", "PRIME")
    assert prime.metrics == {"P@1": 58.58, "P@3": 50.83, "P@5": 45.44, "PSP@5": 39.07}
    # Table 3 (LF-WikiTitles-500K): "| PRIME | 46.33 | 25.98 | 18.09 | 24.03 |"
    titles = find(rows, "prime", "Table 3", "LF-WikiTitles-500K", "PRIME")
    assert titles.metrics["P@1"] == 46.33 and titles.batch_size == 3200  # Table 10
    # Table 4 (LF-Wikipedia-500K): "| OAK (θ, W) ♢ | 85.23 | 50.79 | 45.28 | 60.80 |"
    oak = find(rows, "prime", "Table 4", "LF-Wikipedia-500K", "OAK", "(θ, W)")
    assert oak.metrics == {"P@1": 85.23, "P@5": 50.79, "PSP@1": 45.28, "PSP@5": 60.80}
    # Table 8: "| Renée (W) ◆ | 48.05 | 23.26 | 40.11 | 53.67 | 56.04 | 45.32 | 28.54 | 36.14 | ..."
    renee = find(rows, "prime", "Table 8", "LF-Amazon-131K", "Renée", "(W)")
    assert renee.metrics == {"P@1": 48.05, "P@5": 23.26, "PSP@1": 40.11, "PSP@5": 53.67}
    # Table 5: "| PRIME | 3200 | ~ 6.4K | 58.58 | 39.07 |"
    budget = find(rows, "prime", "Table 5", "LF-AmazonTitles-1.3M", "PRIME", "negative pool ~6.4K")
    assert (budget.batch_size, budget.label_pool, budget.label_pool_count) == (3200, "~6.4K", 6400)


def test_spot_checks_unidec(rows):
    # Table 1: "UNIDEC (Φ ⊕ Ψ) 768 44.83 30.28 21.76 39.12 44.82 50.08 512 53.79 48.23 43.83 32.19 35.86 37.96"
    amazon = find(rows, "unidec", "Table 1", "LF-AmazonTitles-1.3M", "UniDEC", "(Φ ⊕ Ψ)")
    assert amazon.metrics == {"P@1": 53.79, "P@3": 48.23, "P@5": 43.83, "PSP@1": 32.19, "PSP@3": 35.86, "PSP@5": 37.96}
    titles = find(rows, "unidec", "Table 1", "LF-AmazonTitles-131K", "UniDEC", "(Φ ⊕ Ψ)")
    assert titles.metrics["P@1"] == 44.83
    # Table 1: "SIAMESEXML (Ψ) 300 44.81 - 21.94 ... 300 42.16 - 21.35 29.01 32.68 36.03"
    siamese = find(rows, "unidec", "Table 1", "LF-WikiSeeAlso-320K", "SiameseXML", "(Ψ)")
    assert "P@3" not in siamese.metrics and siamese.metrics["P@1"] == 42.16
    # Table 2: "RENEE (Ψ) 56.04 45.32 28.56 36.14 1024 1.3M 8xV100"
    renee = find(rows, "unidec", "Table 2", "LF-AmazonTitles-1.3M", "Renée", "(Ψ)")
    assert renee.metrics["PSP@1"] == 28.56
    assert (renee.batch_size, renee.label_pool) == (1024, "1.3M")
    assert (renee.gpus, renee.gpu_type) == (8, "V100")
    assert renee.label_pool_count == 1_300_000


def test_spot_checks_maclr(rows):
    # Table 1 (LF-Wikipedia-500K): "MACLR (ours) 28.44 17.75 13.53 10.40 18.16 22.38 28.52 50.09"
    wiki = find(rows, "maclr", "Table 1", "LF-Wikipedia-500K", "MACLR", setting="zero-shot")
    assert wiki.metrics == {
        "P@1": 28.44,
        "P@3": 17.75,
        "P@5": 13.53,
        "R@1": 10.40,
        "R@3": 18.16,
        "R@5": 22.38,
        "R@10": 28.52,
        "R@100": 50.09,
    }
    # Table 2 (LF-Amazon-131K, 1% labels): "ZestXML 10.10 9.19 7.34 5.63 14.46 18.61 23.73 32.69"
    zest = find(rows, "maclr", "Table 2", "LF-Amazon-131K", "ZestXML", setting="few-shot-1%")
    assert zest.metrics["P@1"] == 10.10 and zest.metrics["R@100"] == 32.69
    # Table 12 (LF-WikiSeeAlso-320K, 5% pairs): "MACLR (ours) 21.80 16.61 13.12 13.27 25.74 31.59 39.25 62.13"
    pairs = find(rows, "maclr", "Table 12", "LF-WikiSeeAlso-320K", "MACLR", setting="few-shot-5%-pairs")
    assert pairs.metrics["R@100"] == 62.13 and pairs.metrics["P@1"] == 21.80


def test_spot_checks_lmtx(rows):
    # Table 2 (EURLex-4K): "LMTX 47.12† 28.87† 21.80† 9.59† 17.42† 21.78† 28.06† 50.69"
    eurlex = find(rows, "lmtx", "Table 2", "EURLex-4K", "LMTX")
    assert eurlex.metrics["P@1"] == 47.12 and eurlex.metrics["R@100"] == 50.69
    assert eurlex.dataset_variant is not None and "3,956" in eurlex.dataset_variant
    # Table 2 (LF-Wikipedia-500K): "RTS* 30.67 19.03 14.34 10.58 18.48 22.51 28.23 48.00"
    rts = find(rows, "lmtx", "Table 2", "LF-Wikipedia-500K", "RTS")
    assert rts.printed_name == "RTS*"
    assert rts.metrics["P@1"] == 30.67 and rts.metrics["R@100"] == 48.00
    # Table 3 (500 samples): "LI-WINDCAISO-J20K LMTX 22.6 15.8 11.88 13.82 24.29 28.94"
    sample = find(rows, "lmtx", "Table 3", "LF-WikiSeeAlso-320K", "LMTX")
    assert sample.metrics["P@1"] == 22.6 and sample.test_queries == 500


def test_numbers_quoted_across_papers_agree(rows):
    # DEXML's all-negatives LF-AmazonTitles-1.3M P@1 as printed by DEXML, PRIME and UniDEC.
    own = find(rows, "dexml", "Table 1", "LF-AmazonTitles-1.3M", "DEXML", "DecoupledSoftmax")
    quoted = find(rows, "prime", "Table 2", "LF-AmazonTitles-1.3M", "DEXML")
    assert quoted.metrics["P@1"] == own.metrics["P@1"]
    assert (
        find(rows, "prime", "Table 5", "LF-AmazonTitles-1.3M", "DEXML", "negative pool ~1.3M").metrics["P@1"]
        == own.metrics["P@1"]
    )
    assert (
        find(rows, "unidec", "Table 2", "LF-AmazonTitles-1.3M", "DEXML", "(Φ), label pool 1.3M").metrics["P@1"]
        == own.metrics["P@1"]
    )
    # DEXML with 10 hard negatives (pool ~90112) as printed by DEXML, PRIME and UniDEC.
    hard = find(
        rows, "dexml", "Table 3", "LF-AmazonTitles-1.3M", "DEXML", "DecoupledSoftmax, 10 hard negatives per query"
    )
    assert (
        find(rows, "unidec", "Table 2", "LF-AmazonTitles-1.3M", "DEXML", "(Φ), label pool 90112").metrics["P@5"]
        == hard.metrics["P@5"]
    )
    assert (
        find(rows, "prime", "Table 5", "LF-AmazonTitles-1.3M", "DEXML", "negative pool ~90K").metrics["P@1"]
        == hard.metrics["P@1"]
    )
    # LMTX copies MACLR's zero-shot rows from the RTS paper: all eight numbers agree.
    for dataset in ("LF-WikiSeeAlso-320K", "LF-Wikipedia-500K"):
        assert (
            find(rows, "lmtx", "Table 2", dataset, "MACLR").metrics
            == find(rows, "maclr", "Table 1", dataset, "MACLR").metrics
        )


# ------------------------------------------------------------------------- loader behaviour


MINIMAL = """\
paper:
  id: dexml
  title: A title
  authors: [A. Author]
  venue: ICLR 2024
  year: 2024
  arxiv: "2310.10636"
tables:
  Table 1: A caption.
rows:
  - paper: dexml
    table: Table 1
    dataset: LF-AmazonTitles-131K
    method: DEXML
    printed_name: DEXML
    setting: full
    metrics: {P@1: 42.52, P@5: 20.64}
  - paper: dexml
    table: Table 1
    dataset: EURLex-4K
    method: DEXML
    printed_name: DEXML
    setting: full
    metrics: {P@1: 86.78}
    label_pool: 3801
"""


def write(folder: Path, text: str, name: str = "dexml.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(path: Path) -> DataFormatError:
    """The DataFormatError that loading ``path`` raises (the edit under test must have applied)."""
    assert path.read_text() != MINIMAL or path.name != "dexml.yaml"
    with pytest.raises(DataFormatError) as info:
        load_reference_file(path)
    return info.value


def test_minimal_file_loads(tmp_path):
    rows = load_reference_results(write(tmp_path / "lb", MINIMAL).parent)
    assert [r.dataset for r in rows] == ["LF-AmazonTitles-131K", "EURLex-4K"]
    assert rows[1].label_pool_count == 3801 and rows[0].label_pool_count is None


@pytest.mark.parametrize(
    ("old", "new", "line", "fragments"),
    [
        (
            "    setting: full\n    metrics: {P@1: 86.78}",
            "    setting: full\n    colour: red\n    metrics: {P@1: 86.78}",
            24,
            ["rows[1].colour", "unknown key 'colour'", "allowed keys"],
        ),
        ("{P@1: 86.78}", "{p@1: 86.78}", 24, ["rows[1].metrics", "'p@1'", "did you mean P@1"]),
        ("{P@1: 86.78}", "{P@1: 186.78}", 24, ["rows[1].metrics", "not a percentage"]),
        ("{P@1: 86.78}", "{P@1: '86.78'}", 24, ["rows[1].metrics.P@1", "without quotes"]),
        (
            "dataset: EURLex-4K",
            "dataset: EURLex-4k",
            20,
            ["rows[1].dataset", "not a canonical dataset name", "did you mean EURLex-4K"],
        ),
        (
            "    method: DEXML\n    printed_name: DEXML\n    setting: full\n    metrics: {P@1: 86.78}",
            "    printed_name: DEXML\n    setting: full\n    metrics: {P@1: 86.78}",
            18,
            ["rows[1].method", "missing required key 'method'"],
        ),
        ("label_pool: 3801", "label_pool: 3801.5", 25, ["rows[1].label_pool", "whole count"]),
        (
            "setting: full\n    metrics: {P@1: 86.78}",
            "setting: fewshot\n    metrics: {P@1: 86.78}",
            23,
            ["rows[1].setting", "unknown setting 'fewshot'"],
        ),
        ('arxiv: "2310.10636"', "arxiv: 2310.10636", 7, ["paper.arxiv", "put it in quotes"]),
    ],
)
def test_validation_errors_name_file_line_row_and_key(tmp_path, old, new, line, fragments):
    assert MINIMAL.count(old) == 1
    error = error_of(write(tmp_path, MINIMAL.replace(old, new, 1)))
    assert error.path.endswith("dexml.yaml") and error.line == line, str(error)
    for fragment in fragments:
        assert fragment in str(error), str(error)


def test_duplicate_rows_are_rejected(tmp_path):
    text = MINIMAL.replace("dataset: EURLex-4K", "dataset: LF-AmazonTitles-131K")
    error = error_of(write(tmp_path, text))
    assert error.line == 18 and "rows[1] repeats rows[0]" in str(error) and "variant" in str(error)
    # A distinct variant makes the two rows different results.
    text = text.replace("    label_pool: 3801", "    label_pool: 3801\n    variant: all negatives")
    assert len(load_reference_file(write(tmp_path, text)).rows) == 2


def test_duplicate_yaml_keys_are_rejected(tmp_path):
    text = MINIMAL.replace("    label_pool: 3801", "    label_pool: 3801\n    label_pool: 2")
    error = error_of(write(tmp_path, text))
    assert error.line == 26 and "duplicate key 'label_pool'" in str(error)


def test_invalid_yaml_names_the_line(tmp_path):
    error = error_of(write(tmp_path, MINIMAL.replace("{P@1: 86.78}", "{P@1: 86.78,,}")))
    assert error.line == 24 and "not valid YAML" in str(error)


def test_rows_must_belong_to_the_file_and_to_a_listed_table(tmp_path):
    error = error_of(write(tmp_path, MINIMAL, name="prime.yaml"))
    assert "name the file dexml.yaml" in str(error) and error.line == 2
    second_row = "  - paper: dexml\n    table: Table 1\n    dataset: EURLex-4K"
    text = MINIMAL.replace(second_row, second_row.replace("paper: dexml", "paper: prime"))
    error = error_of(write(tmp_path, text))
    assert "rows[1].paper is 'prime'" in str(error) and error.line == 18
    error = error_of(
        write(
            tmp_path,
            MINIMAL.replace("table: Table 1\n    dataset: EURLex-4K", "table: Table 9\n    dataset: EURLex-4K"),
        )
    )
    assert "rows[1].table 'Table 9' has no caption" in str(error) and error.line == 19


def test_not_a_mapping(tmp_path):
    assert error_of(write(tmp_path, "- just\n- a list\n")).line == 1


def test_folder_resolution(tmp_path, monkeypatch):
    shipped = reference_dir()
    assert {p.stem for p in shipped.glob("*.yaml")} == set(PAPERS)

    mine = tmp_path / "mine"
    write(mine, MINIMAL)
    assert reference_dir(mine) == mine
    monkeypatch.setenv(ENV_DIR, str(mine))
    assert reference_dir() == mine
    assert len(load_reference_results()) == 2
    assert len(load_reference_results(shipped)) > 2  # an explicit folder beats the variable

    monkeypatch.setenv(ENV_DIR, str(tmp_path / "missing"))
    with pytest.raises(XmcbenchError, match=ENV_DIR):
        reference_dir()
    with pytest.raises(XmcbenchError, match="does not exist"):
        reference_dir(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(XmcbenchError, match="no reference result files"):
        load_reference_results(tmp_path / "empty")


def test_shipped_files_copy_cleanly(tmp_path):
    # The files are self-contained: copied anywhere they load the same rows.
    copy = tmp_path / "copy"
    shutil.copytree(reference_dir(), copy)
    copied, shipped = load_reference_results(copy), load_reference_results()
    assert [r.key for r in copied] == [r.key for r in shipped]
