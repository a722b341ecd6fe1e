"""A small synthetic XC dataset in real English: category labels, queries made of their members.

``SynthParams(lexicon="english")`` selects this generator (``synth.synthesize`` dispatches here).
Labels are categories of the packaged lexicon (``lexicon_en.txt``: 40 categories in 10 groups of
sibling categories, ten members each, e.g. *stone fruit*: peach, plum, cherry, ...). A query names
two members of each of its labels (one label, sometimes two or three) and a filler word, shuffled
(``"mango papaya illustrated"`` -> *tropical fruit*). Label texts are the category names only.

Why it exists: the pseudo-word generator measures what training learns from pairs, but nothing
there can be *known* beforehand, so an LLM judge (LMTX) is no better than word overlap on it
(measured: the 0.5B judge's best-of-shortlist precision 0.12 against the encoder's P@1 0.16).
Here knowing that a mango is a tropical fruit is the whole task, and sibling categories (stone
fruit / tropical fruit / berries) are the hard negatives. It writes the same LF files as the
pseudo-word generator (empty filter files: no reciprocal pairs), byte-identical per seed.

``bodies`` makes the zero-shot smoke dataset for MACLR. Every instance gets a body naming other
members of its labels (``"guava rambutan deluxe"``), and ``ALIAS_TITLES`` of the titles name their
labels only by an alias: one made-up word per label (``"sebo pack"`` -> *legumes*), which no
pre-trained encoder can know but which co-occurs with the label's real members in the bodies of
the training instances. Queries are evaluated on their titles, so what an encoder learns from the
unlabelled title/body pairs (MACLR's Inverse Cloze Task) is what can lift it above the encoder it
starts from; titles seldom share a word with their labels (1%), so TF-IDF is weak. Without ``bodies`` the
files are the same as before the option existed (its random draws happen only when it is on).
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from pathlib import Path

import numpy as np

from xmcbench.data.synth_words import make_words

MEMBERS_PER_LABEL = 2  # members of each of its labels a query names
EXTRA_LABELS_MEAN = 0.5  # Poisson mean of a query's extra labels (at most MAX_EXTRA)
MAX_EXTRA = 2
ALIAS_TITLES = 0.3  # with bodies: titles that name their labels only by an alias (a word no encoder knows)
BODY_MEMBERS = 2  # with bodies: further members of each label the body names (none from the title)
FILLERS = ("assorted", "set of", "guide to", "collection", "new", "classic", "illustrated", "deluxe", "mini", "pack")


@lru_cache(maxsize=1)
def lexicon() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(group, category, members) of every line of ``lexicon_en.txt``, in file order."""
    text = files("xmcbench.data").joinpath("lexicon_en.txt").read_text(encoding="utf-8")
    rows = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            group, category, members = (part.strip() for part in line.split("|"))
            rows.append((group, category, tuple(m.strip() for m in members.split(","))))
    return tuple(rows)


def check_options(lexicon_name: str, n_labels: int, bodies: bool) -> None:
    """ValueError (a validation error where parameters are read) for options the lexicon cannot
    honour: more labels than categories, or ``bodies`` on pseudo-word data (which always has them)."""
    if lexicon_name != "english":
        if bodies:
            raise ValueError(
                "bodies applies to lexicon: english (pseudo-word instances always have a body); "
                "remove bodies or add lexicon: english"
            )
        return
    if n_labels > len(lexicon()):
        raise ValueError(
            f"the english lexicon has {len(lexicon())} categories, so a synthetic dataset with lexicon: english "
            f"has at most {len(lexicon())} labels (asked for {n_labels}); use lexicon: pseudo for more"
        )


def generate(p, out_dir: Path, dumps, write_lines) -> None:
    """Write the LF files of ``p`` (a ``SynthParams``) into ``out_dir``; ``dumps``/``write_lines``
    are the pseudo-word generator's writers, so both produce the same file format."""
    check_options(p.lexicon, p.n_labels, p.bodies)
    rng = np.random.default_rng(p.seed)
    lex = lexicon()
    chosen = np.sort(rng.choice(len(lex), size=p.n_labels, replace=False))  # lexicon rows, by label id
    weight = 1.0 / (rng.permutation(p.n_labels) + 1.0) ** p.zipf_exponent  # Zipfian, random rank
    weight /= weight.sum()

    aliases = _aliases(p.n_labels, p.seed) if p.bodies else []
    write_lines(
        out_dir / "lbl.json.gz",
        (dumps({"uid": f"L{i:08d}", "title": lex[r][1], "content": ""}) for i, r in enumerate(chosen.tolist())),
        compresslevel=p.compresslevel,
    )
    for n, file, filter_file, letter in (
        (p.n_train, "trn.json.gz", "filter_labels_train.txt", "T"),
        (p.n_test, "tst.json.gz", "filter_labels_test.txt", "S"),
    ):
        lines = []
        for i in range(n):
            extra = min(int(rng.poisson(EXTRA_LABELS_MEAN)), MAX_EXTRA)
            labels = [int(rng.choice(p.n_labels, p=weight))]
            while len(labels) < 1 + extra:
                other = int(rng.integers(p.n_labels))
                if other not in labels:
                    labels.append(other)
            words = [w for lab in labels for w in rng.choice(lex[chosen[lab]][2], MEMBERS_PER_LABEL, replace=False)]
            words.append(str(rng.choice(FILLERS)))
            if p.bodies and rng.random() < ALIAS_TITLES:  # the title names its labels by their aliases only
                words = [str(aliases[lab]) for lab in labels] + [words[-1]]
            title = " ".join(words[k] for k in rng.permutation(len(words)))
            content = _body(lex, chosen, labels, words, rng) if p.bodies else ""
            targets = sorted(labels)
            lines.append(
                dumps(
                    {
                        "uid": f"{letter}{i:09d}",
                        "title": title,
                        "content": content,
                        "target_ind": targets,
                        "target_rel": [1.0] * len(targets),
                    }
                )
            )
        write_lines(out_dir / file, iter(lines), compresslevel=p.compresslevel)
        write_lines(out_dir / filter_file, iter(()), compress=False)


def _aliases(n: int, seed: int) -> list[str]:
    """One made-up word per label, none of them a word of the lexicon or of a filler.

    Pseudo-words from the generator's syllables, from its own random stream (the other draws do not
    move), read from position 200 of the list (where seed 0's aliases, behind the measured smoke
    figures, come from); a few seeds make a real one ("luge" with seed 94), which is skipped.
    """
    taken = {w for _, category, members in lexicon() for text in (category, *members) for w in text.split(" ")}
    taken |= {w for filler in FILLERS for w in filler.split(" ")}
    words = make_words(n + 200 + len(taken), np.random.default_rng([seed, 1]))[200:]
    return [str(w) for w in words if w not in taken][:n]


def _body(lex, chosen, labels: list[int], title_words: list[str], rng: np.random.Generator) -> str:
    """A body for a title: ``BODY_MEMBERS`` other members of each of its labels and a filler, shuffled.

    Only the title's own labels, never a member the title names: for MACLR's Inverse Cloze Task the
    body is the context and the title the pseudo-label, so what ICT can learn is which members (and
    which alias) go together.
    """
    words = []
    for lab in labels:
        unused = [w for w in lex[chosen[lab]][2] if w not in title_words]
        words += [str(w) for w in rng.choice(unused, BODY_MEMBERS, replace=False)]
    words.append(str(rng.choice(FILLERS)))
    return " ".join(words[k] for k in rng.permutation(len(words)))
