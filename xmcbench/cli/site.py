"""``xmcbench site --out DIR``: the static leaderboard site (index.html and one page per dataset)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from xmcbench.cli._common import console, err_console, handle_errors


@handle_errors
def site(
    out: Annotated[
        str,
        typer.Option(
            "--out",
            "-o",
            help="Folder of the site: new, empty, or one an earlier `xmcbench site` wrote (replaced whole).",
        ),
    ],
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "--dataset",
            "-d",
            help="Only these datasets (repeatable; default: every dataset with published numbers or runs).",
        ),
    ] = None,
    db: Annotated[
        Path | None, typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")
    ] = None,
) -> None:
    """Write a static leaderboard site: index.html (every dataset) and one page per dataset.

    Sortable, filterable tables and inline SVG plots (P@1 against GPU-hours with the Pareto front,
    against the label pool per step, reproduced minus published, each run's loss curve). The pages
    need no network and no server: open index.html in a browser.
    """
    from xmcbench.cli.table import canonical_dataset
    from xmcbench.errors import XmcbenchError
    from xmcbench.report.site import build_site
    from xmcbench.store import Store

    # an unset shell variable (`--out "$SITE"`, `-d "$DS"`) must not mean "here" or a page named ".html"
    if not out.strip():
        raise XmcbenchError("--out '' is empty: give the folder to write the site into (e.g. --out site)")
    if dataset and any(not d.strip() for d in dataset):
        raise XmcbenchError("--dataset '' is empty: give a dataset name (`xmcbench datasets list` shows them)")

    with Store.open(db, read_only=True, missing_ok=db is None) as store:
        if not store.exists:
            err_console.print(
                f"[yellow]note:[/] no results database at {escape(str(store.path))}: published results only",
                highlight=False,
                soft_wrap=True,
            )
        pages = build_site(store, Path(out).expanduser(), [canonical_dataset(d) for d in dataset] if dataset else None)
    console.print(
        f"wrote {len(pages)} pages to {escape(str(out))}; open {escape(str(pages[0]))}", highlight=False, soft_wrap=True
    )
