"""xmcbench: benchmarking and leaderboards for extreme multi-label classification (XMC).

The library is layered (see README): ``data`` (datasets, formats, download, prepare),
``metrics`` (pyxclib-compatible evaluation, numpy/scipy only), ``search`` (exact top-k),
and the CLI in ``xmcbench.cli`` which only parses arguments and calls the library.
"""

__version__ = "0.1.0"
