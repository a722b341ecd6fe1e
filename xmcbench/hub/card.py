"""The model card (README.md) of a pushed run, following the Hub's conventions.

Front matter through huggingface_hub's ``ModelCardData`` / ``EvalResult`` so the Hub renders the
scores (model-index: task type, dataset type + name + split, metric type + value, source); the
body says what was trained on what, with which recipe, on what compute, with what label pool,
against which published number, and how to load and evaluate it. Everything that came from the
run passes through ``publishable`` once more: a card is public (no secrets, no local paths).
"""

from __future__ import annotations

from typing import Any

from xmcbench.errors import XmcbenchError
from xmcbench.redact import publishable

TASK_TYPE = "text-classification"
TASK_NAME = "Extreme multi-label classification"
PAPER_METHOD = {"dexml": ("dexml", "DEXML"), "unidec": ("unidec", "UniDEC"), "prime": ("prime", "PRIME")}
ENCODER_NOTE = {
    "dexml": "The encoder alone, with sentence-transformers (query and label embeddings are the ones xmcbench "
    "searches with):",
    "prime": "The encoder alone, with sentence-transformers (the query embeddings xmcbench searches with; "
    "labels are searched through their prototypes, `xmcbench/label_embeddings.safetensors`):",
    "unidec": "The shared encoder Φ alone, with sentence-transformers (UniDEC searches with its heads on top of "
    "it, `xmcbench/heads.safetensors`; use xmcbench.hub.load for predictions):",
}
METRIC_TYPES = {"P": "precision", "nDCG": "ndcg", "PSP": "psp", "PSnDCG": "psndcg", "R": "recall"}
PACKAGED_BASES = {"all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2"}


def base_model(encoder: str | None) -> str | None:
    """The Hub id the run started from, when it has one (a local folder has none)."""
    if not encoder:
        return None
    if encoder.lower().startswith("hf://"):
        return encoder[5:].split("@")[0]
    if encoder.lower() in PACKAGED_BASES:
        return PACKAGED_BASES[encoder.lower()]
    from pathlib import Path

    if encoder.startswith(("/", ".", "~")) or encoder.count("/") > 1 or Path(encoder).exists():
        return None  # a local folder
    return encoder  # ORG/NAME, or a legacy id without an org (distilbert-base-uncased)


def metric_type(name: str) -> str:
    """'P@1' -> 'precision_at_1' (the Hub's metric ids are lower-case words, as MTEB's ndcg_at_10)."""
    family, _, k = name.partition("@")
    word = METRIC_TYPES.get(family, family.lower())
    return f"{word}_at_{k}" if k else word


def published_comparison(record: dict) -> tuple[dict | None, list[tuple[str, float, float]]]:
    """The paper's own row for this method, dataset and supervision setting (as ``xmcbench table``
    compares them), and (metric, ours, theirs) pairs; none for a run evaluated on part of the test set."""
    from xmcbench.report.table import run_setting

    paper_method = PAPER_METHOD.get(record["model"]["method"])
    if paper_method is None:
        return None, []
    task = record["task"]
    evaluated, queries = task.get("n_queries_evaluated"), task.get("n_queries")
    if evaluated is not None and queries is not None and evaluated < queries:  # not the paper's test set
        return None, []
    setting = run_setting(task.get("supervision"), task.get("label_fraction"))
    try:
        from xmcbench.leaderboard import load_reference_results

        rows = load_reference_results()
    except XmcbenchError:
        return None, []
    dataset = str(record["task"].get("dataset") or "").lower()
    paper, method = paper_method
    matches = [
        r
        for r in rows
        if r.paper == paper
        and r.method == method
        and r.dataset.lower() == dataset
        and r.setting == setting
        and not r.dataset_variant
    ]
    if not matches:
        return None, []
    row = sorted(matches, key=lambda r: (r.variant is not None, r.table))[0]
    ours = {s["name"]: s["value"] for s in record.get("scores") or []}
    pairs = [(m, ours[m], v) for m, v in row.metrics.items() if m in ours]
    return {"paper": row.paper, "table": row.table, "printed_name": row.printed_name, "metrics": row.metrics}, pairs


def eval_results(record: dict, repo_url: str | None):
    from huggingface_hub import EvalResult

    task = record["task"]
    dataset = str(task.get("dataset"))
    return [
        EvalResult(
            task_type=TASK_TYPE,
            task_name=TASK_NAME,
            dataset_type=dataset,
            dataset_name=dataset,
            dataset_split=task.get("split"),
            dataset_revision=task.get("dataset_version"),
            metric_type=metric_type(s["name"]),
            metric_name=s["name"],
            metric_value=round(float(s["value"]), 4),
            source_name="xmcbench",
            source_url=repo_url,
        )
        for s in record.get("scores") or []
    ]


def card_data(record: dict, repo_id: str, repo_url: str | None, license: str):
    from huggingface_hub import ModelCardData

    method = record["model"]["method"]
    base = base_model(record["model"].get("encoder"))
    return ModelCardData(
        model_name=repo_id,
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=[
            "xmcbench",
            method,
            "extreme-multi-label",
            "extreme-classification",
            "dual-encoder",
            "sentence-transformers",
        ],
        datasets=[str(record["task"].get("dataset"))],
        base_model=base,
        license=license,
        eval_results=eval_results(record, repo_url),
    )


def render_card(
    record: dict, recipe_text: str, repo_id: str, *, repo_url: str | None = None, license: str = "other"
) -> str:
    """README.md text: YAML front matter + body."""
    from huggingface_hub import ModelCard

    data = card_data(record, repo_id, repo_url, license)
    content = f"---\n{data.to_yaml()}\n---\n\n{_body(record, recipe_text, repo_id)}"
    card = ModelCard(publishable(content))  # parses the front matter: a card that would not parse is refused here
    return str(card)


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _body(record: dict, recipe_text: str, repo_id: str) -> str:
    task, model = record["task"], record["model"]
    method = model["method"]
    comp = record.get("compute") or {}
    acc = record.get("accounting") or {}
    lines = [
        f"# {repo_id.split('/')[-1]}",
        "",
        f"A **{method}** model for extreme multi-label classification, trained and evaluated with "
        f"xmcbench (run `{record['run_id']}`).",
        "",
        f"- **Dataset:** {task.get('dataset')} (version `{_num(task.get('dataset_version'))}`), "
        f"{_num(task.get('n_labels'))} labels, supervision {task.get('supervision') or 'full'}",
        f"- **Evaluated on:** split `{task.get('split')}`, {_num(task.get('n_queries_evaluated'))} of "
        f"{_num(task.get('n_queries'))} queries; propensity A/B {_num(task.get('propensity_a'))}/"
        f"{_num(task.get('propensity_b'))}; filter `{_num(task.get('filter'))}`",
        f"- **Initial encoder:** `{model.get('encoder')}`"
        + (f" @ `{model['encoder_revision']}`" if model.get("encoder_revision") else ""),
        f"- **Parameters:** {_num(model.get('params_total'))} total, {_num(model.get('params_trainable'))} trainable",
        "",
        "## Results",
        "",
        "| metric | value | 95% CI |",
        "|---|---|---|",
    ]
    for s in record.get("scores") or []:
        ci = f"{_num(s.get('ci_lo'))} – {_num(s.get('ci_hi'))}" if s.get("ci_lo") is not None else "–"
        lines.append(f"| {s['name']} | {_num(s['value'])} | {ci} |")
    ref, pairs = published_comparison(record)
    lines += ["", "## Compared with the published number", ""]
    if ref is None:
        lines.append("No published number for this method on this dataset in xmcbench's leaderboard data.")
    else:
        lines += [
            f"{ref['paper'].upper()} {ref['table']}, row “{ref['printed_name']}”:",
            "",
            "| metric | this model | published | difference |",
            "|---|---|---|---|",
        ]
        lines += [f"| {m} | {_num(ours)} | {_num(theirs)} | {ours - theirs:+.2f} |" for m, ours, theirs in pairs]
    walls = comp.get("wall_time_s") or {}
    names = comp.get("device_names") or []
    device = f"{names[0] if names else comp.get('device_type', '–')} × {_num(comp.get('device_count'))}"
    lines += [
        "",
        "## Compute",
        "",
        f"- **Devices:** {device} ({comp.get('device_type', '–')})",
        f"- **GPU-hours:** {_num(comp.get('gpu_hours'), 3)} ((train + predict wall time) × GPUs used)",
        f"- **Wall time:** {_num(sum(v for v in walls.values() if isinstance(v, (int, float))), 1)} s in all; "
        + ", ".join(f"{k} {_num(v, 1)} s" for k, v in walls.items()),
        f"- **Peak memory:** GPU {_num(comp.get('peak_gpu_mem_gb'))} GB, host {_num(comp.get('peak_host_mem_gb'))} GB",
        "",
        "## Negative pool accounting",
        "",
        f"- **Batch size:** {_num(acc.get('batch_size'))} queries per step",
        f"- **Labels scored per step:** mean {_num(acc.get('pool_size_mean'), 1)}, max {_num(acc.get('pool_size_max'))}",
        f"- **Positives per query in the pool:** {_num(acc.get('positives_per_query'))}",
        f"- **Hard negatives per query:** {_num(acc.get('hard_negatives_per_query'))}",
        f"- **Refresh interval:** {_num(acc.get('refresh_interval'))} epochs; **steps:** {_num(acc.get('steps'))}",
        "",
        "## Recipe (resolved)",
        "",
        "```yaml",
        recipe_text.rstrip(),
        "```",
        "",
        "## How to use",
        "",
        ENCODER_NOTE.get(method, ENCODER_NOTE["dexml"]),
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        f"model = SentenceTransformer({repo_id!r})",
        'queries = model.encode(["a query"])',
        "```",
        "",
        "The whole predictor (encoder, label side, method heads) with xmcbench:",
        "",
        "```python",
        "import xmcbench.hub",
        f"model = xmcbench.hub.load({repo_id!r})",
        'top = model.predict(["a query"], k=5)          # CSR: columns are label ids of the dataset',
        f"scores = model.evaluate({str(task.get('dataset'))!r}, split={task.get('split')!r})   # same metrics as the run",
        "```",
        "",
        "The run's own record and recipe are in `record.json` and `recipe.yaml`; the label side and the "
        "method's heads are safetensors under `xmcbench/` (`label_ids` gives the dataset label each row belongs to).",
        "",
    ]
    return "\n".join(lines)
