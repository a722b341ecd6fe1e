"""Method registry: recipe ``method.name`` -> method class.

Imports are lazy per method module so that validating a recipe does not load torch models.
"""

from __future__ import annotations

from xmcbench.registry import Registry

METHODS: Registry = Registry("method")


# name -> "module:Class"; imported on first use so validating a recipe stays light.
for _name, _target in (
    ("tfidf", "xmcbench.methods.tfidf:TfidfMethod"),
    ("zero_shot", "xmcbench.methods.zero_shot:ZeroShotMethod"),
    ("dexml", "xmcbench.methods.dexml:DexmlMethod"),
    ("unidec", "xmcbench.methods.unidec:UnidecMethod"),
    ("prime", "xmcbench.methods.prime:PrimeMethod"),
    ("lmtx", "xmcbench.methods.lmtx:LmtxMethod"),
    ("maclr", "xmcbench.methods.maclr:MaclrMethod"),
):
    METHODS.add_lazy(_name, _target)
