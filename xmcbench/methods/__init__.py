"""Method registry: recipe ``method.name`` -> method class.

Imports are lazy per method module so that validating a recipe does not load torch models.
"""

from __future__ import annotations

from xmcbench.registry import Registry

METHODS: Registry = Registry("method")


def _register_builtins() -> None:
    from xmcbench.methods.tfidf import TfidfMethod
    from xmcbench.methods.zero_shot import ZeroShotMethod

    for cls in (TfidfMethod, ZeroShotMethod):
        METHODS.add(cls.name, cls)


_register_builtins()
