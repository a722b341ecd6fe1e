"""One small generic registry for named components (datasets, dataset formats, methods, losses, metrics).

Names are case-insensitive; a miss raises an error that suggests the closest names, so a typo
in a recipe or on the command line is caught with a hint instead of a KeyError.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from xmcbench.errors import XmcbenchError

T = TypeVar("T")


def did_you_mean(name: str, choices: list[str]) -> str:
    """' (did you mean x?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=3, cutoff=0.5)
    if not close:
        return ""
    lower_to_real = {c.lower(): c for c in choices}
    return " (did you mean " + " or ".join(lower_to_real[c] for c in close) + "?)"


class UnknownNameError(XmcbenchError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._display: dict[str, str] = {}

    def add(self, name: str, item: T) -> T:
        key = name.lower()
        if key in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[key] = item
        self._display[key] = name
        return item

    def add_lazy(self, name: str, target: str) -> None:
        """Register ``"package.module:Attribute"``, imported on first ``get`` (keeps start-up light)."""
        self.add(name, _Lazy(target))  # type: ignore[arg-type]

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form: ``@METHODS.register("dexml")``."""
        return lambda item: self.add(name, item)

    def get(self, name: str) -> T:
        try:
            item = self._items[name.lower()]
        except KeyError:
            known = self.names()
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}"
            ) from None
        if isinstance(item, _Lazy):
            item = self._items[name.lower()] = item.load()
        return item

    def canonical(self, name: str) -> str:
        self.get(name)
        return self._display[name.lower()]

    def names(self) -> list[str]:
        return [self._display[k] for k in self._items]

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._items

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return ((self._display[k], self.get(k)) for k in list(self._items))

    def __len__(self) -> int:
        return len(self._items)


class _Lazy:
    def __init__(self, target: str):
        self.target = target

    def load(self):
        import importlib

        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)
