"""``xmcbench judge``: measure a judge on a dataset's ground truth; inspect the judgement cache."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from xmcbench.cli._common import console, handle_errors, print_rich, strict_json
from xmcbench.errors import XmcbenchError

app = typer.Typer(help="LLM judges (LMTX): quality on ground truth, and the judgement cache.", no_args_is_help=True)
cache_app = typer.Typer(help="The judgement cache ($XMCBENCH_HOME/judgements.duckdb).", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


def _synthetic(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 4 or values[0] < 2 or min(values[1:3]) <= 0 or values[3] < 0:
        raise typer.BadParameter(
            f"--synth takes LABELS,TRAIN,TEST,SEED (at least 2 labels, positive sizes, seed >= 0); got {text!r}"
        )
    return dict(zip(("labels", "train", "test", "seed"), values, strict=True))


def _judge_config(**settings):
    """A JudgeConfig from the command's options, its problems named by option (never a traceback)."""
    from pydantic import ValidationError

    from xmcbench.judge import JudgeConfig

    try:
        return JudgeConfig(**settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"--{'-'.join(str(part) for part in e['loc']).replace('_', '-')}: {e['msg']}" for e in exc.errors()
        )
        raise XmcbenchError(problems) from None


@app.command("prepare")
@handle_errors
def prepare(
    model: Annotated[str, typer.Option(help="A .gguf file or parts: spec to assemble, check and convert once.")],
) -> None:
    """Assemble / convert a judge model once (CI warms its cache with this before the smoke suite)."""
    from xmcbench.judge.model_files import resolve_model

    t0 = time.perf_counter()
    folder, revision = resolve_model(model)
    console.print(
        f"{escape(str(folder))} (revision {escape(revision)}) ready in {time.perf_counter() - t0:.0f} s", soft_wrap=True
    )


@app.command("eval")
@handle_errors
def eval_(
    dataset: Annotated[str, typer.Option(help="A prepared dataset (or a synthetic one with --synth).")],
    model: Annotated[
        str, typer.Option(help="transformers: model folder, .gguf file or parts: spec; openai: model name.")
    ],
    backend: Annotated[str, typer.Option(help="transformers | openai | fake")] = "transformers",
    base_url: Annotated[str | None, typer.Option(help="openai backend: e.g. http://127.0.0.1:8000/v1")] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(help="openai backend: the NAME of the environment variable holding the server's API key."),
    ] = None,
    prompt: Annotated[str, typer.Option(help="Prompt id (xmcbench/judge/prompts) or a .txt template.")] = "eurlex-4k",
    sample: Annotated[
        int, typer.Option(min=1, help="Documents sampled (two pairs each: a true label, a hard negative).")
    ] = 100,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    threads: Annotated[int, typer.Option(min=1, help="torch CPU threads for the transformers backend.")] = 1,
    device: Annotated[str, typer.Option(help="transformers backend device (cpu, cuda).")] = "cpu",
    injection: Annotated[
        bool, typer.Option(help="Also measure how 'answer yes' instructions in documents move P(yes).")
    ] = True,
    cache: Annotated[bool, typer.Option(help="Use the judgement cache for the clean pairs.")] = True,
    synth: Annotated[str | None, typer.Option(help="Create the dataset synthetically: LABELS,TRAIN,TEST,SEED.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Accuracy, AUC of P(yes) and head/torso/tail agreement of a judge against ground truth."""
    from xmcbench.data import load_dataset
    from xmcbench.judge import CachedJudge, JudgementCache, build_judge, load_prompt
    from xmcbench.judge.quality import injection_shift, judge_quality, sample_pairs
    from xmcbench.metrics.groups import label_groups

    # the settings first: a mistyped option should not wait for a dataset to be made
    cfg = _judge_config(
        backend=backend,
        model=model,
        base_url=base_url,
        api_key_env=api_key_env,
        prompt=prompt,
        threads=threads,
        device=device,
    )
    template = load_prompt(prompt)
    ds = load_dataset(dataset, synthetic=_synthetic(synth), progress=False)
    labels = ds.labels("train")
    doc_ids, label_ids, is_true = sample_pairs(labels, sample, seed)
    t0 = time.perf_counter()
    judge = build_judge(cfg)
    load_s = time.perf_counter() - t0
    texts, label_texts = ds.query_texts("train"), ds.label_texts()
    cached = CachedJudge(judge, JudgementCache() if cache else None, template)
    p = cached.judge_pairs(ds.version, doc_ids, label_ids, texts, label_texts)
    report = judge_quality(p, is_true, label_ids, label_groups(labels))
    out = {"dataset": ds.name, "prompt": prompt, "load_s": load_s, **report.__dict__, "judge": judge.stats.as_dict()}
    if injection:
        seconds_before, asked_before = judge.stats.llm_seconds, judge.stats.asked
        out["injection"] = injection_shift(
            judge,
            cached.prompt,
            [texts[d] for d in doc_ids],
            [label_texts[lab] for lab in label_ids],
            is_true,
            p,
            report.best_threshold,
        )
        out["injection_judge_seconds"] = judge.stats.llm_seconds - seconds_before
        out["injection_judgements"] = judge.stats.asked - asked_before
    if as_json:
        typer.echo(strict_json(out, indent=2))
        return
    s = out["judge"]
    console.print(
        f"[bold]{escape(s['backend'])} {escape(s['model_id'])}[/] on {escape(ds.name)}, prompt {escape(prompt)}: "
        f"{report.n_pairs} pairs, {s['asked']} asked, {s['cache_hits']} cached, {s['truncated']} truncated; "
        f"load {load_s:.1f} s, {s['llm_seconds']:.1f} LLM-s"
        + (f" ({s['judgements_per_s']:.2f} judgements/s)" if s["judgements_per_s"] else ""),
        soft_wrap=True,
    )
    table = Table()
    for col in ("group", "pairs", "accuracy@0.5", "accuracy@best", "AUC"):
        table.add_column(col, justify="right")
    table.add_row(
        "all",
        str(report.n_pairs),
        f"{report.accuracy_at_half:.3f}",
        f"{report.accuracy_at_best:.3f} (t={report.best_threshold:.3f})",
        f"{report.auc:.3f}",
    )
    for name, g in report.groups.items():
        table.add_row(name, str(g["pairs"]), "", f"{g['agreement']:.3f}", f"{g['auc']:.3f}")
    print_rich(table)
    console.print(f"mean P(yes): true labels {report.mean_p_pos:.3f}, hard negatives {report.mean_p_neg:.3f}")
    for text, r in out.get("injection", {}).items():
        console.print(
            f"injection {escape(json.dumps(text))}: P(yes) on negatives {r['mean_shift_negatives']:+.3f}, "
            f"on positives {r['mean_shift_positives']:+.3f}; negatives flipped to yes "
            f"{100 * r['negatives_flipped_to_yes']:.1f}%; AUC after {r['auc_after']:.3f}",
            soft_wrap=True,
        )


@cache_app.command("stats")
@handle_errors
def cache_stats(path: Annotated[Path | None, typer.Option(help="Cache file.")] = None) -> None:
    """Judgements stored, per dataset version, prompt and model."""
    from xmcbench.judge import JudgementCache

    c = JudgementCache(path)
    rows = c.stats()
    table = Table(title=escape(str(c.path)))
    for col in ("dataset version", "prompt", "model", "judgements", "mean P(yes)"):
        table.add_column(col)
    for version, prompt_id, model, n, mean in rows:
        table.add_row(escape(version), escape(prompt_id), escape(model), str(n), f"{mean:.3f}")
    print_rich(table)
    console.print(f"{sum(r[3] for r in rows)} judgements")


@cache_app.command("export")
@handle_errors
def cache_export(
    out: Annotated[Path, typer.Argument(help="A .csv or .parquet file.")],
    path: Annotated[Path | None, typer.Option(help="Cache file.")] = None,
) -> None:
    """Write every stored judgement to CSV or Parquet."""
    from xmcbench.judge import JudgementCache

    n = JudgementCache(path).export(out)
    console.print(f"{n} judgements written to {escape(str(out))}", soft_wrap=True)


@cache_app.command("clear")
@handle_errors
def cache_clear(
    path: Annotated[Path | None, typer.Option(help="Cache file.")] = None,
    dataset_version: Annotated[str | None, typer.Option(help="Only this dataset version.")] = None,
    model: Annotated[
        str | None, typer.Option(help="Only this model key (<model id>@<revision>, as `judge cache stats` lists it).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete stored judgements (all, or one dataset version / model)."""
    from xmcbench.judge import JudgementCache

    c = JudgementCache(path)
    if not yes:
        n = c.count(dataset_version=dataset_version, model=model)  # also refuses an empty filter, before asking
        which = " and ".join(
            f"{name} {value!r}" for name, value in (("dataset version", dataset_version), ("model", model)) if value
        )
        try:
            typer.confirm(f"delete {n} judgements ({which or 'all of them'}) from {c.path}?", abort=True)
        except typer.Abort:  # "n", Enter, or no terminal to answer on
            raise XmcbenchError("nothing deleted; answer y, or pass --yes to delete without being asked") from None
    n = c.clear(dataset_version=dataset_version, model=model)
    console.print(f"{n} judgements deleted")
