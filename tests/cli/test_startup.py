"""The CLI starts without the heavy libraries: `xmcbench --help` and listings must not wait for torch."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_cli_imports_no_model_library():
    code = "import sys, xmcbench.cli; print(sorted(m for m in ('torch', 'transformers', 'tqdm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
