"""Results tables: reproduced runs next to the papers' published numbers, for one dataset.

``build_table`` only gathers and compares numbers; ``render.py`` turns a ``Table`` into rich,
markdown, csv, json or html. A table holds:

- one row per reproduced configuration (method, encoder, supervision, queries evaluated): its
  best finished run by the first metric shown (``pick="latest"``: its newest), or every finished
  run with ``all_runs``; ``source`` is the run id;
- one row per published result (paper, table, method variant, setting — full, zero-shot and
  few-shot alike), labelled as the paper prints it; ``source`` is "paper:table";
- for a reproduced method that also has a published number in the same setting, "<metric> Δ"
  columns: reproduced minus published, against the method's own paper when several papers
  report it (``Δ vs`` names the row used);
- compute columns: GPU-hours, GPU type × count, batch size, label pool size, and the share of
  the test queries evaluated (coverage).

Settings use the leaderboard's words: ``full``, ``zero-shot``, ``few-shot-<n>%`` (n% of the
labels seen in training).

Never mixed or misranked:
- runs are comparable only when they share split, dataset version, propensity A/B and filter file
  (``xmcbench.store.COMPARABILITY_KEY``). When a dataset's runs span several such settings,
  ``build_table`` refuses and lists them; pass ``split`` / ``dataset_version`` / ``propensity``
  to choose one;
- published rows measured on another copy of the dataset (``dataset_variant``) are left out;
- rows evaluated on part of the test set (a run's coverage below 100 %, a published row's
  ``test_queries``) are shown but never highlighted as best, and published ones get no Δ.
Published rows come from the papers (their own A/B); their PSP figures are shown as printed.

GPU-hours: for published rows, training time × GPUs as the paper reports them (training only);
for reproduced runs, (train + predict wall time) × GPUs used, as recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from xmcbench.errors import XmcbenchError
from xmcbench.store import COMPARABILITY_KEY, Store
from xmcbench.store.record import parse_metric_name

DEFAULT_METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")
_FAMILY_ORDER = ("P", "nDCG", "PSP", "PSnDCG", "R")


@dataclass(frozen=True)
class Column:
    key: str  # key in each row dict
    header: str
    kind: Literal["text", "metric", "delta", "number", "interval"]


@dataclass
class Table:
    """A results table: columns, rows (dicts of raw values), and which cells are best.

    Every row has the keys of ``columns`` plus ``kind`` ("reproduced" / "published"),
    ``ranked`` (False for rows on part of the test set) and ``notes``.
    """

    dataset: str
    metrics: list[str]
    columns: list[Column]
    rows: list[dict[str, Any]]
    setting: dict[str, Any] = field(default_factory=dict)  # the comparability key of its runs
    best: dict[str, set[int]] = field(default_factory=dict)  # metric -> indices of rows holding the best value
    higher_is_better: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # notes a reader of JSON or CSV (which carry no notes) must still get, e.g. that no run matched
    warnings: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        parts = [self.dataset]
        s = self.setting
        if s.get("split"):
            parts.append(f"split {s['split']}")
        if s.get("dataset_version"):
            parts.append(f"version {s['dataset_version'][:12]}")
        if s.get("propensity_a") is not None:
            parts.append(f"A/B {_num(s['propensity_a'])}/{_num(s['propensity_b'])}")
        return " · ".join(parts)

    def is_best(self, row_index: int, key: str) -> bool:
        return row_index in self.best.get(key, ())


def build_table(
    store: Store,
    dataset: str,
    metrics: list[str] | None = None,
    all_runs: bool = False,
    pick: Literal["best", "latest"] = "best",
    split: str | None = None,
    dataset_version: str | None = None,
    propensity: tuple[float, float] | None = None,
    curated: bool = False,
    setting: str | None = None,
    paper: str | None = None,
    method: str | None = None,
    runs_only: dict[str, str] | None = None,
    newest_setting: bool = False,
) -> Table:
    """Reproduced runs and published results for ``dataset`` (see the module docstring).

    ``newest_setting``: when the runs span several comparable settings, show those of the newest
    run's and say how many were left out, instead of refusing (the static site, which has no flags).

    ``runs_only``: exactly these runs (run id -> the label to print, e.g. a sweep's run key),
    each one shown, instead of the best run per configuration.

    ``curated``: only each paper's main-table rows (``main_tables`` / ``main`` in the leaderboard
    files), one per method and setting across papers, in sections per setting (full, few-shot,
    zero-shot) sorted by the first metric, each reproduced run beside the published row it is
    compared with. ``setting`` (a prefix: "few-shot" matches every few-shot setting), ``paper``
    and ``method`` (case-insensitive, either the method or its printed name) filter rows.
    """
    if runs_only is not None:
        runs = [r for r in store.runs(dataset=dataset, status="finished") if r["run_id"] in runs_only]
    elif all_runs:
        runs = store.runs(dataset=dataset, status="finished")
    else:
        runs = store.best_runs(dataset, metric=(metrics or DEFAULT_METRICS)[0], latest=pick == "latest")
    unfiltered_runs = runs
    unit = "runs" if all_runs or runs_only is not None else "configurations (best run of each)"
    runs, left_out = _select_setting(dataset, runs, split, dataset_version, propensity, unit, newest_setting)
    references = store.reference_results(dataset=dataset)
    unfiltered_references = references
    if setting is not None:
        runs = [r for r in runs if _setting_matches(run_setting(r["supervision"], r["label_fraction"]), setting)]
        references = [r for r in references if _setting_matches(r["setting"], setting)]
    if paper is not None:
        references = [r for r in references if r["paper"].lower() == paper.lower()]
    if method is not None:
        runs = [r for r in runs if _name_key(r["method"]) == _name_key(method)]
        references = [
            r for r in references if _name_key(method) in (_name_key(r["method"]), _name_key(r["printed_name"]))
        ]
    hidden = 0
    if curated:
        before = len({_ref_key(r) for r in references})
        references = _main_rows(references)
        hidden = before - len({_ref_key(r) for r in references})
    other_copies = {(r["paper"], r["paper_table"], r["printed_name"]) for r in references if r["dataset_variant"]}
    references = [r for r in references if not r["dataset_variant"]]
    given = {
        "--split": split,
        "--dataset-version": dataset_version,
        "--propensity": ",".join(f"{v:g}" for v in propensity) if propensity else None,
        "--setting": setting,
        "--paper": paper,
        "--method": method,
    }
    given = {flag: value for flag, value in given.items() if value is not None}
    if not runs and not references:
        if given and (unfiltered_runs or unfiltered_references):
            # the data is there: say which filters left nothing, and what they could have matched
            raise XmcbenchError(
                f"nothing in the table of {dataset} matches {' '.join(f'{k} {v}' for k, v in given.items())}; "
                f"it has {len(unfiltered_runs)} reproduced and {len({_ref_key(r) for r in unfiltered_references})} "
                f"published row(s): {_what_there_is(unfiltered_runs, unfiltered_references)}"
            )
        raise XmcbenchError(
            f"nothing to show for dataset {dataset!r}: no finished runs in {store.path} and no published results; "
            f"index run directories with `xmcbench ingest DIR`, or check the name with `xmcbench datasets list`"
        )

    details = store.run_details([r["run_id"] for r in runs])
    run_rows = [_run_row(run, details[run["run_id"]]) for run in runs]
    ref_rows = _reference_rows(references)
    rows = run_rows + ref_rows

    present = {name for row in rows for name in row["_metrics"]}
    chosen, notes = _choose_metrics(metrics, present)
    deltas = _add_deltas(run_rows, ref_rows, chosen)
    if runs_only:
        for row in run_rows:
            row["method"] = runs_only.get(row["source"]) or row["method"]
    for row in rows:
        for name in chosen:
            row[name] = row["_metrics"].get(name)
        if "anchor" in row:
            row["_anchor"] = row.pop("anchor")
        for key in [key for key in row if key.startswith("_") and key != "_anchor"]:  # bookkeeping, not columns
            del row[key]

    higher = {name: s["higher_is_better"] for d in details.values() for name, s in d["scores"].items()}
    table = Table(
        dataset=runs[0]["dataset"] if runs else references[0]["dataset"],
        metrics=chosen,
        columns=_columns(chosen, deltas, rows),
        rows=rows,
        setting={key: runs[0][key] for key in COMPARABILITY_KEY} if runs else {},
        higher_is_better={name: higher.get(name, True) for name in chosen},  # every XMC metric is "more is better"
        notes=notes,
    )
    if curated:
        _curate(table)
    for row in rows:
        row.pop("_anchor", None)
    table.best = _best_cells(table)
    if hidden:
        table.notes.append(
            f"{hidden} published ablation / variant / duplicate rows hidden (--all-published shows them)"
        )
    if any(not row["ranked"] for row in rows):
        table.notes.append("rows evaluated on part of the test set are not ranked")
    if other_copies:
        table.notes.append(f"{len(other_copies)} published rows on another copy of the dataset are not shown")
    if any(r["gpu_hours"] is not None for r in ref_rows):
        table.notes.append("published GPU-hours = training time × GPUs as reported (training only)")
    if any(r["paper"].lower() == "dexml" for r in references):
        table.notes.append(
            "DEXML's published numbers were selected on the test set (its released code keeps the epoch with "
            "the best test nDCG@5); xmcbench selects only on a validation split of the training data"
        )
    table.notes.extend(_count_notes(table.dataset, runs))
    if left_out:
        table.notes.append(_left_out_note(dataset, left_out))
    run_filters = {flag: value for flag, value in given.items() if flag != "--paper"}
    if not runs and run_filters:  # else a filter that left out every run would pass for "no runs yet"
        filters = " ".join(f"{k} {v}" for k, v in run_filters.items())
        if unfiltered_runs:
            there = _what_there_is(unfiltered_runs, [])
            table.warnings.append(f"no run matches {filters}: published rows only; the runs of {dataset} have {there}")
        else:
            table.warnings.append(
                f"no run matches {filters}: no finished run of {dataset} is indexed; published rows only"
            )
        table.notes[:0] = table.warnings  # first: it changes what the table means
    return table


def _what_there_is(runs: list[dict], references: list[dict]) -> str:
    """The values the table's filters could take for these rows, e.g. "splits test; settings full"."""

    def values(items) -> str:
        found = sorted({str(v) for v in items if v is not None})
        return ", ".join(found[:8]) + (" …" if len(found) > 8 else "") if found else "–"

    settings = [run_setting(r["supervision"], r["label_fraction"]) for r in runs] + [r["setting"] for r in references]
    parts = [f"settings {values(settings)}"]
    if runs:
        ab = [_num(r["propensity_a"]) + "," + _num(r["propensity_b"]) for r in runs]
        parts += [
            f"splits {values(r['split'] for r in runs)}",
            f"versions {values((r['dataset_version'] or '')[:12] or None for r in runs)}",
            f"propensity A,B {values(ab)}",
        ]
    parts.append(f"methods {values([r['method'] for r in runs] + [r['method'] for r in references])}")
    if references:
        parts.append(f"papers {values(r['paper'] for r in references)}")
    return "; ".join(parts)


def _count_notes(dataset: str, runs: list[dict]) -> list[str]:
    """Say when the files scored hold other counts than the catalogue's published ones."""
    from xmcbench.data import get_spec

    try:
        paper = get_spec(dataset).paper_counts
    except XmcbenchError:
        return []
    notes = []
    for what, key in (("test queries", "test"), ("labels", "labels")):
        scored = {r.get("n_queries" if key == "test" else "n_labels") for r in runs if r.get("split", "test") == "test"}
        scored.discard(None)
        published = paper.get(key)
        if published and scored and scored != {published}:
            files = ", ".join(f"{n:,}" for n in sorted(scored))
            notes.append(f"the files scored have {files} {what}; the papers' count is {published:,}")
    return notes


# -- curating ---------------------------------------------------------------------------------

SECTIONS = ("full", "few-shot", "zero-shot")


def section_of(setting: str | None) -> str:
    """full / few-shot / zero-shot: the section a setting is shown in."""
    setting = setting or "full"
    return next((s for s in SECTIONS if setting.startswith(s)), setting)


def _setting_order(setting: str | None) -> tuple:
    """Settings of one section in a reading order: few-shot-1% before few-shot-5% before few-shot-10%."""
    match = re.search(r"([0-9.]+)%", setting or "")
    return (float(match.group(1)) if match else 0.0, setting or "")


def _setting_matches(value: str | None, wanted: str) -> bool:
    value, wanted = (value or "full").lower(), wanted.lower().replace("_", "-")
    return value == wanted or value.startswith(wanted)


def _ref_key(ref: dict) -> tuple:
    return (ref["paper"], ref["paper_table"], ref["method"], ref["variant"], ref["setting"], ref["dataset"])


def _main_rows(references: list[dict]) -> list[dict]:
    """Main-table rows only, and one row per published result across papers.

    Which tables are main is data (``main_tables`` / ``main`` in leaderboard/*.yaml); a row the
    files do not know (a test's own rows) counts as main. Duplicates are the same printed method
    in two papers, or the same method (whatever its printed name) with the same numbers: a paper
    copying another's result ("DEXML ◆" in PRIME's Table 3 is DEXML's "DecoupledSoftmax DEXML",
    "MACLR*" in LMTX's table is MACLR's "MACLR (ours)"). Of duplicates the method's own paper wins,
    then the row with most numbers, then paper order.
    """
    minor = _minor_rows()
    kept = [
        r
        for r in references
        if (r["paper"], r["paper_table"], r["dataset"], r["method"], r["variant"], r["setting"]) not in minor
    ]
    by_row: dict[tuple, list[dict]] = {}
    for ref in kept:
        by_row.setdefault(_ref_key(ref), []).append(ref)
    best: dict[tuple, tuple] = {}  # (printed name, setting) -> chosen row key
    for key, values in by_row.items():
        name = (values[0]["dataset"], _name_key(values[0]["printed_name"]), key[4])
        rank = (_name_key(key[0]) != _name_key(key[2]), -len(values), key[0], key[1])
        if name not in best or rank < best[name][0]:
            best[name] = (rank, key)
    chosen = {key for _, key in best.values()}
    chosen -= _copied_rows({key: values for key, values in by_row.items() if key in chosen})
    return [r for r in kept if _ref_key(r) in chosen]


SAME_VALUE = 0.011  # papers print two decimals; a copied number may be rounded the other way


def _copied_rows(by_row: dict[tuple, list[dict]]) -> set[tuple]:
    """Keys of rows that repeat another row's result: same method and setting, and at least two
    metrics in common, all within ``SAME_VALUE`` (one shared number could agree by chance)."""

    def rank(key: tuple) -> tuple:
        return (_name_key(key[0]) != _name_key(key[2]), -len(by_row[key]), key[0], key[1], key[3] or "")

    groups: dict[tuple, list[tuple]] = {}
    for key, values in by_row.items():
        if all(v["test_queries"] is None for v in values):  # a row on a sample of the test set is its own result
            groups.setdefault((key[5], _name_key(key[2]), key[4]), []).append(key)
    copied: set[tuple] = set()
    for keys in groups.values():
        kept: list[tuple] = []
        for key in sorted(keys, key=rank):
            mine = {v["metric"]: v["value"] for v in by_row[key]}
            for other in kept:
                theirs = {v["metric"]: v["value"] for v in by_row[other]}
                shared = set(mine) & set(theirs)
                if len(shared) >= 2 and all(abs(mine[m] - theirs[m]) <= SAME_VALUE for m in shared):
                    copied.add(key)
                    break
            else:
                kept.append(key)
    return copied


_MINOR_CACHE: dict[tuple, frozenset] = {}


def _minor_rows() -> frozenset:
    """Keys of the published rows that are not main results, from the leaderboard files (cached per file state)."""
    from xmcbench.leaderboard import load_reference_files, reference_dir

    try:
        folder = reference_dir()
        state = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in folder.glob("*.yaml")))
        if state not in _MINOR_CACHE:
            files = load_reference_files(folder)
            _MINOR_CACHE.clear()
            _MINOR_CACHE[state] = frozenset(
                (row.paper, row.table, row.dataset, row.method, row.variant, row.setting)
                for file in files
                for row in file.rows
                if not file.is_main(row)
            )
        return _MINOR_CACHE[state]
    except Exception:  # noqa: BLE001 - a broken leaderboard folder is reported elsewhere; show everything
        return frozenset()


def _curate(table: Table) -> None:
    """Sections per setting, sorted by the first metric, each reproduced row after its published row."""
    metric = table.metrics[0] if table.metrics else None
    published = [r for r in table.rows if r["kind"] == "published"]
    anchors = {r["source"] + "|" + r["method"]: r for r in published}

    def value(row: dict) -> float:
        v = row.get(metric) if metric else None
        return -v if isinstance(v, (int, float)) else float("inf")

    def key(row: dict) -> tuple:
        anchor = anchors.get(row.get("_anchor") or "") if row["kind"] == "reproduced" else row
        anchor = anchor or row
        section = section_of(row["setting"])
        order = SECTIONS.index(section) if section in SECTIONS else len(SECTIONS)
        return (
            order,
            section,
            _setting_order(anchor["setting"]),
            value(anchor),
            anchor["source"],
            anchor["method"],
            row is not anchor,
            value(row),
            row["source"],
        )

    table.rows.sort(key=key)
    for row in table.rows:
        row["section"] = section_of(row["setting"])
        row.pop("_anchor", None)


# -- selecting comparable runs ---------------------------------------------------------------


def _select_setting(
    dataset: str,
    runs: list[dict],
    split: str | None,
    version: str | None,
    propensity: tuple[float, float] | None,
    unit: str = "runs",
    newest: bool = False,
) -> tuple[list[dict], list[dict]]:
    """(the runs of one comparable setting, the runs left out): refused when several remain, unless
    ``newest`` (then the newest run's setting is kept)."""
    if split is not None:
        runs = [r for r in runs if r["split"] == split]
    if version is not None:
        runs = [r for r in runs if (r["dataset_version"] or "").startswith(version)]
    if propensity is not None:
        runs = [r for r in runs if (r["propensity_a"], r["propensity_b"]) == tuple(propensity)]
    groups = _by_setting(runs)
    if len(groups) > 1 and newest:
        kept = _newest_group(groups)
        ids = {r["run_id"] for r in kept}
        return kept, [r for r in runs if r["run_id"] not in ids]
    if len(groups) > 1:
        listing = "; ".join(
            f"split {k[0]}, version {k[1] or '?'}, A/B {_num(k[2])}/{_num(k[3])}, filter {k[4] or 'none'} "
            f"({len(g)} {unit})"
            for k, g in groups.items()
        )
        raise XmcbenchError(
            f"runs of {dataset} were made under {len(groups)} different settings, which one table never mixes: "
            f"{listing}. Choose one with --split, --dataset-version (a prefix is enough) or --propensity A,B"
        )
    return runs, []


def _by_setting(runs: list[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault(tuple(run[key] for key in COMPARABILITY_KEY), []).append(run)
    return groups


def _newest_group(groups: dict[tuple, list[dict]]) -> list[dict]:
    """The runs of the setting the newest run was made under (the dataset as it is now, most likely)."""
    return max(groups.values(), key=lambda g: max(str(r.get("created_at") or "") for r in g))


def _left_out_note(dataset: str, left_out: list[dict]) -> str:
    versions = sorted({(r["dataset_version"] or "?")[:12] for r in left_out})
    return (
        f"{dataset}: {len(left_out)} run(s) made under another setting (dataset version {', '.join(versions)}, "
        f"split, propensity A/B or filter) left out; `xmcbench table --dataset {dataset}` lists the settings"
    )


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


# -- rows ------------------------------------------------------------------------------------


def run_setting(supervision: str | None, label_fraction: float | None) -> str:
    """A run's supervision in the leaderboard's words: full, zero-shot, few-shot-<n>%."""
    supervision = (supervision or "full").replace("_", "-")
    if supervision == "few-shot" and label_fraction is not None:
        return f"few-shot-{label_fraction * 100:g}%"
    return supervision


def _run_row(run: dict, details: dict) -> dict[str, Any]:
    compute = details["compute"] or {}
    acc = details["accounting"] or {}
    coverage = None
    if run["n_queries"] and run["n_queries_evaluated"] is not None:
        coverage = 100.0 * run["n_queries_evaluated"] / run["n_queries"]
    return {
        "method": run["method"],
        "encoder": run["encoder"],
        "setting": run_setting(run["supervision"], run["label_fraction"]),
        "source": run["run_id"],
        "kind": "reproduced",
        "ranked": coverage is None or coverage >= 100.0,
        "notes": None,
        "_metrics": {name: s["value"] for name, s in details["scores"].items()},
        "_ci": {
            name: (s["ci_lo"], s["ci_hi"])
            for name, s in details["scores"].items()
            if s.get("ci_lo") is not None and s.get("ci_hi") is not None
        },
        "coverage": coverage,
        "gpu_hours": compute.get("gpu_hours"),
        "gpus": _devices(compute),
        "batch_size": acc.get("batch_size"),
        "label_pool": _pool(acc.get("pool_size_mean"), acc.get("pool_size_max")),
        "delta_vs": None,
    }


def _devices(compute: dict) -> str | None:
    if not compute:
        return None
    if compute.get("device_type") == "cuda":
        names = compute.get("device_names") or ["GPU"]
        return f"{names[0]} × {compute.get('device_count') or len(names)}"
    return "CPU"


def _pool(mean: float | None, largest: int | None) -> str | None:
    if mean is None:
        return None
    return f"{mean:,.0f}" + (f" (max {largest:,})" if largest is not None and largest != round(mean) else "")


def _reference_rows(references: list[dict]) -> list[dict[str, Any]]:
    """Pivot the long reference table: one row per printed row (paper, table, method, variant, setting)."""
    rows: dict[tuple, dict[str, Any]] = {}
    for ref in references:
        key = (ref["paper"], ref["paper_table"], ref["method"], ref["variant"], ref["setting"])
        row = rows.get(key)
        if row is None:
            hours, gpus = ref["train_time_hours"], ref["gpus"]
            partial = ref["test_queries"] is not None
            row = rows[key] = {
                "method": ref["printed_name"],
                "encoder": None,
                "setting": ref["setting"],
                "source": f"{ref['paper']}:{ref['paper_table']}",
                "kind": "published",
                "ranked": not partial,
                "notes": "; ".join(
                    n
                    for n in (f"evaluated on {ref['test_queries']:,} test queries" if partial else None, ref["notes"])
                    if n
                )
                or None,
                "_method": ref["method"],
                "_variant": ref["variant"],
                "_paper": ref["paper"],
                "_metrics": {},
                "coverage": None,
                "gpu_hours": hours * gpus if hours is not None and gpus else None,
                "gpus": f"{ref['gpu_type'] or 'GPU'} × {gpus}" if gpus else ref["gpu_type"],
                "batch_size": ref["batch_size"],
                "label_pool": _pool_text(ref["label_pool"]),
                "delta_vs": None,
            }
        row["_metrics"][ref["metric"]] = ref["value"]
    return list(rows.values())


def _pool_text(value: Any) -> str | None:
    """A published label pool as people read it: "501070" -> "501,070" ("~22K" stays as printed)."""
    if value is None:
        return None
    text = str(value).strip()
    return f"{int(text):,}" if text.isdigit() else text


def _name_key(name: str) -> str:
    """'DEXML', 'dexml', 'Zero-Shot' -> comparable keys ('dexml', 'zeroshot')."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _add_deltas(run_rows: list[dict], ref_rows: list[dict], metrics: list[str]) -> list[str]:
    """Add "<metric> Δ" (reproduced − published) to runs with a published counterpart; returns metrics with any Δ."""
    with_delta: set[str] = set()
    for row in run_rows:
        method = _name_key(row["method"])
        matches = [
            r for r in ref_rows if r["ranked"] and _name_key(r["_method"]) == method and r["setting"] == row["setting"]
        ]
        if not matches:
            continue
        # the method's own paper, its plain row (no variant), the row with most of the metrics shown
        ref = min(
            matches,
            key=lambda r: (
                _name_key(r["_paper"]) != method,
                r["_variant"] is not None,
                -len(set(r["_metrics"]) & set(metrics)),
                r["source"],
                r["method"],
            ),
        )
        row["delta_vs"] = f"{ref['method']} ({ref['source']})"
        row["anchor"] = ref["source"] + "|" + ref["method"]
        for name in metrics:
            ours, theirs = row["_metrics"].get(name), ref["_metrics"].get(name)
            if ours is not None and theirs is not None:
                row[f"{name} Δ"] = ours - theirs
                ci = row["_ci"].get(name)
                if ci is not None:  # the run's own 95% interval, shifted by the published value
                    row[f"{name} Δ CI"] = [ci[0] - theirs, ci[1] - theirs]
                with_delta.add(name)
    return [m for m in metrics if m in with_delta]


def _choose_metrics(requested: list[str] | None, present: set[str]) -> tuple[list[str], list[str]]:
    """Metric columns: the requested ones (matched case-insensitively), or the defaults present."""
    by_lower = {name.lower(): name for name in present}
    if requested:
        chosen = list(dict.fromkeys(by_lower.get(name.lower(), name) for name in requested))
        missing = [name for name in chosen if name not in present]
        return chosen, ([f"no row has {', '.join(missing)}"] if missing else [])
    chosen = [name for name in DEFAULT_METRICS if name in present]
    if not chosen:  # runs evaluated with other metrics only: show what they have
        chosen = sorted(present, key=_metric_order)
    return chosen, []


def _metric_order(name: str) -> tuple:
    family, k = parse_metric_name(name)
    rank = _FAMILY_ORDER.index(family) if family in _FAMILY_ORDER else len(_FAMILY_ORDER)
    return (rank, family, k or 0)


def _columns(metrics: list[str], deltas: list[str], rows: list[dict]) -> list[Column]:
    columns = [Column("method", "method", "text")]
    if any(row["encoder"] for row in rows):
        columns.append(Column("encoder", "encoder", "text"))
    columns += [Column("setting", "setting", "text"), Column("source", "source", "text")]
    for name in metrics:
        columns.append(Column(name, name, "metric"))
        if name in deltas:
            columns.append(Column(f"{name} Δ", f"{name} Δ", "delta"))
            if name == metrics[0]:
                columns.append(Column(f"{name} Δ CI", f"{name} Δ 95% CI", "interval"))
    if deltas:
        columns.append(Column("delta_vs", "Δ vs", "text"))
    columns += [
        Column("coverage", "coverage %", "number"),
        Column("gpu_hours", "GPU-hours", "number"),
        Column("gpus", "GPU × count", "text"),
        Column("batch_size", "batch size", "number"),
        Column("label_pool", "label pool", "text"),
    ]
    return columns


def _best_cells(table: Table) -> dict[str, set[int]]:
    best: dict[str, set[int]] = {}
    for name in table.metrics:
        values = [(i, row[name]) for i, row in enumerate(table.rows) if row["ranked"] and row.get(name) is not None]
        if not values:
            continue
        pick = max if table.higher_is_better[name] else min
        top = pick(v for _, v in values)
        best[name] = {i for i, v in values if v == top}
    return best


# -- the overview: methods × datasets ---------------------------------------------------------

DATASET_SHORT = {
    "LF-AmazonTitles-131K": "AT-131K",
    "LF-Amazon-131K": "A-131K",
    "LF-WikiSeeAlsoTitles-320K": "WSAT-320K",
    "LF-WikiSeeAlso-320K": "WSA-320K",
    "LF-WikiTitles-500K": "WT-500K",
    "LF-Wikipedia-500K": "W-500K",
    "LF-AmazonTitles-1.3M": "AT-1.3M",
    "EURLex-4K": "EURLex-4K",
}


def build_overview(
    store: Store,
    metric: str = "P@1",
    setting: str | None = None,
    paper: str | None = None,
    method: str | None = None,
    curated: bool = True,
) -> Table:
    """Every dataset at once: one row per method and setting, its best ``metric`` per dataset.

    Published rows (main tables only when ``curated``; a method printed by several papers keeps
    its best value) and reproduced runs (best finished run, ``source`` "reproduced") are separate
    rows. Columns are datasets (headers abbreviated: ``DATASET_SHORT``), in the registry's order.
    """
    references = [r for r in store.reference_results() if not r["dataset_variant"]]
    references = [r for r in references if r["test_queries"] is None]  # samples are not comparable
    if setting is not None:
        references = [r for r in references if _setting_matches(r["setting"], setting)]
    if paper is not None:
        references = [r for r in references if r["paper"].lower() == paper.lower()]
    if method is not None:
        references = [
            r for r in references if _name_key(method) in (_name_key(r["method"]), _name_key(r["printed_name"]))
        ]
    if curated:  # duplicates are found on every metric a row has, then the one metric is kept
        references = _main_rows(references)
    references = [r for r in references if r["metric"] == metric]
    runs, left_out = [], []
    per_dataset: dict[str, list[dict]] = {}
    for run in store.runs(status="finished"):
        per_dataset.setdefault(run["dataset"], []).append(run)
    for dataset_runs in per_dataset.values():  # one table never mixes settings: nor does a column here
        groups = _by_setting(dataset_runs)
        kept = _newest_group(groups) if len(groups) > 1 else dataset_runs
        ids = {r["run_id"] for r in kept}
        runs += kept
        left_out += [(r["dataset"], r) for r in dataset_runs if r["run_id"] not in ids]
    scores = {s["run_id"]: s["value"] for s in store.scores(names=[metric])}
    rows: dict[tuple, dict[str, Any]] = {}
    datasets: list[str] = []

    def put(key: tuple, name: str, row_setting: str, source: str, kind: str, dataset: str, value: float) -> None:
        row = rows.setdefault(
            key,
            {
                "method": name,
                "setting": row_setting,
                "source": source,
                "kind": kind,
                "ranked": True,
                "notes": None,
                "section": section_of(row_setting),
                "_papers": set(),
            },
        )
        if dataset not in datasets:
            datasets.append(dataset)
        if row.get(dataset) is None or value > row[dataset]:
            row[dataset] = value

    for ref in references:
        key = ("published", _name_key(ref["printed_name"]), ref["setting"])
        put(key, ref["printed_name"], ref["setting"], "published", "published", ref["dataset"], ref["value"])
        rows[key]["_papers"].add(ref["paper"])
    for run in runs:
        if run["run_id"] not in scores:
            continue
        run_set = run_setting(run["supervision"], run["label_fraction"])
        if setting is not None and not _setting_matches(run_set, setting):
            continue
        if method is not None and _name_key(run["method"]) != _name_key(method):
            continue
        key = ("reproduced", _name_key(run["method"]), run_set)
        put(key, run["method"], run_set, "reproduced", "reproduced", run["dataset"], scores[run["run_id"]])
    if not rows:
        raise XmcbenchError(f"nothing to show: no published {metric} and no finished runs match")
    order = {name: i for i, name in enumerate(CANONICAL_ORDER)}
    datasets.sort(key=lambda d: (order.get(d, len(order)), d.lower()))
    out_rows = []
    for row in rows.values():
        papers = row.pop("_papers")
        if papers:
            row["source"] = ",".join(sorted(papers))
        out_rows.append(row)

    def sort_key(row: dict) -> tuple:
        # a staircase: rows with a value in the first dataset column, best first, then the rows
        # whose first value is in the second column, and so on; every column reads sorted
        section = row["section"]
        rank = SECTIONS.index(section) if section in SECTIONS else len(SECTIONS)
        first = next((i for i, d in enumerate(datasets) if row.get(d) is not None), len(datasets))
        value = row[datasets[first]] if first < len(datasets) else 0.0
        return (rank, section, _setting_order(row["setting"]), first, -value, row["method"])

    out_rows.sort(key=sort_key)
    columns = [
        Column("method", "method", "text"),
        Column("setting", "setting", "text"),
        Column("source", "source", "text"),
    ]
    columns += [Column(d, DATASET_SHORT.get(d, d), "metric") for d in datasets]
    table = Table(
        dataset=f"best {metric} per method",
        metrics=datasets,
        columns=columns,
        rows=out_rows,
        higher_is_better={d: True for d in datasets},
    )
    table.best = _best_cells(table)
    legend = ", ".join(f"{DATASET_SHORT[d]} = {d}" for d in datasets if d in DATASET_SHORT and DATASET_SHORT[d] != d)
    if legend:
        table.notes.append(legend)
    table.notes.append("`xmcbench table --dataset NAME` for one dataset's full table")
    for dataset in sorted({d for d, _ in left_out}):
        table.notes.append(_left_out_note(dataset, [r for d, r in left_out if d == dataset]))
    return table


CANONICAL_ORDER = tuple(DATASET_SHORT)
