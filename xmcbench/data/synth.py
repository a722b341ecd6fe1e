"""A synthetic XC dataset in the exact raw LF format, with real structure to learn.

``synthesize(out_dir, n_labels, n_train, n_test, seed)`` writes ``trn.json.gz``, ``tst.json.gz``,
``lbl.json.gz``, ``filter_labels_train.txt`` and ``filter_labels_test.txt`` — the files of an XC
repository archive — so every reader, the prepare step and the download path run on it unchanged.
Same parameters and seed give byte-identical files (gzip mtime 0, no name in the header).

How the data is made (vectorised; LF-AmazonTitles-1.3M's size takes a few minutes on 2 cores):

1. Vocabulary: pronounceable words built from consonant-onset + vowel syllables (uniquely
   parsable, so distinct ids give distinct words). A *concept* has ``n_forms`` surface forms
   (synonyms): form 0 is used in label titles, queries often use another form (a paraphrase).
2. Topics: labels are grouped into topics; each topic has its own concepts. A label's title is
   one topic concept and two label-specific concepts (sometimes a filler word); its content mixes
   forms, so the full-text variant reveals some synonyms.
3. Label frequencies are Zipfian (random rank per label). A query draws a primary label by that
   law and ``1 + Poisson(labels_per_query - 1)`` labels in all, most from the primary's topic.
4. A query's title mixes the primary label's concepts, one concept of two other labels, topic
   concepts and filler words, in random order, each concept kept in the title's form with
   probability ``keep_form`` and otherwise replaced by a synonym. Word overlap with label titles
   therefore helps (TF-IDF and zero-shot encoders find something) but is unreliable; a model
   trained on the pairs learns the synonyms and beats both.
5. Reciprocal pairs: a ``reciprocal_fraction`` of queries *are* a label (same title and uid) of
   their primary label's topic that is not among their targets; each such (query, label) pair
   goes to the split's filter file, as in the real datasets.
7. ``paraphrase`` (default off; off leaves every file byte-identical): queries paraphrase their
   labels instead of copying their words. A query title never uses a label title's surface form
   (only synonyms), and its body uses it a quarter of the time (instead of half), so the body is
   what links a title's synonyms to the label's words: zero-shot learning from the raw text
   (MACLR's Inverse Cloze Task on title/body pairs) has something to find, while TF-IDF and a
   pre-trained encoder, which only see surface forms, are weak. Queries are title + body.
6. Raw texts carry HTML entities like the real files (a few filler words are ``&amp;`` and
   ``&#8217;s``); some contents (and a very few titles) are empty.
8. ``lexicon: english`` (default ``pseudo``): real English category labels and member words, for
   methods whose teacher must *know* something (an LLM judge); see ``synth_english``. With
   ``bodies`` its instances are title + body and some titles name their labels by an alias word
   (the zero-shot smoke dataset: MACLR's ICT material; TF-IDF is weak).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, model_validator

from xmcbench.data.catalog import LF_FILES, DatasetSpec, Source, check_dataset_name
from xmcbench.data.formats.lf_json import orjson, write_lines
from xmcbench.data.raw import record_manifest
from xmcbench.data.synth_english import check_options as check_english_options
from xmcbench.data.synth_english import generate as generate_english
from xmcbench.data.synth_words import make_words

_ENTITY_FILLERS = {7: "&amp;", 23: "&#8217;s"}  # filler id -> word: raw XC text is HTML-escaped like this
_N_FILLERS = 400
_TOPIC_CONCEPTS = 12  # concepts per topic
_CHUNK = 200_000  # queries generated and written per batch


class SynthParams(BaseModel):
    """Parameters of ``synthesize`` (saved in a synthetic DatasetSpec to regenerate the files)."""

    model_config = ConfigDict(extra="forbid")

    n_labels: int = Field(ge=2)
    n_train: int = Field(ge=1)
    n_test: int = Field(ge=1)
    seed: int = 0
    n_topics: int | None = Field(default=None, ge=1)  # default: n_labels // 40, at least 2
    labels_per_query: float = Field(default=2.5, ge=1.0)  # mean; every query has at least one
    zipf_exponent: float = Field(default=1.0, ge=0.0)
    same_topic: float = Field(default=0.8, ge=0.0, le=1.0)  # extra labels from the primary's topic
    keep_form: float = Field(default=0.4, ge=0.0, le=1.0)  # query word keeps the title's form
    n_forms: int = Field(default=3, ge=1)  # surface forms (synonyms) per concept
    reciprocal_fraction: float = Field(default=0.02, ge=0.0, le=0.5)
    content_words: int = Field(default=12, ge=0)  # mean words of a query's content
    empty_content_fraction: float = Field(default=0.05, ge=0.0, le=1.0)
    empty_title_fraction: float = Field(default=0.001, ge=0.0, le=1.0)
    compresslevel: int = Field(default=6, ge=0, le=9)
    paraphrase: bool = False  # queries paraphrase their labels (module docstring, item 7)
    # "english": category labels and real member words instead of pseudo-words (synth_english.py)
    lexicon: Literal["pseudo", "english"] = "pseudo"
    # english only: title + body instances, some titles naming labels by an alias (synth_english; MACLR smoke)
    bodies: bool = False

    @model_validator(mode="after")
    def _fill_topics(self) -> SynthParams:
        if self.n_topics is None:
            self.n_topics = max(2, self.n_labels // 40)
        self.n_topics = min(self.n_topics, self.n_labels)
        check_english_options(self.lexicon, self.n_labels, self.bodies)
        return self


# --------------------------------------------------------------------------------------------
# vocabulary


class _Vocab:
    """Word ids of fillers and of concept forms; concept c form f is word ``base + c * n_forms + f``."""

    def __init__(self, p: SynthParams, n_own: int, rng: np.random.Generator):
        self.n_forms = p.n_forms
        self.n_topic_concepts = p.n_topics * _TOPIC_CONCEPTS
        self.topic_base = _N_FILLERS
        self.own_base = self.topic_base + self.n_topic_concepts * p.n_forms
        n_words = self.own_base + n_own * p.n_forms
        words = make_words(n_words, rng)
        for i, entity in _ENTITY_FILLERS.items():
            words[i] = entity
        self.words = np.append(words, "\n").astype(object)  # last id: record separator
        self.sep = len(self.words) - 1

    def topic_word(self, concept: np.ndarray, form: np.ndarray) -> np.ndarray:
        return self.topic_base + concept * self.n_forms + form

    def own_word(self, concept: np.ndarray, form: np.ndarray) -> np.ndarray:
        return self.own_base + concept * self.n_forms + form

    def texts(self, owner: np.ndarray, word: np.ndarray, n: int, rng: np.random.Generator) -> list[str]:
        """Join words into ``n`` texts: ``owner[i]`` is the text word i belongs to; order is shuffled."""
        # every text gets a separator after its words (sort key 2 > any random key in [0, 1))
        owner = np.concatenate([owner, np.arange(n)])
        word = np.concatenate([word, np.full(n, self.sep)])
        key = np.concatenate([rng.random(len(owner) - n), np.full(n, 2.0)])
        order = np.lexsort((key, owner))
        joined = " ".join(self.words[word[order]].tolist())
        return [t.strip(" ") for t in joined.split("\n")[:n]]


def _forms(n: int, keep: float, n_forms: int, rng: np.random.Generator) -> np.ndarray:
    """Form 0 with probability ``keep``, else a uniformly drawn synonym form."""
    if n_forms == 1:
        return np.zeros(n, dtype=np.int64)
    other = rng.integers(1, n_forms, size=n)
    return np.where(rng.random(n) < keep, 0, other)


def _fillers(n_texts: int, mean: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(owner, word) of Poisson(mean) Zipf-distributed filler words per text."""
    counts = rng.poisson(mean, size=n_texts)
    owner = np.repeat(np.arange(n_texts), counts)
    weights = 1.0 / np.arange(1, _N_FILLERS + 1)
    word = rng.choice(_N_FILLERS, size=len(owner), p=weights / weights.sum())
    return owner, word


# --------------------------------------------------------------------------------------------
# labels and queries


class _Labels:
    """Labels in topic-sorted internal order (contiguous topic ranges) with their concepts."""

    def __init__(self, p: SynthParams, rng: np.random.Generator):
        n = p.n_labels
        self.n = n
        self.topic = np.sort(rng.integers(0, p.n_topics, size=n))
        self.topic_start = np.searchsorted(self.topic, np.arange(p.n_topics + 1))
        ranks = rng.permutation(n)
        self.cumweight = np.cumsum(1.0 / (ranks + 1.0) ** p.zipf_exponent)
        self.n_own = max(64, n)
        self.own = rng.integers(0, self.n_own, size=(n, 2))  # label-specific concepts
        self.topic_concept = self.topic * _TOPIC_CONCEPTS + rng.integers(0, _TOPIC_CONCEPTS, size=n)
        self.external = rng.permutation(n)  # internal label -> line of lbl.json.gz

    def sample_global(self, u: np.ndarray) -> np.ndarray:
        return np.minimum(np.searchsorted(self.cumweight, u * self.cumweight[-1], side="right"), self.n - 1)

    def sample_in_topic(self, topic: np.ndarray, u: np.ndarray) -> np.ndarray:
        lo_idx, hi_idx = self.topic_start[topic], self.topic_start[topic + 1]
        lo = np.where(lo_idx > 0, self.cumweight[np.maximum(lo_idx - 1, 0)], 0.0)
        hi = self.cumweight[hi_idx - 1]
        picked = np.searchsorted(self.cumweight, lo + u * (hi - lo), side="right")
        return np.clip(picked, lo_idx, hi_idx - 1)

    def texts(self, vocab: _Vocab, rng: np.random.Generator) -> tuple[list[str], list[str]]:
        """Titles and contents, internal order."""
        n = self.n
        ids = np.arange(n)
        owner = [ids, ids, ids]
        word = [
            vocab.topic_word(self.topic_concept, 0),
            vocab.own_word(self.own[:, 0], 0),
            vocab.own_word(self.own[:, 1], 0),
        ]
        extra = np.flatnonzero(rng.random(n) < 0.1)  # some titles carry a filler word
        owner.append(extra)
        word.append(rng.integers(0, 40, size=len(extra)))
        titles = vocab.texts(np.concatenate(owner), np.concatenate(word), n, rng)
        # content: the title's concepts in mixed forms, two more topic concepts, fillers
        c_owner = [ids, ids, ids, ids, ids]
        c_word = [
            vocab.topic_word(self.topic_concept, _forms(n, 0.3, vocab.n_forms, rng)),
            vocab.own_word(self.own[:, 0], _forms(n, 0.3, vocab.n_forms, rng)),
            vocab.own_word(self.own[:, 1], _forms(n, 0.3, vocab.n_forms, rng)),
            vocab.topic_word(self.topic * _TOPIC_CONCEPTS + rng.integers(0, _TOPIC_CONCEPTS, size=n), 0),
            vocab.topic_word(self.topic * _TOPIC_CONCEPTS + rng.integers(0, _TOPIC_CONCEPTS, size=n), 0),
        ]
        f_owner, f_word = _fillers(n, 6.0, rng)
        contents = vocab.texts(np.concatenate(c_owner + [f_owner]), np.concatenate(c_word + [f_word]), n, rng)
        return titles, contents


def _sample_targets(p: SynthParams, labels: _Labels, n: int, rng: np.random.Generator):
    """(primary label, CSR of label sets) of ``n`` queries, internal label ids."""
    primary = labels.sample_global(rng.random(n))
    n_extra = np.minimum(rng.poisson(p.labels_per_query - 1.0, size=n), 200)
    row = np.repeat(np.arange(n), n_extra)
    in_topic = rng.random(len(row)) < p.same_topic
    u = rng.random(len(row))
    extra = np.where(in_topic, labels.sample_in_topic(labels.topic[primary[row]], u), labels.sample_global(u))
    rows = np.concatenate([np.arange(n), row])
    cols = np.concatenate([primary, extra])
    targets = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(n, labels.n))
    targets.sum_duplicates()
    return primary, targets


def _query_texts(
    p: SynthParams,
    labels: _Labels,
    vocab: _Vocab,
    primary: np.ndarray,
    targets: sp.csr_matrix,
    rng: np.random.Generator,
) -> tuple[list[str], list[str]]:
    n = len(primary)
    ids = np.arange(n)
    nf = vocab.n_forms
    owner, word = [], []
    # paraphrase: titles never copy a label's form, bodies rarely (the same draws either way)
    title_keep = 0.0 if p.paraphrase else p.keep_form
    body_keep = 0.25 if p.paraphrase else 0.5

    def add(rows: np.ndarray, words: np.ndarray, prob: float) -> None:
        keep = rng.random(len(rows)) < prob
        owner.append(rows[keep])
        word.append(words[keep])

    # the primary label's own concepts and topic concept, a second concept of the same topic
    add(ids, vocab.own_word(labels.own[primary, 0], _forms(n, title_keep, nf, rng)), 0.75)
    add(ids, vocab.own_word(labels.own[primary, 1], _forms(n, title_keep, nf, rng)), 0.5)
    add(ids, vocab.topic_word(labels.topic_concept[primary], _forms(n, title_keep, nf, rng)), 0.6)
    other = labels.topic[primary] * _TOPIC_CONCEPTS + rng.integers(0, _TOPIC_CONCEPTS, size=n)
    add(ids, vocab.topic_word(other, _forms(n, title_keep, nf, rng)), 0.5)
    # one concept of each of up to two other labels of the query
    counts = np.diff(targets.indptr)
    for j in range(2):
        has = np.flatnonzero(counts > j + 1)
        lab = targets.indices[targets.indptr[has] + j]
        lab = np.where(lab == primary[has], targets.indices[targets.indptr[has] + counts[has] - 1 - j], lab)
        add(has, vocab.own_word(labels.own[lab, j % 2], _forms(len(has), title_keep, nf, rng)), 0.6)
    f_owner, f_word = _fillers(n, 1.5, rng)
    owner.append(np.concatenate([ids, f_owner]))  # at least one filler: no title is accidentally empty
    word.append(np.concatenate([rng.integers(0, _N_FILLERS, size=n), f_word]))
    titles = vocab.texts(np.concatenate(owner), np.concatenate(word), n, rng)

    if p.content_words == 0:
        contents = [""] * n
    else:  # the primary's own concepts and its topic's concepts, 6 words in mixed forms, plus fillers
        c_owner, c_word = [], []
        for j in range(3):
            c_owner.append(ids)
            c_word.append(vocab.own_word(labels.own[primary, j % 2], _forms(n, body_keep, nf, rng)))
            c_owner.append(ids)
            c_word.append(
                vocab.topic_word(
                    labels.topic[primary] * _TOPIC_CONCEPTS + rng.integers(0, _TOPIC_CONCEPTS, size=n),
                    _forms(n, body_keep, nf, rng),
                )
            )
        f_owner, f_word = _fillers(n, max(p.content_words - 6, 0), rng)
        contents = vocab.texts(np.concatenate(c_owner + [f_owner]), np.concatenate(c_word + [f_word]), n, rng)
    for i in np.flatnonzero(rng.random(n) < p.empty_content_fraction).tolist():
        contents[i] = ""
    for i in np.flatnonzero(rng.random(n) < p.empty_title_fraction).tolist():
        titles[i] = ""
    return titles, contents


def _reciprocal(
    p: SynthParams,
    labels: _Labels,
    primary: np.ndarray,
    targets: sp.csr_matrix,
    used: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(query rows, internal labels) of queries that are a label of their primary's topic."""
    n = len(primary)
    k = int(round(p.reciprocal_fraction * n))
    if k == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    rows = np.sort(rng.choice(n, size=k, replace=False))
    topic = labels.topic[primary[rows]]
    lo, hi = labels.topic_start[topic], labels.topic_start[topic + 1]
    cand = lo + (rng.random(k) * (hi - lo)).astype(np.int64)
    ok = ~used[cand] & (np.asarray(targets[rows, cand]).ravel() == 0)
    rows, cand = rows[ok], cand[ok]
    cand, first = np.unique(cand, return_index=True)  # one query per label
    rows = rows[first]
    order = np.argsort(rows)
    rows, cand = rows[order], cand[order]
    used[cand] = True
    return rows, cand


# --------------------------------------------------------------------------------------------
# writing


def _dumps(record: dict) -> bytes:
    if orjson is not None:
        return orjson.dumps(record) + b"\n"
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"  # pragma: no cover


def _query_lines(titles: list[str], contents: list[str], targets: sp.csr_matrix, external: np.ndarray, uids: list[str]):
    """JSON lines of one batch of queries; targets become lbl.json.gz line numbers, sorted per row."""
    row = np.repeat(np.arange(targets.shape[0]), np.diff(targets.indptr))
    ext = external[targets.indices]
    ind = ext[np.lexsort((ext, row))].tolist()
    bounds = targets.indptr.tolist()
    for i, (t, c) in enumerate(zip(titles, contents)):
        labels = ind[bounds[i] : bounds[i + 1]]
        yield _dumps(
            {"uid": uids[i], "title": t, "content": c, "target_ind": labels, "target_rel": [1.0] * len(labels)}
        )


def synthesize(out_dir: Path, n_labels: int, n_train: int, n_test: int, seed: int = 0, **options) -> Path:
    """Write a synthetic dataset in the raw LF format into ``out_dir``; returns ``out_dir``.

    ``options`` are the other fields of ``SynthParams`` (topics, Zipf exponent, labels per
    query, synonym rate, reciprocal fraction, content length, gzip level).
    """
    p = SynthParams(n_labels=n_labels, n_train=n_train, n_test=n_test, seed=seed, **options)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if p.lexicon == "english":
        generate_english(p, out_dir, _dumps, write_lines)
        return out_dir
    rng = np.random.default_rng(p.seed)
    labels = _Labels(p, rng)
    vocab = _Vocab(p, labels.n_own, rng)

    titles, contents = labels.texts(vocab, rng)
    label_uids = np.array([f"L{i:08d}" for i in range(n_labels)], dtype=object)  # by lbl.json.gz line
    internal_of_line = np.argsort(labels.external)
    uid_of_internal = label_uids[labels.external]

    label_lines = (
        _dumps({"uid": label_uids[line], "title": titles[i], "content": contents[i]})
        for line, i in enumerate(internal_of_line.tolist())
    )
    write_lines(out_dir / "lbl.json.gz", label_lines, compresslevel=p.compresslevel)

    used = np.zeros(n_labels, dtype=bool)  # labels already some query's reciprocal twin
    for split, n, file, filter_file, letter in (
        ("train", p.n_train, "trn.json.gz", "filter_labels_train.txt", "T"),
        ("test", p.n_test, "tst.json.gz", "filter_labels_test.txt", "S"),
    ):
        pairs: list[tuple[np.ndarray, np.ndarray]] = []

        def lines():
            for start in range(0, n, _CHUNK):
                m = min(_CHUNK, n - start)
                primary, targets = _sample_targets(p, labels, m, rng)
                q_titles, q_contents = _query_texts(p, labels, vocab, primary, targets, rng)
                uids = [f"{letter}{start + i:09d}" for i in range(m)]
                rows, twins = _reciprocal(p, labels, primary, targets, used, rng)
                for r, twin in zip(rows.tolist(), twins.tolist()):
                    q_titles[r] = titles[twin]
                    uids[r] = uid_of_internal[twin]
                pairs.append((rows + start, labels.external[twins]))
                yield from _query_lines(q_titles, q_contents, targets, labels.external, uids)

        write_lines(out_dir / file, lines(), compresslevel=p.compresslevel)
        docs = np.concatenate([r for r, _ in pairs]) if pairs else np.empty(0, dtype=np.int64)
        labs = np.concatenate([c for _, c in pairs]) if pairs else np.empty(0, dtype=np.int64)
        write_lines(
            out_dir / filter_file,
            (f"{d} {lab}\n".encode() for d, lab in zip(docs.tolist(), labs.tolist())),
            compress=False,
        )
    return out_dir


def make_synthetic_spec(
    name: str, *, query_text: str = "title", description: str | None = None, **params
) -> DatasetSpec:
    """A DatasetSpec for a synthetic dataset; ``params`` are ``synthesize``'s (n_labels, n_train, ...).

    The saved parameters regenerate identical raw files (``load_dataset`` does so when they are
    missing).
    """
    check_dataset_name(name)
    p = SynthParams(**params)
    synthetic = p.model_dump()
    if not p.paraphrase:
        del synthetic["paraphrase"]  # specs saved before the option existed stay equal
    elif query_text == "title":
        query_text = "title+content"  # a paraphrase dataset is full-text, like LF-Amazon-131K
    if p.lexicon == "pseudo":
        del synthetic["lexicon"]  # likewise
    if not p.bodies:
        del synthetic["bodies"]  # likewise
    return DatasetSpec(
        name=name,
        raw_group=name,
        format="lf-json",
        query_text=query_text,
        files=list(LF_FILES),
        sources=[Source(kind="synthetic", ref="")],
        paper_counts={"train": p.n_train, "test": p.n_test, "labels": p.n_labels},
        propensity_a=0.55,
        propensity_b=1.5,
        description=description
        or (
            f"Synthetic LF-format dataset: {p.n_labels:,} labels, {p.n_train:,} train / {p.n_test:,} test "
            f"queries, seed {p.seed}."
        ),
        synthetic=synthetic,
    )


def materialize(spec: DatasetSpec, raw_dir: Path) -> Path:
    """Generate the raw files of the synthetic dataset ``spec`` into ``raw_dir`` and record their
    manifest (the one place a synthetic dataset's files are made); returns ``raw_dir``."""
    if spec.synthetic is None:
        raise ValueError(f"{spec.name} is not a synthetic dataset")
    p = SynthParams(**spec.synthetic)
    synthesize(raw_dir, **spec.synthetic)
    record_manifest(
        raw_dir,
        list(spec.files),
        source=f"synthetic (labels={p.n_labels}, train={p.n_train}, test={p.n_test}, seed={p.seed})",
    )
    return raw_dir
