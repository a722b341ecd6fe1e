"""``xmcbench plan RECIPE``: GPU memory per device, label/classifier sizes and GPU-hours, before a run."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from xmcbench.cli._common import console, err_console, handle_errors, strict_json
from xmcbench.errors import XmcbenchError


@handle_errors
def plan(
    recipe: Annotated[
        str,
        typer.Argument(
            help="Recipe YAML file, or a shipped recipe's name such as dexml/eurlex-4k-all-negatives "
            "(see `xmcbench recipes list`)."
        ),
    ],
    gpu: Annotated[
        str | None,
        typer.Option(
            help="Device: A100-40GB, A100-80GB, H100-80GB, H200-141GB, V100-32GB, ... "
            "(default: the recipe's hardware.gpu, the GPU its paper used; else A100-40GB)."
        ),
    ] = None,
    num_gpus: Annotated[
        int | None, typer.Option("--num-gpus", "-n", help="GPUs (default: the recipe's hardware.num_gpus).")
    ] = None,
    gpu_mem: Annotated[
        float | None, typer.Option("--gpu-mem", help="Memory per device in GB (overrides the device table).")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a recipe key, e.g. training.batch_size=4096.")
    ] = None,
    judge_params: Annotated[
        float | None,
        typer.Option(
            "--judge-params",
            help="LMTX: the judge LLM's parameters (e.g. 13e9), where neither local weights nor its name say.",
        ),
    ] = None,
    format: Annotated[
        str,
        typer.Option(
            "--format", "-f", help="text or json (exit code 3 in both when it will not fit or a run would refuse it)."
        ),
    ] = "text",
) -> None:
    """Estimate, before a run, GPU memory per device, label-embedding and classifier sizes, step time and
    total GPU-hours for the recipe's dataset and hardware; warn when it will not fit, or when a run would
    refuse the recipe on that hardware (exit code 3).
    For LMTX, also its judge's work: questions, prompt tokens and GPU-hours, at most.

    Batches are padded to their longest text: with the dataset prepared here, its longest texts are
    measured in the encoder's tokens (remembered in the dataset's folder); without it, every text
    counts at max_length, an upper bound the plan names."""
    from xmcbench.run import load_recipe
    from xmcbench.run.plan import plan_recipe
    from xmcbench.run.shipped import resolve_recipe

    format = format.lower()
    if format not in ("text", "json"):
        raise XmcbenchError(f"--format is text or json, not {format!r}")
    result = plan_recipe(
        load_recipe(resolve_recipe(recipe), set_ or []),
        gpu=gpu,
        num_gpus=num_gpus,
        gpu_mem_gb=gpu_mem,
        progress=True,
        judge_params=judge_params,
    )
    if format == "json":
        console.print_json(strict_json(result.as_dict()))
    else:
        console.print(escape(result.render()), highlight=False, soft_wrap=True)
    if result.warnings():  # will not fit, or the run would refuse the recipe
        for warning in result.warnings():
            err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
        raise typer.Exit(3)
