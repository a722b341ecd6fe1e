"""Caveats a reader of a comparison table must see (issue #10, points 14 and 15)."""

from xmcbench.report.table import _count_notes


def test_counts_that_differ_from_the_papers_are_said():
    runs = [{"split": "test", "n_queries": 134_000, "n_labels": 131_073}]
    notes = _count_notes("LF-AmazonTitles-131K", runs)
    assert notes == ["the files scored have 134,000 test queries; the papers' count is 134,835"]


def test_matching_counts_and_unknown_datasets_say_nothing():
    assert _count_notes("LF-AmazonTitles-131K", [{"split": "test", "n_queries": 134_835, "n_labels": 131_073}]) == []
    assert _count_notes("no-such-dataset", [{"split": "test", "n_queries": 1, "n_labels": 1}]) == []
