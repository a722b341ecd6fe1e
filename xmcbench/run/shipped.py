"""The recipes shipped with xmcbench, runnable by name from a checkout or an installed wheel.

They live in the repository's top-level ``recipes/`` folder; the symlink ``xmcbench/recipes ->
../recipes`` ships them inside the wheel as package data (like ``leaderboard_data``). A recipe's
name is its path under that folder without ``.yaml``: ``smoke/tfidf``, ``dexml/lf-amazontitles-1.3m-hard-negatives``;
a unique prefix is enough (``dexml/lf-amazontitles-131k``). Fragments under ``base/`` are
included by other recipes and are not runnable on their own.

Where the folder is looked for, first match wins: ``$XMCBENCH_RECIPES_DIR``; ``recipes/`` beside
the package in a source checkout; the packaged copy ``xmcbench/recipes/``.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from xmcbench.errors import XmcbenchError
from xmcbench.registry import did_you_mean

ENV_DIR = "XMCBENCH_RECIPES_DIR"
FRAGMENTS = ("base",)  # include-only folders


def recipes_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise XmcbenchError(f"${ENV_DIR}={env} is not a folder; point it at a recipes/ folder or unset it")
        return path
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "recipes").is_dir():
        return checkout / "recipes"
    shipped = resources.files("xmcbench").joinpath("recipes")
    if shipped.is_dir():
        return Path(str(shipped))
    raise XmcbenchError(
        f"cannot find the shipped recipes (no recipes/ beside the package, no packaged copy); set ${ENV_DIR}"
    )


def is_fragment(path: Path, root: Path) -> bool:
    """Whether ``path`` is an include-only fragment (under ``base/``), not a runnable recipe."""
    try:
        parts = path.resolve().relative_to(root.resolve()).parts
    except ValueError:
        parts = path.parts
    return any(part in FRAGMENTS for part in parts[:-1])


def list_recipes() -> dict[str, Path]:
    """Runnable shipped recipes: name -> file, sorted by name."""
    root = recipes_dir()
    found = {}
    for path in sorted(root.rglob("*.yaml")):
        if is_fragment(path, root):
            continue
        found[path.relative_to(root).with_suffix("").as_posix()] = path
    return found


def resolve_recipe(text: str | os.PathLike) -> Path:
    """A recipe file from a path, or from a shipped recipe's name (a unique prefix is enough)."""
    path = Path(text)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.yaml"))
        listing = f": {', '.join(inside[:8])}{' …' if len(inside) > 8 else ''}" if inside else " (it holds no *.yaml)"
        raise XmcbenchError(f"{path} is a folder, not a recipe; give one recipe file in it{listing}")
    if path.is_file():
        return path
    name = str(text).removesuffix(".yaml").removesuffix(".yml").strip("/")
    if name.startswith("recipes/"):
        name = name[len("recipes/") :]
    shipped = list_recipes()
    if name in shipped:
        return shipped[name]
    matches = [n for n in shipped if n.startswith(name)]
    if len(matches) == 1:
        return shipped[matches[0]]
    if len(matches) > 1:
        raise XmcbenchError(f"recipe {str(text)!r} matches several shipped recipes: {', '.join(matches)}; give one")
    raise XmcbenchError(
        f"no recipe file {str(text)!r} and no shipped recipe of that name"
        f"{did_you_mean(name, list(shipped))}; `xmcbench recipes list` shows them"
    )
