"""Reading recipe files: YAML, ``include:``, ``--set`` overrides, and problems that name the key.

``read_recipe(path, overrides)`` returns the merged mapping; it refuses what a YAML library
would let through silently (a duplicate key where the last one wins, a file that is not UTF-8
text) and what would hang or exhaust memory (nesting thousands deep, an include graph that
reads one file exponentially often: each file is parsed once per load and the total is bounded).
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from xmcbench.errors import XmcbenchError

MAX_FILE_BYTES = 1 << 20  # a recipe is a page of settings; a megabyte is something else
MAX_FILES = 64  # distinct files one recipe may include, directly or not
MAX_DEPTH = 32  # nesting of mappings/lists; recipes use 3
MAX_NODES = 100_000  # values after YAML aliases are expanded (an alias bomb is small on disk)
MISSING = "required key is missing"  # the message of a Problem for a key the schema requires


@dataclass(frozen=True)
class Problem:
    file: str
    key: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.file}: {self.key or '<top>'}: {self.message}{hint}"


class RecipeError(XmcbenchError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{len(problems)} problem(s) in recipe:\n{lines}")


def _fail(path: Path | str, message: str, key: str = "", hint: str = "") -> RecipeError:
    return RecipeError([Problem(str(path), key, message, hint)])


MERGE_TAG = "tag:yaml.org,2002:merge"  # the key of ``<<: *base``
VALUE_TAG = "tag:yaml.org,2002:value"  # a plain ``=`` key, which SafeLoader reads as the text "="


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML says keys are unique).

    Merge keys work as in ``yaml.safe_load``: ``<<: *base`` copies base's keys and the mapping's
    own keys override them. Only keys written in one mapping can be duplicates.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self._pairs: dict[yaml.Node, int] = {}  # each checked mapping node -> its pairs once merged
        self._merging: set[yaml.Node] = set()  # being checked: met again, a merge cycle
        self._merged = 0  # pairs copied in by merge keys, in the whole file

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self._check_keys(node)
        return super().construct_mapping(node, deep=deep)  # merges (flatten_mapping), then builds

    def _check_keys(self, node: yaml.MappingNode) -> int:
        """Refuse a duplicate key in ``node`` or in a mapping it merges; return its pairs once merged.

        It runs before ``flatten_mapping`` rewrites ``node.value`` to hold the merged pairs too,
        where a merged key and the key that overrides it would look like a duplicate; a node is
        checked once, which also keeps a merge of merges from being counted exponentially often.
        """
        if node in self._pairs:
            return self._pairs[node]
        if node in self._merging:
            raise yaml.constructor.ConstructorError(None, None, "a mapping merges itself (<<)", node.start_mark)
        self._merging.add(node)
        seen: dict[Any, int] = {}
        own = merged = 0
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                # a source that is not a mapping is refused by flatten_mapping, with its own message
                merged += sum(self._check_keys(s) for s in sources if isinstance(s, yaml.MappingNode))
                continue
            own += 1
            key = "=" if key_node.tag == VALUE_TAG else self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        self._merging.discard(node)
        # flatten_mapping copies merged pairs into the mapping before _too_big can count anything:
        # a merge of ten merges of ten ... is small on disk and exponential in memory
        self._merged += merged
        if self._merged > MAX_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"merge keys (<<) expand to more than {MAX_NODES:,} values", node.start_mark
            )
        self._pairs[node] = own + merged
        return own + merged


def _too_big(value: Any) -> str | None:
    """Why ``value`` is too deep or too large to be a recipe, or None (iterative: no recursion limit)."""
    stack, nodes = [(value, 0)], 0
    while stack:
        item, level = stack.pop()
        nodes += 1
        if level > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels"
        if nodes > MAX_NODES:
            return f"holds more than {MAX_NODES:,} values (YAML aliases expanded)"
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return None


def parse_yaml(path: Path) -> dict[str, Any]:
    """One recipe file as a mapping, or a RecipeError that says what is wrong with the file."""
    if path.is_dir():
        raise _fail(path, "is a folder, not a recipe file", hint="name a .yaml file inside it")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise _fail(path, f"is {size:,} bytes; a recipe is at most {MAX_FILE_BYTES:,}")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise _fail(path, "file not found") from None
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror or exc})") from None
    if b"\x00" in raw:
        hint = "save it as UTF-8" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else "is this a YAML file?"
        raise _fail(path, "is not UTF-8 text (UTF-16 or binary)", hint=hint)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _fail(
            path, f"is not UTF-8 text (byte {exc.start:,} cannot be decoded)", hint="save it as UTF-8"
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        hint = "indent with spaces: YAML does not allow tabs" if "'\\t'" in problem else ""
        raise _fail(path, f"invalid YAML: {where}{problem}", hint=hint) from None
    except RecursionError:
        raise _fail(path, f"nested deeper than {MAX_DEPTH} levels") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _fail(path, f"a recipe is a mapping of sections, got {type(data).__name__}")
    reason = _too_big(data)
    if reason:
        raise _fail(path, reason)
    return data


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class _Includes:
    """Resolves ``include:`` chains, parsing and merging each file once per load."""

    def __init__(self) -> None:
        self.resolved: dict[Path, dict[str, Any]] = {}
        self.files = 0

    def resolve(self, path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
        path = path.resolve()
        if path in chain:
            raise _fail(path, f"include cycle: {' -> '.join(str(p) for p in (*chain, path))}", key="include")
        if path in self.resolved:  # a diamond: the second route reuses the first result
            return self.resolved[path]
        self.files += 1
        if self.files > MAX_FILES:
            raise _fail(path, f"the recipe includes more than {MAX_FILES} files", key="include")
        data = parse_yaml(path)
        includes = data.pop("include", None)
        if includes is not None:
            if isinstance(includes, str):
                includes = [includes]
            if not isinstance(includes, list) or not all(isinstance(i, str) and i for i in includes):
                raise _fail(path, "include takes a path or a list of paths", key="include")
            merged: dict[str, Any] = {}
            for inc in includes:
                inc_path = Path(inc).expanduser()  # ~/base.yaml is in the home folder, not in one named ~
                if not inc_path.is_absolute():
                    inc_path = path.parent / inc_path
                if not inc_path.exists():
                    raise _fail(path, f"included file not found: {inc_path}", key="include")
                merged = deep_merge(merged, self.resolve(inc_path, (*chain, path)))
            data = deep_merge(merged, data)
        self.resolved[path] = data
        return data


def apply_overrides(data: dict[str, Any], overrides: list[str], file: str = "--set") -> dict[str, Any]:
    """Apply ``a.b=c`` overrides; ``c`` is parsed as YAML (``3``, ``true``, ``[1, 5]``, ``null``).

    Every malformed override is reported, not only the first (one RecipeError lists them all).
    """
    out, problems = overrides_applied(data, overrides, file)
    if problems:
        raise RecipeError(problems)
    return out


def overrides_applied(
    data: dict[str, Any], overrides: list[str], file: str = "--set"
) -> tuple[dict[str, Any], list[Problem]]:
    """``data`` with the well-formed overrides applied, and a Problem for each malformed one."""
    out = copy.deepcopy(data)
    problems: list[Problem] = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            problems.append(Problem(file, item, "an override looks like section.key=value", "e.g. training.epochs=3"))
            continue
        try:
            value = yaml.load(raw, Loader=_UniqueKeyLoader) if raw.strip() else ""  # noqa: S506
        except (yaml.YAMLError, RecursionError):
            value = raw
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                problems.append(Problem(file, key, f"{part!r} is a value, not a section"))
                break
            node = child
        else:
            node[parts[-1]] = value
    return out, problems


def read_recipe(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The recipe at ``path`` with its includes merged and ``overrides`` applied (not yet validated).

    Top-level keys starting with ``x-`` are dropped: they hold YAML anchors for ``<<: *name`` merges
    (as in docker-compose files), which the schema's sections would otherwise refuse as unknown.
    """
    data = _Includes().resolve(Path(path))
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    return apply_overrides(data, overrides or [])


def _model_at(model: type[BaseModel] | None, loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that owns the field at ``loc`` (for did-you-mean on unknown keys)."""
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return model


def _integral_text(value: Any) -> str | None:
    """'1e3' -> '1000': text that is a whole number in exponent notation, else None."""
    if not isinstance(value, str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return str(int(number)) if number.is_integer() and abs(number) < 1e18 else None


def _kind(value: Any) -> str:
    return {"str": "text", "list": "a list", "int": "a number", "float": "a number", "bool": "true/false"}.get(
        type(value).__name__, type(value).__name__
    )


def problems_from(exc: ValidationError, file: str, root: type[BaseModel], prefix: tuple = ()) -> list[Problem]:
    """pydantic's errors as Problems, with a did-you-mean hint for unknown keys."""
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in (*prefix, *loc))
        hint = ""
        if err["type"] == "extra_forbidden":
            owner = _model_at(root, loc[:-1])
            fields = list(owner.model_fields) if owner is not None else []
            close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else (f"known keys: {', '.join(fields)}" if fields else "")
            message = "unknown key"
        elif err["type"] in ("dict_type", "model_type", "model_attributes_type"):
            # pydantic's wording names internal classes ("instance of TrainingSection")
            given = err.get("input")
            if given is None:
                message = "is empty; give it key: value settings or remove the line"
            else:
                message = f"must be a section of key: value settings, not {_kind(given)} {given!r:.60}"
        elif err["type"] == "int_parsing" and _integral_text(err.get("input")):
            # YAML 1.1 reads 1e3 (no dot) as text, so a number the user wrote arrives as a string
            message = f"{err['input']} is read as text by YAML; write it as {_integral_text(err['input'])}"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "missing":
                message = MISSING
            elif err["type"] == "string_pattern_mismatch":
                message = "must not be blank"
        problems.append(Problem(file, key, message, hint))
    return problems
