"""The longest text in tokens (what ``xmcbench plan`` pads a batch to) against tokenising every text."""

from __future__ import annotations

import json

import numpy as np
import pytest

from xmcbench.data.prepared import TextColumn
from xmcbench.data.token_lengths import generous_byte_lengths, longest_tokenized
from xmcbench.errors import XmcbenchError

TEXTS = [
    "",
    "a",
    "x y z 1 2 3 . , ; !",
    "Harry Potter and the Philosopher's Stone",
    "Über-naïve café crème brûlée — “quoted” text with emoji 🙂 and 日本語",
    "日本語の文章と中文句子",
    "USB-C cable, 2 m (6.6 ft), braided",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "   leading and trailing spaces   ",
    "🙂🙂🙂 ((((())))) ---- ....",
] + [f"product number {i} " * (i % 7) for i in range(300)]


def _column(texts: list[str]) -> TextColumn:
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in encoded])]).astype(np.int64)
    return TextColumn(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)


def _wordpiece():
    from transformers import AutoTokenizer

    from xmcbench.encoders import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))


def _trained(kind: str):
    """A byte-level BPE (GPT-2 / RoBERTa family) or a Metaspace unigram (SentencePiece family) trained
    here on the test texts: the other tokenizer families a recipe's encoder may use, offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = TEXTS * 3
    if kind == "byte-bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=120, special_tokens=["<s>", "</s>", "<pad>", "<unk>"], unk_token="<unk>"
        )
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


class _PythonOnly:
    """A tokenizer without a Rust backend (a Python tokenizer): counted through ``__call__``."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def num_special_tokens_to_add(self, pair=False):
        return self._tokenizer.num_special_tokens_to_add(pair=pair)


@pytest.fixture(scope="module", params=["wordpiece", "byte-bpe", "unigram", "python"])
def tokenizer(request):
    if request.param == "python":
        return _PythonOnly(_wordpiece())
    return _wordpiece() if request.param == "wordpiece" else _trained(request.param)


def _brute_force(tokenizer, texts, cap):
    return max(len(tokenizer(t, truncation=True, max_length=cap)["input_ids"]) for t in texts)


def test_every_text_fits_the_byte_bound_the_early_stop_relies_on(tokenizer):
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    for text in TEXTS:
        n = len(tokenizer(text)["input_ids"])
        assert n <= len(text.encode("utf-8")) + specials + 1, (text, n)


@pytest.mark.parametrize("cap", [3, 8, 16, 40, 512])
def test_the_longest_text_equals_tokenising_every_text(tokenizer, cap):
    column = _column(TEXTS)
    assert longest_tokenized(column, tokenizer, cap) == _brute_force(tokenizer, TEXTS, cap)


def test_the_longest_is_found_when_it_is_not_the_longest_in_bytes(tokenizer):
    """Many byte-long texts of few tokens, one shorter text of many: the scan must not stop at the
    first batch (it holds more than the first batch's 64 texts)."""
    few_tokens = ["aaaa" * 30] * 200  # 120 bytes
    many_tokens = ["日 本 語 🙂 , ; ! 1 2 3 4 5 6 7 8 9 a b c d e f g h i j k"]  # fewer bytes, more tokens
    texts = few_tokens + many_tokens + ["x"] * 50
    column = _column(texts)
    assert longest_tokenized(column, tokenizer, 512) == _brute_force(tokenizer, texts, 512)


def test_the_scan_goes_on_while_a_shorter_text_could_still_have_more_tokens(tokenizer):
    """The stop must allow for the special tokens and a bare word-start piece: after a first batch of
    byte-long texts of few tokens (T each), a text of T - 1 bytes can still have T + 1 tokens."""
    filler = "number " * 20  # 140 bytes, ~22 tokens
    t = _brute_force(tokenizer, [filler], 512)
    probe = "," * (t - 1)  # fewer bytes than the filler, one token a byte, plus the specials
    assert _brute_force(tokenizer, [probe], 512) > t  # the case is what it claims
    texts = [filler] * 64 + [probe]
    assert longest_tokenized(_column(texts), tokenizer, 512) == _brute_force(tokenizer, texts, 512)


def _byte_bpe(normalizer, add_prefix_space: bool = False, template: str = "<s> $A </s>"):
    """A byte-level BPE (RoBERTa / GPT-2 family) trained here, with ``normalizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["aaaa " * 10, "hello world", "the quick brown fox"] * 5, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def _metaspace_byte_fallback():
    """SentencePiece-like BPE with byte fallback and no bare "▁" piece: a space costs 3 byte tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for ch in "abcdefghijklmnopqrstuvwxyz,":
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def _unusual(case: str):
    from tokenizers import normalizers

    if case == "bert-normalizer-chinese":
        return _byte_bpe(normalizers.BertNormalizer(lowercase=False)), "中" * 10
    if case == "bert-normalizer-lowercase":
        return _byte_bpe(normalizers.BertNormalizer(lowercase=True, handle_chinese_chars=False)), "Ⱥ" * 10
    if case == "bert-normalizer-strip-accents":
        return _byte_bpe(normalizers.BertNormalizer(lowercase=False, strip_accents=True)), "한" * 10
    if case == "metaspace-byte-fallback":
        return _metaspace_byte_fallback(), "a " * 10
    if case == "prefix-per-added-token":
        tok = _byte_bpe(None, add_prefix_space=True)
        tok.add_tokens(["|"])
        return tok, "a|" * 10
    return _wordpiece_text_twice(), "," * 10


def _wordpiece_text_twice():
    """MiniLM's WordPiece with a template that emits the text twice."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(_wordpiece().backend_tokenizer.to_str())
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP] $A", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]")


@pytest.mark.parametrize(
    "case",
    [
        "bert-normalizer-chinese",
        "bert-normalizer-lowercase",
        "bert-normalizer-strip-accents",
        "metaspace-byte-fallback",
        "prefix-per-added-token",
        "text-twice",
    ],
)
def test_tokenizers_with_more_tokens_than_bytes_are_scanned_far_enough(case):
    """BertNormalizer in front of a byte-level model, Metaspace spaces that fall back to 3 byte tokens,
    a word-start piece per segment between added tokens, a template repeating the text: each has a
    text of more tokens than bytes + specials + 1, behind 64 byte-longer texts of few tokens."""
    tokenizer, text = _unusual(case)
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    assert len(tokenizer(text)["input_ids"]) > len(text.encode()) + specials + 1  # the case is what it claims
    size = len(text.encode())
    filler = "a " * (size // 2 + 1) if case == "text-twice" else "," * (size + 1)  # more bytes, fewer tokens
    assert _brute_force(tokenizer, [filler], 512) < _brute_force(tokenizer, [text], 512)
    texts = [filler] * 64 + [text]
    assert longest_tokenized(_column(texts), tokenizer, 512) == _brute_force(tokenizer, texts, 512)


def _expanding(normalizer: str):
    """A byte-level BPE whose normalizer lengthens text (NFKC: "½" -> "1⁄2", "ﷺ" -> 18 letters;
    NFC + Lowercase: "İ" -> "i̇"), as XLM-R / mT5 / CLIP-like tokenizers have."""
    from tokenizers import normalizers

    if normalizer == "nfkc":
        return _byte_bpe(normalizers.NFKC())
    return _byte_bpe(normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()]))


@pytest.mark.parametrize(("normalizer", "text"), [("nfkc", "½" * 10), ("nfkc", "ﷺ" * 10), ("lower", "İ" * 10)])
def test_normalizers_that_lengthen_text_are_applied_before_the_bound(normalizer, text):
    """A text with more tokens than its raw bytes allow, behind 64 byte-longer texts of few tokens:
    bounding raw bytes would stop after them and miss it."""
    tokenizer = _expanding(normalizer)
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    assert len(tokenizer(text)["input_ids"]) > len(text.encode()) + specials + 1  # the case is what it claims
    texts = ["," * (len(text.encode()) + 1)] * 64 + [text]
    assert longest_tokenized(_column(texts), tokenizer, 512) == _brute_force(tokenizer, texts, 512)


def test_a_max_length_with_no_room_for_text_is_refused(tokenizer):
    """At max_length <= the special tokens, tokenizers do not truncate at all: no padded length is known."""
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    with pytest.raises(XmcbenchError, match=f"max_length {specials} leaves no room for text"):
        longest_tokenized(_column(["hello world " * 50]), tokenizer, specials)


def test_an_empty_column_and_the_generous_byte_bound():
    assert longest_tokenized(_column([]), _wordpiece(), 32) == 0
    texts = ["abc", "½½", "ﷺ", "İ", ""]
    assert generous_byte_lengths(_column(texts)).tolist() == [3, 10, 33, 3, 0]  # NFKC/NFKD, lowercased
    for normalizer in ("nfkc", "lower"):  # bounds every tokenizer above, read or not
        tokenizer = _expanding(normalizer)
        for text, bound in zip(texts, generous_byte_lengths(_column(texts))):
            assert len(tokenizer(text)["input_ids"]) <= bound + 3


def test_a_prepared_datasets_longest_texts_are_remembered_by_tokenizer_and_cap(synth_dataset, monkeypatch):
    from xmcbench.data import load_dataset, token_lengths
    from xmcbench.data.token_lengths import CACHE_NAME, longest_prepared

    ds = load_dataset("synth-test", progress=False)
    tokenizer = _wordpiece()
    labels = longest_prepared(ds, "labels", tokenizer, 512)
    queries = longest_prepared(ds, "train", tokenizer, 512)
    assert labels == _brute_force(tokenizer, ds.label_texts(), 512)
    assert queries == _brute_force(tokenizer, ds.query_texts("train"), 512)
    assert (ds.path / CACHE_NAME).is_file()

    def not_again(*args, **kwargs):
        raise AssertionError("measured again")

    with monkeypatch.context() as m:
        m.setattr(token_lengths, "longest_tokenized", not_again)
        assert longest_prepared(ds, "labels", tokenizer, 512) == labels
        assert longest_prepared(ds, "train", tokenizer, 512) == queries
        with pytest.raises(AssertionError, match="measured again"):
            longest_prepared(ds, "labels", tokenizer, 4)  # another cap
        with pytest.raises(AssertionError, match="measured again"):
            longest_prepared(ds, "labels", _trained("byte-bpe"), 512)  # another tokenizer

    memo = json.loads((ds.path / CACHE_NAME).read_text())
    stale = {**memo, "prepared": "another-version:then"}  # another preparation's figures: not read
    (ds.path / CACHE_NAME).write_text(json.dumps(stale))
    with monkeypatch.context() as m:
        m.setattr(token_lengths, "longest_tokenized", not_again)
        with pytest.raises(AssertionError, match="measured again"):
            longest_prepared(ds, "labels", tokenizer, 512)

    def prepared_meanwhile(*args, **kwargs):  # the folder now holds another preparation
        (ds.path / "meta.json").write_text(json.dumps({**ds.meta, "prepared_at": "later"}))
        return 7

    (ds.path / CACHE_NAME).unlink()
    with monkeypatch.context() as m:
        m.setattr(token_lengths, "longest_tokenized", prepared_meanwhile)
        assert longest_prepared(ds, "labels", tokenizer, 512) == 7
    assert not (ds.path / CACHE_NAME).exists()  # its figure is not left for the new data
    (ds.path / "meta.json").write_text(json.dumps(ds.meta))

    (ds.path / CACHE_NAME).write_text("[not a memo")  # damaged: measured again, and rewritten
    assert longest_prepared(ds, "labels", tokenizer, 4) == 4
    monkeypatch.setattr(token_lengths.fsutil, "write_json", lambda *a: (_ for _ in ()).throw(PermissionError("ro")))
    assert longest_prepared(ds, "labels", tokenizer, 6) == 6  # a folder that cannot be written loses the memo only
