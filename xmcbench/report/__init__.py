"""Reports over the results store: tables of reproduced runs next to published results.

``build_table`` gathers and compares the numbers (``table.py``); ``render`` and the ``to_*``
functions turn the resulting ``Table`` into rich, markdown, csv, json or html (``render.py``);
``compare_runs`` tests whether one run beats another on the same queries (``compare.py``).
"""

from xmcbench.report.compare import Comparison, Difference, compare_runs
from xmcbench.report.render import FORMATS, fit_columns, render, to_csv, to_html, to_json, to_markdown, to_rich, to_text
from xmcbench.report.table import DEFAULT_METRICS, Column, Table, build_overview, build_table

__all__ = [
    "DEFAULT_METRICS",
    "FORMATS",
    "Column",
    "Comparison",
    "Difference",
    "Table",
    "build_overview",
    "build_table",
    "compare_runs",
    "render",
    "to_csv",
    "to_html",
    "to_json",
    "to_markdown",
    "to_rich",
    "to_text",
    "fit_columns",
]
