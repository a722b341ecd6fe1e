"""How long does ``xmcbench plan`` take to find a prepared dataset's longest texts in tokens, next to
tokenising every text with the tokenizer's ``__call__`` (what a plain script would do)?

    python benchmarks/bench_prepare.py --dir /tmp/bench-1.0            # makes /tmp/bench-1.0/prepared
    python benchmarks/bench_token_lengths.py --prepared /tmp/bench-1.0/prepared --caps 32,128

For each column (labels, train queries) and cap: ``longest_tokenized``'s seconds and result, the
peer's seconds and result (they must agree), and the ratio, saved as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepared", type=Path, required=True, help="a prepared dataset folder")
    parser.add_argument("--caps", default="32,128", help="max_length values, comma-separated")
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2")
    parser.add_argument("--no-peer", action="store_true", help="skip tokenising every text (slow)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/token-lengths.json"))
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from xmcbench.data.prepared import TextColumn
    from xmcbench.data.token_lengths import longest_tokenized
    from xmcbench.encoders import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(args.encoder))
    rows = []
    for prefix in ("labels.text", "train.text"):
        column = TextColumn.open(args.prepared, prefix)
        for cap in (int(c) for c in args.caps.split(",")):
            start = time.perf_counter()
            longest = longest_tokenized(column, tokenizer, cap)
            ours = time.perf_counter() - start
            row = {"column": prefix, "texts": len(column), "cap": cap, "longest": longest, "xmcbench_s": ours}
            if not args.no_peer:
                start = time.perf_counter()
                peer = 0
                for a in range(0, len(column), 65536):
                    ids = tokenizer(column[a : a + 65536], truncation=True, max_length=cap)["input_ids"]
                    peer = max(peer, max(len(i) for i in ids))
                row.update(peer_s=time.perf_counter() - start, peer_longest=peer)
                row["ratio"] = ours / row["peer_s"]
                assert peer == longest, (prefix, cap, peer, longest)
            print(json.dumps(row))
            rows.append(row)
    result = {
        "prepared": str(args.prepared),
        "encoder": args.encoder,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average": os.getloadavg(),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
