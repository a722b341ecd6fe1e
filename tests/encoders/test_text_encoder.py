import re

import numpy as np
import pytest
import torch

from xmcbench.encoders import TextEncoder, resolve_model_path
from xmcbench.errors import XmcbenchError


def test_packaged_model_resolves_to_a_folder():
    path = resolve_model_path("all-MiniLM-L6-v2")
    assert path.endswith("model") and (__import__("pathlib").Path(path) / "config.json").exists()
    assert resolve_model_path("some-org/unknown-model") == "some-org/unknown-model"


def test_a_path_that_is_no_model_folder_says_so(tmp_path):
    """A path is never a Hub id: a missing folder or a file is said to be one, not "Repo id must be..."."""
    from xmcbench.encoders.text_encoder import resolve_model_path

    for name in (str(tmp_path / "nope"), "./no-such-model", "~/no/such/model", "a/b/c"):
        with pytest.raises(XmcbenchError, match=f"encoder {re.escape(name)} does not exist; give a folder"):
            resolve_model_path(name)
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(XmcbenchError, match="is a file, not a model folder"):
        resolve_model_path(str(tmp_path / "weights.bin"))


def test_unknown_model_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(XmcbenchError, match="cannot load encoder 'no-such-org/no-such-model'"):
        TextEncoder("no-such-org/no-such-model")


@pytest.mark.slow
def test_minilm_embeddings_are_sensible_and_order_independent():
    enc = TextEncoder("all-MiniLM-L6-v2", max_length=32)
    texts = ["a pair of running shoes", "sneakers for jogging", "a history of the roman empire", ""]
    emb = enc.encode(texts, batch_size=2)
    assert emb.shape == (4, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sim = emb @ emb.T
    assert sim[0, 1] > sim[0, 2] + 0.2  # the model, not noise
    # Length-sorted batching must not change any embedding.
    one_by_one = np.stack([enc.encode([t], batch_size=1)[0] for t in texts])
    np.testing.assert_allclose(emb, one_by_one, atol=1e-5)
    # Pooling matches the sentence-transformers definition (masked mean, then normalise).
    batch = enc.tokenize(texts[:1])
    with torch.no_grad():
        hidden = enc.model(**batch).last_hidden_state[0]
    ref = hidden.mean(0) / hidden.mean(0).norm()
    np.testing.assert_allclose(emb[0], ref.numpy(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("projection_dim", [None, 64])
def test_saved_folder_loads_in_sentence_transformers_and_back(tmp_path, projection_dim):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    torch.manual_seed(0)
    enc = TextEncoder("all-MiniLM-L6-v2", max_length=24, projection_dim=projection_dim)
    texts = ["extreme multi-label classification", "wireless headphones", "a"]
    ours = enc.encode(texts)
    folder = enc.save(tmp_path / "model")
    assert (folder / "model.safetensors").exists()
    st = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    np.testing.assert_allclose(st.encode(texts, convert_to_numpy=True), ours, atol=1e-5)
    again = TextEncoder(str(folder), max_length=24)
    np.testing.assert_allclose(again.encode(texts), ours, atol=1e-6)
    assert again.dim == (projection_dim or 384)


def test_encode_autocasts_as_the_recipe_says(monkeypatch):
    """Test queries are encoded in the run's precision (not bf16 whatever the recipe says)."""
    import contextlib

    import xmcbench.train.precision as precision

    seen = []

    @contextlib.contextmanager
    def spy(device, prec):
        seen.append(prec)
        yield

    monkeypatch.setattr(precision, "autocast", spy)
    enc = TextEncoder("all-MiniLM-L6-v2", max_length=8)
    enc.encode(["a", "b"], batch_size=1, device="cpu", precision="fp32")
    assert seen == ["fp32", "fp32"]
    seen.clear()
    enc.encode(["a"], device="cpu")
    assert seen == ["fp32"]  # the default: a caller that wants bf16 passes its run's precision


def test_a_model_folder_without_tokenizer_files_is_refused(tiny_encoder_dir, tmp_path):
    """transformers would build an all-[UNK] tokenizer from the config alone: a run must not train on it."""
    import shutil

    folder = tmp_path / "weights-only"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(f"{tiny_encoder_dir}/{name}", folder / name)
    with pytest.raises(XmcbenchError, match="has a model but no tokenizer files"):
        TextEncoder(str(folder))
    assert TextEncoder(tiny_encoder_dir).tokenizer("hello")["input_ids"] != [101, 100, 102]  # the real one


@pytest.mark.slow
@pytest.mark.parametrize("max_length", [1, 2])
def test_max_length_without_room_for_text_is_refused(max_length):
    """At 1 the tokenizer returns more tokens than asked (the token caches crashed on them); at 2
    every text is [CLS] [SEP], one vector for all."""
    with pytest.raises(
        XmcbenchError, match=f"encoder.max_length {max_length} leaves no room for text next to the 2 special"
    ):
        TextEncoder("all-MiniLM-L6-v2", max_length=max_length)
    enc = TextEncoder("all-MiniLM-L6-v2", max_length=3)
    assert enc.encode(["one word", "other"]).shape == (2, 384)
    with pytest.raises(XmcbenchError, match="encoder.label_max_length 2 leaves no room"):
        enc.encode(["a label"], max_length=2)


def test_a_length_beyond_the_models_positions_is_refused_before_any_text_meets_it():
    """MiniLM has 512 positions: 1024 passed validation and failed at the first long text, mid-training."""
    enc = TextEncoder("all-MiniLM-L6-v2", max_length=32)
    assert enc.max_positions == 512
    enc.check_length(512, "encoder.max_length")
    with pytest.raises(XmcbenchError, match="encoder.max_length 1024 is more than the 512 token positions"):
        TextEncoder("all-MiniLM-L6-v2", max_length=1024)
