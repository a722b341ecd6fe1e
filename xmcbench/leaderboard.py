"""Published reference results: the numbers printed in the papers xmcbench reproduces.

The results of PRIME, UniDEC, DEXML, MACLR and LMTX (and every baseline their result tables
report) are data, not code: one YAML file per paper under the repository's ``leaderboard/``
folder, ``{paper: {citation}, tables: {"Table 2": caption}, rows: [row, ...]}``, transcribed
from the papers (see ``leaderboard/README.md`` for what was transcribed and what was skipped).
This module validates those files strictly (unknown keys, non-canonical dataset names, malformed
metric names and duplicate rows are errors naming the file, the line, the row and the key) and
loads them as ``ReferenceRow`` objects for reports to show next to reproduced runs.

Where the files are looked for, first match wins:
1. the ``dir`` argument of ``load_reference_results`` / ``load_reference_files``;
2. ``$XMCBENCH_LEADERBOARD_DIR``;
3. ``leaderboard/`` beside the ``xmcbench`` package in a source checkout (editable install);
4. the copy shipped as package data, ``xmcbench/leaderboard_data/`` (non-editable install).

    from xmcbench.leaderboard import load_reference_results
    rows = [r for r in load_reference_results() if r.dataset == "LF-AmazonTitles-1.3M"]
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from xmcbench.errors import DataFormatError, XmcbenchError
from xmcbench.metrics.names import FAMILIES, is_metric_name
from xmcbench.registry import did_you_mean

ENV_DIR = "XMCBENCH_LEADERBOARD_DIR"
PACKAGE_DATA_DIR = "leaderboard_data"  # inside the xmcbench package, for wheels

PAPERS = ("prime", "unidec", "dexml", "maclr", "lmtx")
CANONICAL_DATASETS = (
    "LF-AmazonTitles-131K",
    "LF-Amazon-131K",
    "LF-WikiSeeAlsoTitles-320K",
    "LF-WikiSeeAlso-320K",
    "LF-WikiTitles-500K",
    "LF-Wikipedia-500K",
    "LF-AmazonTitles-1.3M",
    "EURLex-4K",
)
# full supervision; extreme zero-shot; few-shot with n% of the labels (MACLR Tables 2-3) or
# n% of the positive pairs (MACLR Tables 11-12).
SETTING = re.compile(r"^(full|zero-shot|few-shot-[0-9]+(\.[0-9]+)?%(-pairs)?)$")
# A label pool printed as an abbreviation or an approximation: 1500, "131K", "~1.3M", "~6.4K".
LABEL_POOL_TEXT = re.compile(r"^(~?)([0-9]+(\.[0-9]+)?)([KM]?)$")
TABLE_NAME = re.compile(r"^Table [0-9]+$")

PaperId = Literal[PAPERS]
DatasetName = Literal[CANONICAL_DATASETS]


class PaperCitation(BaseModel):
    """Who wrote the paper and where it appeared; ``id`` names the YAML file."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: PaperId
    title: str = Field(min_length=1)
    authors: list[str] = Field(min_length=1)
    venue: str = Field(min_length=1)
    year: int = Field(ge=1990, le=2100)
    arxiv: str | None = Field(default=None, pattern=r"^[0-9]{4}\.[0-9]{4,5}$")
    url: str | None = None
    source: str | None = None  # which text the numbers were transcribed from
    notes: str | None = None


class ReferenceRow(BaseModel):
    """One row of one published table, for one dataset.

    ``metrics`` holds percentages exactly as printed (a '-' in the paper is simply absent).
    ``method`` is the method's own name (``NGAME``, ``DEXML``); ``variant`` says what the row adds
    to it (``(W)``, ``DE (encoder only)``, ``negative pool ~90K``) and ``printed_name`` is the row
    label as the table prints it. Compute fields are filled only where the paper gives them.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    paper: PaperId
    table: str = Field(pattern=TABLE_NAME.pattern)
    dataset: DatasetName
    dataset_variant: str | None = None  # a copy of the dataset other than the XC repository's
    method: str = Field(min_length=1)
    variant: str | None = None
    printed_name: str = Field(min_length=1)
    setting: str
    metrics: dict[str, float]
    batch_size: int | None = Field(default=None, gt=0)  # queries per optimiser step
    label_pool: int | str | None = None  # labels scored per step (positives + negatives)
    gpus: int | None = Field(default=None, gt=0)
    gpu_type: str | None = None
    train_time_hours: float | None = Field(default=None, gt=0)
    test_queries: int | None = Field(default=None, gt=0)  # set only when not the full test set
    # Is this row one of the paper's main results? None: decided by the file's ``main_tables``;
    # true / false overrides that for one row (an ablation row inside a main table, say).
    main: bool | None = None
    notes: str | None = None

    @field_validator("dataset", mode="before")
    @classmethod
    def _canonical_dataset(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in CANONICAL_DATASETS:
            raise ValueError(
                f"{value!r} is not a canonical dataset name"
                f"{did_you_mean(value, list(CANONICAL_DATASETS))}; use one of " + ", ".join(CANONICAL_DATASETS)
            )
        return value

    @field_validator("setting")
    @classmethod
    def _known_setting(cls, value: str) -> str:
        if not SETTING.match(value):
            raise ValueError(
                f"unknown setting {value!r}; use 'full', 'zero-shot', 'few-shot-<n>%' "
                "(n% of the labels) or 'few-shot-<n>%-pairs' (n% of the positive pairs)"
            )
        return value

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("no metrics; a row needs at least one printed number")
        for name, number in value.items():
            if not is_metric_name(name):
                k = name.rpartition("@")[2]
                hint = did_you_mean(name, [f"{family}@{k}" for family in FAMILIES])
                raise ValueError(f"unknown metric name {name!r}{hint}; use P@k, nDCG@k, PSP@k, PSnDCG@k or R@k")
            if not 0.0 <= number <= 100.0:
                raise ValueError(f"{name} = {number} is not a percentage in [0, 100]")
        return value

    @field_validator("label_pool", mode="before")
    @classmethod
    def _readable_pool(cls, value: Any) -> Any:
        count = isinstance(value, int) and not isinstance(value, bool) and value > 0
        printed = isinstance(value, str) and LABEL_POOL_TEXT.match(value) is not None
        if value is not None and not (count or printed):
            raise ValueError(
                f"label_pool {value!r} is neither a positive whole count (1500) nor a printed "
                "abbreviation in quotes ('131K', '~1.3M')"
            )
        return value

    @property
    def key(self) -> tuple[str, str, str, str, str | None, str]:
        """What makes a row unique: (paper, table, dataset, method, variant, setting)."""
        return (self.paper, self.table, self.dataset, self.method, self.variant, self.setting)

    @property
    def label_pool_count(self) -> float | None:
        """The label pool as a number ('~1.3M' -> 1.3e6); approximate when printed with '~'."""
        if self.label_pool is None or isinstance(self.label_pool, int):
            return self.label_pool
        match = LABEL_POOL_TEXT.match(self.label_pool)
        assert match is not None  # checked by the validator
        scale = {"": 1, "K": 1_000, "M": 1_000_000}[match.group(4)]
        return float(match.group(2)) * scale

    @property
    def gpu_hours(self) -> float | None:
        """Training GPU-hours (train_time_hours × gpus) when the paper gives both."""
        if self.train_time_hours is None or self.gpus is None:
            return None
        return self.train_time_hours * self.gpus


class ReferenceFile(BaseModel):
    """One paper's file: its citation, the captions of the tables used, and the rows."""

    model_config = ConfigDict(extra="forbid", strict=True)

    paper: PaperCitation
    # the tables that hold the paper's main results (the others are ablations, budget comparisons,
    # appendix variants); absent: every table is main. ``xmcbench table`` shows main rows only
    # unless asked for --all-published.
    main_tables: list[str] | None = None
    tables: dict[str, str]
    rows: list[ReferenceRow] = Field(min_length=1)

    def is_main(self, row: ReferenceRow) -> bool:
        """Whether ``row`` is one of the paper's main results (its own ``main``, else its table)."""
        if row.main is not None:
            return row.main
        return self.main_tables is None or row.table in self.main_tables

    @field_validator("tables")
    @classmethod
    def _table_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not TABLE_NAME.match(name):
                raise ValueError(f"table name {name!r} should look like 'Table 2'")
        return value


# ---------------------------------------------------------------------------------------- loading


def reference_dir(dir: str | Path | None = None) -> Path:
    """The folder holding the reference YAML files (see the module docstring for the order)."""
    if dir is not None:
        path = Path(dir).expanduser()
        if not path.is_dir():
            raise XmcbenchError(f"reference results folder {path} does not exist")
        return path
    env = os.environ.get(ENV_DIR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise XmcbenchError(
                f"${ENV_DIR}={env} is not a folder; point it at the leaderboard/ folder of an "
                "xmcbench checkout or unset it"
            )
        return path
    package_dir = Path(__file__).resolve().parent
    checkout = package_dir.parent
    # A source checkout has pyproject.toml beside the package; in site-packages a folder
    # named 'leaderboard' could belong to anything, so it is not trusted there.
    if (checkout / "pyproject.toml").is_file() and (checkout / "leaderboard").is_dir():
        return checkout / "leaderboard"
    shipped = resources.files("xmcbench").joinpath(PACKAGE_DATA_DIR)
    if shipped.is_dir():
        return Path(str(shipped))
    raise XmcbenchError(
        "cannot find the reference results: no leaderboard/ folder beside the xmcbench package "
        f"and no packaged copy; set ${ENV_DIR} to the leaderboard/ folder of an xmcbench checkout"
    )


def load_reference_files(dir: str | Path | None = None) -> list[ReferenceFile]:
    """Every ``*.yaml`` file of the reference folder, validated, in file-name order."""
    folder = reference_dir(dir)
    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        raise XmcbenchError(f"no reference result files (*.yaml) in {folder}")
    return [load_reference_file(path) for path in paths]


def load_reference_results(dir: str | Path | None = None) -> list[ReferenceRow]:
    """All published rows of all papers, validated (see ``ReferenceRow``)."""
    return [row for file in load_reference_files(dir) for row in file.rows]


def load_reference_file(path: str | Path) -> ReferenceFile:
    """Read and validate one paper's YAML file; errors name the file, line, row and key."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=_SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or exc
        raise DataFormatError(path, line, f"not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise DataFormatError(path, 1, "expected a mapping with keys paper, tables and rows")
    try:
        file = ReferenceFile.model_validate(data)
    except ValidationError as exc:
        raise _format_validation_error(path, text, data, exc) from None
    _check_consistency(path, text, file)
    return file


def _check_consistency(path: Path, text: str, file: ReferenceFile) -> None:
    """Checks across rows that pydantic cannot express per field."""
    if path.stem != file.paper.id:
        raise DataFormatError(
            path,
            _line_of(text, ("paper", "id")),
            f"paper.id is {file.paper.id!r} but the file is named {path.name}; name the file {file.paper.id}.yaml",
        )
    for name in file.main_tables or []:
        if name not in file.tables:
            raise DataFormatError(
                path,
                _line_of(text, ("main_tables",)),
                f"main_tables names {name!r}, which has no caption under 'tables:'"
                f"{did_you_mean(name, list(file.tables))}",
            )
    seen: dict[tuple, int] = {}
    for index, row in enumerate(file.rows):
        if row.paper != file.paper.id:
            raise DataFormatError(
                path,
                _line_of(text, ("rows", index, "paper")),
                f"rows[{index}].paper is {row.paper!r} in the file of paper {file.paper.id!r}",
            )
        if row.table not in file.tables:
            raise DataFormatError(
                path,
                _line_of(text, ("rows", index, "table")),
                f"rows[{index}].table {row.table!r} has no caption under 'tables:'; add it there"
                f"{did_you_mean(row.table, list(file.tables))}",
            )
        if row.key in seen:
            raise DataFormatError(
                path,
                _line_of(text, ("rows", index)),
                f"rows[{index}] repeats rows[{seen[row.key]}] (same paper, table, dataset, "
                f"method, variant and setting: {row.table}, {row.dataset}, {row.method!r}, "
                f"variant {row.variant!r}, {row.setting}); give one of them a distinct 'variant'",
            )
        seen[row.key] = index


class _SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader (C-accelerated when available) that rejects duplicate mapping keys."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_SafeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _format_validation_error(path: Path, text: str, data: Any, exc: ValidationError) -> DataFormatError:
    """One message listing every problem as 'rows[3].metrics.P@1: ...', at the first one's line."""
    problems: list[str] = []
    first_line: int | None = None
    seen: set[tuple] = set()
    for error in exc.errors():
        loc = _yaml_loc(data, error["loc"])
        if loc in seen:  # a union field reports once per member type
            continue
        seen.add(loc)
        where = _loc_text(loc)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}{_allowed_keys(loc)}"
        elif error["type"] == "missing":
            message = f"missing required key {error['loc'][-1]!r}"
        elif error["type"].endswith("_type") and isinstance(error.get("input"), str):
            message += f" (got the text {error['input']!r}; write numbers without quotes)"
        elif error["type"] == "string_type" and isinstance(error.get("input"), (int, float)):
            message += f" (got the number {error['input']!r}; put it in quotes)"
        problems.append(f"{where}{_row_context(data, loc)}: {message}")
        if first_line is None:
            first_line = _line_of(text, loc)
    more = ""
    if len(problems) > 1:
        more = f" (and {len(problems) - 1} more: " + "; ".join(problems[1:]) + ")"
    return DataFormatError(path, first_line, problems[0] + more)


def _yaml_loc(data: Any, loc: tuple) -> tuple:
    """The prefix of a pydantic error location that exists in the YAML data (drops type tags)."""
    out: list = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            if isinstance(node, dict) and isinstance(part, str) and part in _field_names(out):
                out.append(part)  # a missing field: name it
            break
        out.append(part)
    return tuple(out)


def _field_names(loc: list) -> set[str]:
    if loc == []:
        return set(ReferenceFile.model_fields)
    if loc == ["paper"]:
        return set(PaperCitation.model_fields)
    if len(loc) == 2 and loc[0] == "rows":
        return set(ReferenceRow.model_fields)
    return set()


def _allowed_keys(loc: tuple) -> str:
    names = _field_names(list(loc[:-1]))
    if not names:
        return ""
    return f"{did_you_mean(str(loc[-1]), sorted(names))}; allowed keys: {', '.join(sorted(names))}"


def _loc_text(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "file"


def _row_context(data: Any, loc: tuple) -> str:
    if len(loc) >= 2 and loc[0] == "rows" and isinstance(loc[1], int):
        row = data["rows"][loc[1]]
        if isinstance(row, dict):
            bits = [str(row[k]) for k in ("table", "dataset", "method") if k in row]
            if bits:
                return f" ({', '.join(bits)})"
    return ""


def _line_of(text: str, loc: tuple) -> int | None:
    """1-based line of the YAML node at ``loc`` (mapping keys, sequence indexes), or its parent."""
    try:
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if pair is None:
                break
            line = pair[0].start_mark.line + 1
            node = pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
