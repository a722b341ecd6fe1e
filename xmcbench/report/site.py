"""A static leaderboard site: ``index.html`` (every dataset at once) and one page per dataset.

Built from the results database and the published numbers; viewing it needs no network and no
server (open ``index.html`` from disk). Everything is inline in each page:

- tables are plain HTML, sortable (click a header) and filterable (a text box) by a few lines of
  vanilla JavaScript embedded in the page;
- plots are SVG written here, in Python: P@1 against GPU-hours with the Pareto front, P@1 against
  the label pool per step (PRIME's Figure 1 question: is a bigger pool worth it?), reproduced minus
  published (Δ with the run's 95% interval), and each run's loss per epoch (``train_log.jsonl``).

The site is published whole (``write_site``): built beside ``--out`` and swapped in by renames, so a
full disk or a kill never leaves a mix of old and new pages, and only a folder that holds nothing but
pages xmcbench wrote is ever replaced.

Why hand-written SVG rather than a plotting library: the four plots are scatter, line and bar
charts of at most a few hundred points; SVG from Python needs no new dependency (matplotlib,
plotly and bokeh are not installed with xmcbench), no JavaScript bundle to ship beside the pages
(plotly.js alone is ~3.5 MB), no CDN, renders identically in any browser, prints, and stays
diff-able text; points carry ``<title>`` tooltips (method, source, values).
"""

from __future__ import annotations

import hashlib
import html
import math
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import atomic_write, fsync_path, pid_alive
from xmcbench.report.render import NAME_COLUMNS, format_cell
from xmcbench.report.table import Table, build_overview, build_table
from xmcbench.store import Store
from xmcbench.store.record import read_train_log

esc = html.escape

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
nav a { margin-right: 1em; }
table.board { border-collapse: collapse; font-size: 0.9em; margin-top: 0.5em; }
table.board th, table.board td { border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; white-space: nowrap; }
table.board th { background: #f1f3f5; cursor: pointer; position: sticky; top: 0; }
table.board th.sorted-asc::after { content: " ▲"; } table.board th.sorted-desc::after { content: " ▼"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.reproduced td { background: #eef6ff; } tr.section td { background: #fafafa; font-weight: bold; }
.best { color: #0a7d32; font-weight: bold; }
.note { color: #555; font-size: 0.85em; }
.plots { display: flex; flex-wrap: wrap; gap: 1.5em; }
figure { margin: 0; } figcaption { font-size: 0.85em; color: #444; max-width: 460px; }
input.filter { padding: 0.3em; width: 18em; }
table.board td.run-id { font-family: ui-monospace, monospace; font-size: 0.8em; white-space: normal; overflow-wrap: anywhere; min-width: 15em; }
.table-wrap { overflow-x: auto; max-width: 100%; }
svg text { font-family: system-ui, sans-serif; }
"""

SCRIPT = """
(function () {
  window.addEventListener('error', function (e) {
    var box = document.getElementById('js-errors') || document.body.appendChild(document.createElement('pre'));
    box.id = 'js-errors'; box.textContent += String(e.message) + '\\n';
  });
  function cellValue(td) {
    var v = td.getAttribute('data-v');
    if (v !== null && v !== '') { var n = parseFloat(v); if (!isNaN(n)) return n; }
    return td.textContent.trim().toLowerCase();
  }
  document.querySelectorAll('table.board').forEach(function (table) {
    var body = table.tBodies[0];
    table.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var asc = !th.classList.contains('sorted-asc');
        table.querySelectorAll('th').forEach(function (h) { h.classList.remove('sorted-asc', 'sorted-desc'); });
        th.classList.add(asc ? 'sorted-asc' : 'sorted-desc');
        var rows = Array.prototype.slice.call(body.rows).filter(function (r) { return !r.classList.contains('section'); });
        body.querySelectorAll('tr.section').forEach(function (r) { r.remove(); });
        rows.sort(function (a, b) {
          var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
          var xe = (x === '–' || x === ''), ye = (y === '–' || y === '');
          if (xe !== ye) return xe ? 1 : -1;
          if (x < y) return asc ? -1 : 1; if (x > y) return asc ? 1 : -1; return 0;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
    var box = document.querySelector('input.filter[data-for="' + table.id + '"]');
    if (box) box.addEventListener('input', function () {
      var q = box.value.toLowerCase();
      Array.prototype.forEach.call(body.rows, function (r) {
        r.style.display = (!q || r.classList.contains('section') || r.textContent.toLowerCase().indexOf(q) >= 0) ? '' : 'none';
      });
    });
  });
  document.body.setAttribute('data-ready', '1');
})();
"""


def build_site(store: Store, out: str | Path, datasets: list[str] | None = None) -> list[Path]:
    """Write ``index.html`` and ``<dataset>.html`` pages into ``out``; returns the pages written.

    ``out`` is replaced whole (see ``write_site``): it must be new, empty, or a site xmcbench built.
    """
    names = datasets or _datasets(store)
    links = [(name, _page_name(name)) for name in names]
    rendered = [(page, _dataset_page(store, name, links)) for name, page in links]
    rendered.append(("index.html", _index_page(store, links)))
    pages = write_site(out, rendered)
    return [pages[-1], *pages[:-1]]


# -- publishing: the whole site or nothing ---------------------------------------------------

GENERATOR = '<meta name="generator" content="xmcbench">'  # in every page: how a later run knows the site is its own
_LEGACY_MARK = '<nav><a href="index.html">overview</a>'  # pages written before the generator tag
_SIBLING = re.compile(r"^\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[0-9a-f]{8}\.site-(?P<kind>new|old)$")
# a static host's own files (GitHub Pages: the custom domain, no Jekyll): kept across rebuilds
HOSTING_FILES = ("CNAME", ".nojekyll")
_PAGE_TEMP = re.compile(r"^\..+\.html\.[0-9]+\.[0-9a-f]+\.tmp$")  # atomic_write's temp file of a page


def write_site(out: str | Path, pages: list[tuple[str, str]]) -> list[Path]:
    """Publish ``pages`` (file name, HTML) as the folder ``out``, all at once or not at all.

    The new site is written in full into a sibling folder (same parent, so renames stay on one file
    system), then swapped in: the old site is renamed away, the new one renamed in, the old one
    removed. A full disk leaves the old site as it was; a kill leaves the old site in place or beside
    it, and the next run puts it back if needed and removes what the killed run left. ``out`` must be
    new, empty, or a site xmcbench built: anything else is refused untouched. A static host's files
    (``CNAME``, ``.nojekyll``) are carried into the new site.
    """
    shown = Path(out)
    out = _site_dir(shown)
    try:
        _recover(out)
        if out.exists() and not _built_site(out):
            raise XmcbenchError(
                f"--out {shown} holds more than the pages of a site xmcbench built; give a new or empty "
                "folder, or that of an earlier `xmcbench site` (nothing in it was touched)"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        new = _sibling(out, "new")
        new.mkdir()
        try:
            if out.is_dir():
                shutil.copymode(out, new)  # a site shared with a group stays so
                for name in HOSTING_FILES:
                    if (out / name).is_file() and not (out / name).is_symlink():
                        shutil.copy2(out / name, new / name)
            for page, text in pages:
                atomic_write(new / page, text)
            fsync_path(new)
            _swap(new, out)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
    except OSError as exc:
        raise XmcbenchError(
            f"cannot write the site into {shown}: {exc.strerror or exc} "
            f"(it is built beside it, in {out.parent}, then moved in); the site there was left as it was"
        ) from None
    return [shown / page for page, _ in pages]


def _site_dir(out: Path) -> Path:
    """The folder to replace, refused where renaming it away would be wrong (``/``, a mount point, ``.``)."""
    try:
        real = out.expanduser().absolute()
        if real.is_symlink():
            real = real.resolve()  # the folder the link points to is replaced; the link stays
        resolved = real.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop (Python < 3.13)
        raise XmcbenchError(
            f"--out {out} cannot be followed: a symbolic link in it loops or is unreadable ({exc}); give a plain folder"
        ) from None
    if real.exists() and not real.is_dir():
        raise XmcbenchError(f"--out {out} is a file; give a folder for the site (created if needed)")
    if real.parent == real or os.path.ismount(real):
        raise XmcbenchError(
            f"--out {out} is a mount point or the root; the site replaces its folder whole, "
            f"so give a folder inside it (e.g. {out / 'site'})"
        )
    try:
        here = Path.cwd().resolve()
    except OSError:
        here = None
    if here is not None and (resolved == here or resolved in here.parents):
        raise XmcbenchError(
            f"--out {out} holds the current folder, which replacing the site would pull away; "
            "run from the folder above it (e.g. cd .. && xmcbench site --out NAME)"
        )
    return real


def _sibling(out: Path, kind: str) -> Path:
    return out.with_name(f".{_sibling_key(out)}.{os.getpid()}.{secrets.token_hex(4)}.site-{kind}")


def _sibling_key(out: Path) -> str:
    """``out``'s name in its siblings' names: cut to fit a file name, with a hash of the whole name when
    cut, so that two long names sharing their start never take each other's leftovers."""
    if len(out.name) <= 100:
        return out.name
    return f"{out.name[:90]}~{hashlib.sha1(out.name.encode('utf-8', 'surrogateescape')).hexdigest()[:9]}"


def _swap(new: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = _sibling(out, "old")
        os.rename(out, old)
    try:
        os.rename(new, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)  # the old site back in its place
        raise
    fsync_path(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)  # what stays (a kill) is removed by the next run


def _recover(out: Path) -> None:
    """Undo what a killed run left beside ``out``: its old site goes back if ``out`` is missing, the rest goes.

    Only folders named by this scheme, of a process that is gone, holding nothing but pages, are touched.
    """
    if not out.parent.is_dir():
        return
    left: list[tuple[str, Path]] = []
    for entry in out.parent.iterdir():
        match = _SIBLING.match(entry.name)
        if match is None or match["name"] != _sibling_key(out) or pid_alive(int(match["pid"])):
            continue
        if not entry.is_symlink() and entry.is_dir() and _built_site(entry):
            left.append((match["kind"], entry))
    olds = [entry for kind, entry in left if kind == "old" and (entry / "index.html").is_file()]
    if olds and not out.exists():
        back = max(olds, key=lambda e: e.stat().st_mtime)
        os.rename(back, out)
        left = [(kind, entry) for kind, entry in left if entry != back]
    for _, entry in left:
        shutil.rmtree(entry)


def _built_site(folder: Path) -> bool:
    """Empty, or only pages xmcbench wrote (and the temp files of a write that was cut off, and a static
    host's ``HOSTING_FILES``)."""
    for entry in folder.iterdir():
        if entry.is_symlink() or not entry.is_file():
            return False  # a subfolder (.git, assets) is the user's: never replaced
        if _PAGE_TEMP.match(entry.name) or entry.name in HOSTING_FILES:
            continue
        if not entry.name.endswith(".html"):
            return False
        with open(entry, "rb") as fh:
            head = fh.read(1 << 16)
        if GENERATOR.encode() not in head and _LEGACY_MARK.encode() not in head:
            return False
    return True


def _datasets(store: Store) -> list[str]:
    from xmcbench.report.table import CANONICAL_ORDER

    names = {r["dataset"] for r in store.reference_results() if not r["dataset_variant"]}
    names |= {r["dataset"] for r in store.runs(status="finished")}
    order = {n: i for i, n in enumerate(CANONICAL_ORDER)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n.lower()))


def _page_name(dataset: str) -> str:
    """A file name of its own for every dataset name: ``a b`` and ``a_b``, two names in another script, or
    a dataset called ``index`` must not overwrite each other's page, and a long name must still fit."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", dataset).strip("._")[:80]
    if not slug or slug != dataset or slug.lower() == "index":
        slug = f"{slug}-{hashlib.sha1(dataset.encode('utf-8')).hexdigest()[:8]}".lstrip("-")
    return slug + ".html"


# -- pages -----------------------------------------------------------------------------------


def _page(title: str, links: list[tuple[str, str]], body: str) -> str:
    nav = '<a href="index.html">overview</a>' + "".join(f'<a href="{esc(p)}">{esc(n)}</a>' for n, p in links)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{GENERATOR}
<title>{esc(title)}</title>
<style>{CSS}</style>
</head>
<body>
<nav>{nav}</nav>
<h1>{esc(title)}</h1>
{body}
<script>{SCRIPT}</script>
</body>
</html>
"""


def _index_page(store: Store, links: list[tuple[str, str]]) -> str:
    parts = [
        '<p class="note">Best P@1 per method and setting, published (each paper\'s main tables) and '
        "reproduced with xmcbench. Click a header to sort, type to filter; a dataset's page has its full "
        "table and plots.</p>"
    ]
    deltas = []
    for name, _ in links:
        try:
            table = build_table(store, name, curated=True, newest_setting=True)
        except XmcbenchError:
            continue
        deltas += [(f"{r['method']} · {name}", r) for r in table.rows if r.get("P@1 Δ") is not None]
    parts.append('<div class="plots">')
    parts.append(
        _figure(
            _delta_plot(deltas),
            "P@1 of each reproduced run minus the published P@1 of the same method "
            "and setting, with the run's 95% bootstrap interval shifted the same way.",
        )
    )
    parts.append(
        "<figure><figcaption><b>Datasets</b></figcaption><ul>"
        + "".join(f'<li><a href="{esc(p)}">{esc(n)}</a></li>' for n, p in links)
        + "</ul></figure>"
    )
    parts.append("</div><h2>Best P@1 per method</h2>")
    try:
        overview = build_overview(store)
        parts.append(_html_table(overview, "overview", header_links={n: p for n, p in links}))
    except XmcbenchError as exc:
        parts.append(f'<p class="note">{esc(str(exc))}</p>')
    return _page("xmcbench leaderboard", links, "\n".join(parts))


def _dataset_page(store: Store, dataset: str, links: list[tuple[str, str]]) -> str:
    try:
        table = build_table(store, dataset, curated=True, newest_setting=True)
    except XmcbenchError as exc:
        return _page(dataset, links, f'<p class="note">{esc(str(exc))}</p>')
    parts = [
        f'<p class="note">{esc(table.title)}. Published rows: each paper\'s main tables (the command '
        f"<code>xmcbench table --dataset {esc(dataset)} --all-published</code> lists every row). "
        "Reproduced rows are highlighted.</p>"
    ]
    metric = table.metrics[0] if table.metrics else "P@1"
    points = [_point(row, metric, _cpu_hours(store, row)) for row in table.rows]
    parts.append('<h2>Plots</h2><div class="plots">')
    parts.append(
        _figure(
            _scatter(points, "gpu_hours", metric, "GPU-hours (log)", pareto=True),
            f"{metric} against GPU-hours (published: training time × GPUs as reported; reproduced: "
            "train + predict wall time × GPUs; hollow points: runs on CPU, at their train + predict "
            "wall-clock hours). The line is the Pareto front: no point is both cheaper and better.",
        )
    )
    parts.append(
        _figure(
            _scatter(points, "pool", metric, "labels scored per step (log)"),
            f"{metric} against the label pool per training step (positives + negatives in the loss): "
            "the question of PRIME's Figure 1, does a bigger pool buy accuracy?",
        )
    )
    deltas = [(r["method"], r) for r in table.rows if r.get(f"{metric} Δ") is not None]
    parts.append(
        _figure(_delta_plot(deltas, metric), f"Reproduced minus published {metric}, with the run's 95% interval.")
    )
    parts.append("</div>")
    parts.append("<h2>Results</h2>")
    parts.append(_html_table(table, "board-" + re.sub(r"[^a-z0-9]", "", dataset.lower()), scroll=True))
    methods = {r["source"]: r["method"] for r in table.rows if r["kind"] == "reproduced"}
    curves = _loss_curves(store, list(methods))
    parts.append("<h2>Training loss per epoch</h2>")
    if curves:
        figures = "".join(_figure(svg, f"{methods[rid]} · run {rid}") for rid, svg in curves)
        parts.append(f'<div class="plots">{figures}</div>')
    else:
        parts.append('<p class="note">no run of this dataset recorded a loss per epoch (train_log.jsonl)</p>')
    return _page(dataset, links, "\n".join(parts))


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def _html_table(table: Table, table_id: str, header_links: dict[str, str] | None = None, scroll: bool = False) -> str:
    """``scroll``: a wide table scrolls sideways in its own box instead of running off the page."""
    header_links = header_links or {}
    # a column with no value in any row (coverage with no reproduced run) says nothing here either
    columns = [
        c
        for c in table.columns
        if c.key in NAME_COLUMNS or c.kind == "metric" or any(row.get(c.key) is not None for row in table.rows)
    ]
    table = Table(**{**table.__dict__, "columns": columns})
    heads = []
    for column in table.columns:
        text = esc(column.header)
        if column.key in header_links:
            text = f'<a href="{esc(header_links[column.key])}">{text}</a>'
        heads.append(f"<th>{text}</th>")
    body, section = [], None
    for i, row in enumerate(table.rows):
        if row.get("section") and row["section"] != section:
            section = row["section"]
            body.append(f'<tr class="section"><td colspan="{len(table.columns)}">{esc(section)}</td></tr>')
        cells = []
        for column in table.columns:
            value = row.get(column.key)
            text = esc(format_cell(column, value))
            if table.is_best(i, column.key):
                text = f'<span class="best">{text}</span>'
            if column.key == "source" and row["kind"] == "reproduced" and row.get("source") != "reproduced":
                cells.append(f'<td class="run-id">{text}</td>')  # a long run id wraps instead of widening the table
            elif column.kind == "text":
                cells.append(f"<td>{text}</td>")
            else:
                number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
                cells.append(f'<td class="num" data-v="{number}">{text}</td>')
        body.append(f'<tr class="{esc(row["kind"])}">' + "".join(cells) + "</tr>")
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in table.notes)
    return (
        f'<input class="filter" data-for="{table_id}" placeholder="filter rows…" aria-label="filter rows">'
        + ('<div class="table-wrap">' if scroll else "")
        + f'<table class="board" id="{table_id}"><thead><tr>{"".join(heads)}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>" + ("</div>" if scroll else "") + notes
    )


# -- plots (SVG) -----------------------------------------------------------------------------

W, H, PAD_L, PAD_B, PAD_T, PAD_R = 460, 300, 52, 40, 24, 14
LEGEND_Y = 14  # the legend's baseline, in the top margin
COLOURS = {"published": "#6c757d", "reproduced": "#d9480f"}


def _number(text: Any) -> float | None:
    """'2,560 (max 2,600)', '~1.3M', 131073 -> a number."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return None
    match = re.search(r"([0-9][0-9,]*(\.[0-9]+)?)\s*([KM]?)", text)
    if not match:
        return None
    return float(match.group(1).replace(",", "")) * {"": 1, "K": 1e3, "M": 1e6}[match.group(3)]


def _point(row: dict, metric: str, cpu_hours: float | None = None) -> dict:
    gpu_hours = _number(row.get("gpu_hours"))
    return {
        "label": f"{row['method']} ({row['source']})",
        "kind": row["kind"],
        "y": row.get(metric),
        # a CPU run has 0 GPU-hours, which a log axis cannot show: it is placed at its wall-clock hours
        "gpu_hours": cpu_hours if not gpu_hours and cpu_hours else gpu_hours,
        "cpu": bool(cpu_hours) and not gpu_hours,
        "pool": _number(row.get("label_pool")),
    }


def _cpu_hours(store: Store, row: dict) -> float | None:
    """Train + predict wall-clock hours of a reproduced run on CPU (None for anything else)."""
    if row["kind"] != "reproduced" or row.get("gpus") != "CPU":
        return None
    try:
        walls = (store.get_run(row["source"])["record"].get("compute") or {}).get("wall_time_s") or {}
    except XmcbenchError:
        return None
    seconds = sum(float(walls.get(phase) or 0.0) for phase in ("train", "predict"))
    return seconds / 3600 if seconds > 0 else None


def _empty(message: str) -> str:
    """A plot with nothing to show: one short line saying why (a full-size empty box reads as broken)."""
    height = 44
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" role="img" class="empty">'
        f'<rect width="{W}" height="{height}" fill="#fafafa" stroke="#ddd"/>'
        f'<text x="{W / 2}" y="{height / 2 + 4}" text-anchor="middle" fill="#666" font-size="12">{esc(message)}</text></svg>'
    )


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        ticks = [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
        if sum(lo <= t <= hi for t in ticks) < 2:  # less than a decade: 1-2-5 steps, so the axis has numbers
            ticks = [m * t for t in ticks for m in (1, 2, 5) if lo <= m * t <= hi]
        return ticks
    step = 10 ** math.floor(math.log10(max(hi - lo, 1e-9)))
    if (hi - lo) / step < 4:
        step /= 2
    first = math.ceil(lo / step) * step  # round numbers only
    return [round(first + i * step, 10) for i in range(int((hi - first) / step) + 1)]


def _axes(xlo: float, xhi: float, ylo: float, yhi: float, xlabel: str, ylabel: str, xlog: bool, xint: bool = False):
    """Frame, grid and labels; ``xint``: whole-number x ticks only (epochs have no halves)."""

    def sx(x: float) -> float:
        if xlog:
            x, lo, hi = math.log10(x), math.log10(xlo), math.log10(xhi)
        else:
            lo, hi = xlo, xhi
        return PAD_L + (x - lo) / ((hi - lo) or 1) * (W - PAD_L - PAD_R)

    def sy(y: float) -> float:
        return H - PAD_B - (y - ylo) / ((yhi - ylo) or 1) * (H - PAD_B - PAD_T)

    parts = [
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" height="{H - PAD_B - PAD_T}" fill="white" stroke="#ccc"/>'
    ]
    xticks = _ticks(xlo, xhi, xlog)
    if xint:
        xticks = [t for t in xticks if float(t).is_integer()] or list(range(math.ceil(xlo), math.floor(xhi) + 1))
    for t in xticks:
        if xlo <= t <= xhi:
            parts.append(
                f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{PAD_T}" y2="{H - PAD_B}" stroke="#eee"/>'
                f'<text x="{sx(t):.1f}" y="{H - PAD_B + 14}" font-size="10" text-anchor="middle">{_short(t)}</text>'
            )
    for t in _ticks(ylo, yhi, False):
        parts.append(
            f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>'
            f'<text x="{PAD_L - 4}" y="{sy(t) + 3:.1f}" font-size="10" text-anchor="end">{_short(t)}</text>'
        )
    parts.append(
        f'<text x="{(W + PAD_L) / 2}" y="{H - 6}" font-size="11" text-anchor="middle">{esc(xlabel)}</text>'
        f'<text x="12" y="{(H - PAD_B) / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {(H - PAD_B) / 2})">{esc(ylabel)}</text>'
    )
    return sx, sy, parts


def _short(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:g}K"
    return f"{v:g}" if abs(v) >= 0.01 or v == 0 else f"{v:.0e}"


def _svg(parts: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{esc(label)}">' + "".join(parts) + "</svg>"
    )


def _legend(parts: list[str], kinds: set[str] | None = None) -> None:
    """In the margin above the frame, in a row (inside it, it hid the points it explains); only the kinds plotted."""
    x = PAD_L
    for kind, colour in COLOURS.items():
        if kinds is not None and kind not in kinds:
            continue
        parts.append(
            f'<circle cx="{x + 4}" cy="{LEGEND_Y - 4}" r="4" fill="{colour}"/>'
            f'<text x="{x + 12}" y="{LEGEND_Y}" font-size="10">{kind}</text>'
        )
        x += 90


def _scatter(points: list[dict], xkey: str, metric: str, xlabel: str, pareto: bool = False) -> str:
    pts = [p for p in points if p["y"] is not None and p[xkey] is not None and p[xkey] > 0]
    if not pts:
        return _empty(
            f"no row reports both {metric} and {xlabel.split(' (')[0]}"
            + (" (CPU runs: 0 GPU-hours)" if xkey == "gpu_hours" else "")
        )
    xs, ys = [p[xkey] for p in pts], [p["y"] for p in pts]
    xlo, xhi = min(xs) / 1.5, max(xs) * 1.5
    if xhi / xlo < 10:  # at least a decade, so that the log axis gets two numbered ticks
        widen = math.sqrt(10 / (xhi / xlo))
        xlo, xhi = xlo / widen, xhi * widen
    ylo, yhi = math.floor(min(ys) / 5) * 5, math.ceil(max(ys) / 5) * 5 + (5 if min(ys) == max(ys) else 0)
    sx, sy, parts = _axes(xlo, xhi, ylo, yhi, xlabel, metric, xlog=True)
    if pareto:
        front, best = [], -math.inf
        for p in sorted(pts, key=lambda p: (p[xkey], -p["y"])):
            if p["y"] > best:
                front.append(p)
                best = p["y"]
        path = " ".join(f"{'M' if i == 0 else 'L'}{sx(p[xkey]):.1f},{sy(p['y']):.1f}" for i, p in enumerate(front))
        parts.append(
            f'<path class="pareto" d="{path}" fill="none" stroke="#1971c2" stroke-width="1.5" stroke-dasharray="4 3"/>'
        )
    for p in pts:
        cpu = xkey == "gpu_hours" and p.get("cpu")
        paint = (
            f'fill="white" stroke="{COLOURS[p["kind"]]}" stroke-width="2"'
            if cpu
            else f'fill="{COLOURS[p["kind"]]}" fill-opacity="0.85"'
        )
        unit = "CPU wall-clock hours" if cpu else xlabel.split(" (")[0]
        parts.append(
            f'<circle cx="{sx(p[xkey]):.1f}" cy="{sy(p["y"]):.1f}" r="4.5" {paint}>'
            f"<title>{esc(p['label'])}: {metric} {p['y']:.2f}, {esc(unit)} {p[xkey]:,.4g}</title></circle>"
        )
    _legend(parts, {p["kind"] for p in pts})
    return _svg(parts, f"{metric} against {xlabel}")


def _delta_plot(deltas: list[tuple[str, dict]], metric: str = "P@1") -> str:
    if not deltas:
        return _empty("no reproduced run has a published counterpart yet")
    values = [(name, r[f"{metric} Δ"], r.get(f"{metric} Δ CI")) for name, r in deltas]
    lo = min([0.0] + [v for _, v, _ in values] + [ci[0] for *_, ci in values if ci])
    hi = max([0.0] + [v for _, v, _ in values] + [ci[1] for *_, ci in values if ci])
    pad = max((hi - lo) * 0.1, 0.5)
    lo, hi = lo - pad, hi + pad
    row_h = 22
    height = PAD_T + PAD_B + row_h * len(values)
    left = 190

    def sx(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (W - left - PAD_R)

    parts = [f'<line x1="{sx(0):.1f}" x2="{sx(0):.1f}" y1="{PAD_T}" y2="{height - PAD_B}" stroke="#333"/>']
    for t in _ticks(lo, hi, False):
        parts.append(
            f'<text x="{sx(t):.1f}" y="{height - PAD_B + 14}" font-size="10" text-anchor="middle">{t:+.3g}</text>'
        )
    for i, (name, value, ci) in enumerate(values):
        y = PAD_T + i * row_h
        colour = "#2f9e44" if value >= 0 else "#e03131"
        x0, x1 = sorted((sx(0), sx(value)))
        parts.append(
            f'<text x="{left - 6}" y="{y + 14}" font-size="10" text-anchor="end">{esc(name[:34])}</text>'
            f'<rect x="{x0:.1f}" y="{y + 4}" width="{max(x1 - x0, 1):.1f}" height="{row_h - 8}" fill="{colour}">'
            f"<title>{esc(name)}: {metric} Δ {value:+.2f}</title></rect>"
        )
        if ci:
            parts.append(
                f'<line x1="{sx(ci[0]):.1f}" x2="{sx(ci[1]):.1f}" y1="{y + row_h / 2}" y2="{y + row_h / 2}" '
                f'stroke="#222" stroke-width="1.5"/>'
            )
    parts.append(
        f'<text x="{(W + left) / 2}" y="{height - 6}" font-size="11" text-anchor="middle">'
        f"{metric}: reproduced − published</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" '
        f'role="img" aria-label="{metric} reproduced minus published">' + "".join(parts) + "</svg>"
    )


def _loss_curves(store: Store, run_ids: list[str]) -> list[tuple[str, str]]:
    curves = []
    for run_id in run_ids:
        try:
            run = store.get_run(run_id)
        except XmcbenchError:
            continue
        entries = read_train_log(run.get("run_dir"))
        points = [(e["epoch"], e["loss"]) for e in entries if _finite(e.get("loss")) and _finite(e.get("epoch"))]
        if not points:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        xlo, xhi = min(xs) - 0.5, max(xs) + 0.5
        ylo, yhi = min(ys) * 0.9, max(ys) * 1.1 if max(ys) > 0 else 1.0
        sx, sy, parts = _axes(xlo, xhi, ylo, yhi, "epoch", "loss", xlog=False, xint=True)
        path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(points))
        parts.append(f'<path d="{path}" fill="none" stroke="#d9480f" stroke-width="2"/>')
        parts += [
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="#d9480f"><title>epoch {x}: loss {y:.4f}</title></circle>'
            for x, y in points
        ]
        curves.append((run_id, _svg(parts, f"loss per epoch of {run_id}")))
    return curves


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
