"""A training step's encoder work with and without length-grouped micro-batches.

    python benchmarks/embed_groups.py                       # all-MiniLM-L6-v2, CPU, one thread
    python benchmarks/embed_groups.py --encoder tiny --repeat 1 --out /tmp/embed-groups.json

``dual_encoder.embed`` splits a batch into a few groups of similar token length, each padded to
its own longest text (``xmcbench.train.length_groups``). This times forward + backward of
``embed`` (grouped) next to one forward of the same rows padded to the batch's longest (what
``embed`` did before), best of ``--repeat``, the two alternating, in train mode as a step runs
it, for the smoke dataset's shapes: a batch of 64 queries of 10 to 24 tokens (uniform) and a
pool of 150 label texts of 8 to 16 tokens (mean about 10). The texts are synthetic: words that
are one token each, so each text has the token length drawn for it.

Prints a small table and one JSON object (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def query_lengths(n: int, rng):
    return rng.integers(10, 25, n)  # (n,) 10..24 tokens, uniform


def label_lengths(n: int, rng):
    """8..16 tokens, mostly short (mean ~10): a geometric tail."""
    import numpy as np

    p = 0.7 ** np.arange(9)
    return 8 + rng.choice(9, n, p=p / p.sum())  # (n,)


def texts_of_lengths(lengths, tokenizer, rng) -> list[str]:
    """One text per length, each exactly that many tokens with [CLS] and [SEP]."""
    vocab = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) >= 3)
    specials = int(tokenizer.num_special_tokens_to_add(pair=False))
    return [" ".join(rng.choice(vocab, int(k) - specials)) for k in lengths]


def _encoder(name: str, home: Path):
    from xmcbench.encoders import TextEncoder

    if name == "tiny":
        from xmcbench.encoders.tiny_bert import save_tiny_bert

        name = str(save_tiny_bert(home / "tiny-bert"))
    return TextEncoder(name, max_length=32)


def time_step(encoder, cache, idx, repeat: int, torch) -> dict:
    """Best seconds of forward + backward: grouped ``embed`` and one padded forward, alternating."""
    import numpy as np

    from xmcbench.methods import dual_encoder as de
    from xmcbench.train.length_groups import padded_tokens

    target = torch.randn(idx.size, encoder.dim, generator=torch.Generator().manual_seed(0))  # (b, d)

    def single():
        batch = cache.batch(idx)
        return encoder(batch["input_ids"], batch["attention_mask"])  # (b, d)

    def step(fn):
        encoder.zero_grad(set_to_none=True)
        start = time.perf_counter()
        (fn() - target).pow(2).sum().backward()
        return time.perf_counter() - start

    grouped = lambda: de.embed(encoder, cache, idx, "cpu")  # noqa: E731
    step(grouped), step(single)  # warm-up
    best = {"grouped": float("inf"), "single": float("inf")}
    for _ in range(repeat):
        best["grouped"] = min(best["grouped"], step(grouped))
        best["single"] = min(best["single"], step(single))
    lengths = np.asarray(cache.lengths[idx])
    groups = de.embed_groups(encoder, lengths, "cpu")  # the split embed made above, for this encoder
    return {
        "rows": int(idx.size),
        "lengths": [int(lengths.min()), float(lengths.mean()), int(lengths.max())],
        "groups": [int(g.size) for g in groups],
        "widths": [int(lengths[g].max()) for g in groups],
        "tokens": int(lengths.sum()),
        "padded_grouped": padded_tokens(lengths, groups),
        "padded_single": padded_tokens(lengths, [np.arange(idx.size)]),
        "grouped_s": best["grouped"],
        "single_s": best["single"],
        "ratio": best["grouped"] / best["single"],
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default="all-MiniLM-L6-v2", help="a model name or folder; tiny: the 2-layer test BERT")
    ap.add_argument("--queries", type=int, default=64, help="queries per batch")
    ap.add_argument("--labels", type=int, default=150, help="label texts per pool")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from xmcbench.data.tokenized import TokenCache

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        encoder = _encoder(args.encoder, Path(tmp))
        encoder.train()  # dropout on, as in a training step
        for what, lengths in (
            ("queries", query_lengths(args.queries, rng)),
            ("labels", label_lengths(args.labels, rng)),
        ):
            texts = texts_of_lengths(lengths, encoder.tokenizer, rng)
            cache = TokenCache.build_or_load(texts, encoder.tokenizer, 32, what, root=tmp, progress=False)
            assert np.array_equal(np.asarray(cache.lengths), lengths), "a synthetic text is not its length in tokens"
            results[what] = time_step(encoder, cache, rng.permutation(len(texts)), args.repeat, torch)
    result = {
        "command": "python benchmarks/embed_groups.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "encoder": args.encoder,
        "device": f"cpu, {args.threads} thread(s): {platform.processor() or platform.machine()}",
        "torch": torch.__version__,
        "repeat": args.repeat,
        "load_average": os.getloadavg(),
        **results,
    }
    print("| batch | rows | tokens (min/mean/max) | groups (rows @ width) | padded tokens | grouped ms | single ms |")
    print("|---|---|---|---|---|---|---|")
    for what, r in results.items():
        lo, mean, hi = r["lengths"]
        groups = " + ".join(f"{n}@{w}" for n, w in zip(r["groups"], r["widths"]))
        print(
            f"| {what} | {r['rows']} | {lo}/{mean:.1f}/{hi} | {groups} | {r['padded_grouped']} vs "
            f"{r['padded_single']} | {r['grouped_s'] * 1e3:.0f} | {r['single_s'] * 1e3:.0f} |"
        )
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
