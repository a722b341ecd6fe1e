import contextlib

import pytest
import torch
from tiny_models import TinyBertEncoder, random_targets, random_tokens, reference_decoupled_softmax

from xmcbench.errors import XmcbenchError
from xmcbench.train import gradcache
from xmcbench.train.gradcache import backward_chunks, cached_embeddings, gradcache_step, split_into_chunks

TAU = 0.1


def _loss_fn(targets):
    return lambda q, l: reference_decoupled_softmax(q, l, targets, TAU)


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _plain_step(model, q_chunks, l_chunks, loss_fn) -> torch.Tensor:
    """Ordinary backpropagation through the same chunked forward (the graph kept for all)."""
    q = torch.cat([model(c) for c in q_chunks])  # (B, d)
    l = torch.cat([model(c) for c in l_chunks])  # (N, d)
    loss = loss_fn(q, l)
    loss.backward()
    return loss.detach()


def _assert_same_grads(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and len(a) > 10
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-5, msg=name)


@pytest.fixture
def batch():
    queries = random_tokens(6, 12, seed=1)
    labels = random_tokens(23, 8, seed=2)
    targets = random_targets(6, 23, seed=3)
    return queries, labels, targets


def test_split_into_chunks_handles_tensors_dicts_and_tuples():
    x = torch.arange(10)
    assert [c.tolist() for c in split_into_chunks(x, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    chunks = split_into_chunks({"a": x, "b": x * 2}, 6)
    assert [c["b"].tolist() for c in chunks] == [[0, 2, 4, 6, 8, 10], [12, 14, 16, 18]]
    assert [c[1].tolist() for c in split_into_chunks((x, -x), 7)] == [[0, -1, -2, -3, -4, -5, -6], [-7, -8, -9]]
    with pytest.raises(XmcbenchError, match="chunk_size"):
        split_into_chunks(x, 0)
    with pytest.raises(XmcbenchError, match="cannot split inputs of type str"):
        split_into_chunks("text", 2)


def test_same_loss_and_gradients_as_plain_backprop_with_dropout(batch):
    queries, labels, targets = batch
    model = TinyBertEncoder(dropout=0.1).train()
    q_chunks, l_chunks = split_into_chunks(queries, 4), split_into_chunks(labels, 5)

    torch.manual_seed(11)
    plain_loss = _plain_step(model, q_chunks, l_chunks, _loss_fn(targets))
    plain_grads = _grads(model)
    plain_next = torch.rand(4)  # where the global RNG stands after the step
    model.zero_grad()

    torch.manual_seed(11)
    cached_loss = gradcache_step(model, q_chunks, l_chunks, _loss_fn(targets))
    torch.testing.assert_close(cached_loss, plain_loss, atol=1e-5, rtol=1e-5)
    _assert_same_grads(_grads(model), plain_grads)
    assert torch.equal(torch.rand(4), plain_next)


def test_dropout_really_is_on_so_the_rng_replay_matters(batch, monkeypatch):
    """Without restoring the RNG for the replay the gradients differ: the test above can fail."""
    queries, labels, targets = batch
    model = TinyBertEncoder(dropout=0.1).train()
    q_chunks, l_chunks = split_into_chunks(queries, 4), split_into_chunks(labels, 5)
    torch.manual_seed(11)
    _plain_step(model, q_chunks, l_chunks, _loss_fn(targets))
    plain_grads = _grads(model)
    model.zero_grad()
    monkeypatch.setattr(gradcache.RngSnapshot, "replay", lambda self: contextlib.nullcontext())
    torch.manual_seed(11)
    gradcache_step(model, q_chunks, l_chunks, _loss_fn(targets))
    grads = _grads(model)
    assert any(not torch.allclose(grads[n], plain_grads[n], atol=1e-4) for n in grads)


def test_without_dropout_chunking_changes_nothing(batch):
    """With dropout off the cached, chunked step equals one unchunked forward-backward."""
    queries, labels, targets = batch
    model = TinyBertEncoder(dropout=0.0)
    loss = _plain_step(model, [queries], [labels], _loss_fn(targets))
    full_grads = _grads(model)
    model.zero_grad()
    cached = gradcache_step(model, split_into_chunks(queries, 2), split_into_chunks(labels, 7), _loss_fn(targets))
    torch.testing.assert_close(cached, loss, atol=1e-5, rtol=1e-5)
    _assert_same_grads(_grads(model), full_grads)


def test_label_side_only_with_the_query_graph_kept(batch):
    """The common DEXML use: queries with a graph, only the label pool through the cache."""
    queries, labels, targets = batch
    model = TinyBertEncoder(dropout=0.1).train()
    l_chunks = split_into_chunks(labels, 6)
    torch.manual_seed(5)
    plain_loss = _plain_step(model, [queries], l_chunks, _loss_fn(targets))
    plain_grads = _grads(model)
    model.zero_grad()

    torch.manual_seed(5)
    q = model(queries)  # (B, d) with graph
    cache = cached_embeddings(model, l_chunks)
    assert not cache.embeddings.grad_fn and cache.embeddings.requires_grad and cache.sizes == [6, 6, 6, 5]
    loss = reference_decoupled_softmax(q, cache.embeddings, targets, TAU)
    loss.backward()
    backward_chunks(model, l_chunks, cache)
    torch.testing.assert_close(loss.detach(), plain_loss, atol=1e-5, rtol=1e-5)
    _assert_same_grads(_grads(model), plain_grads)


def test_misuse_is_reported(batch):
    queries, labels, _ = batch
    model = TinyBertEncoder(dropout=0.0)
    chunks = split_into_chunks(labels, 10)
    cache = cached_embeddings(model, chunks)
    with pytest.raises(XmcbenchError, match="call loss.backward"):
        backward_chunks(model, chunks, cache)
    cache.embeddings.sum().backward()
    with pytest.raises(XmcbenchError, match="got 2 chunks but the cache was built from 3"):
        backward_chunks(model, chunks[:2], cache)
    with pytest.raises(XmcbenchError, match="at least one chunk"):
        cached_embeddings(model, [])


@pytest.mark.slow
def test_real_text_encoder_with_dropout(monkeypatch):
    """The shipped encoder (MiniLM, dropout 0.1 in its config) through the cache, end to end."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from xmcbench.encoders import TextEncoder

    encoder = TextEncoder("all-MiniLM-L6-v2", max_length=16).train()
    assert encoder.model.config.hidden_dropout_prob > 0
    query_texts = ["red running shoes", "a history of rome", "jazz piano for beginners"]
    label_texts = ["sneakers", "footwear", "roman empire", "ancient history", "music lessons", "piano", "cooking"]
    targets = torch.zeros(3, 7, dtype=torch.bool)
    targets[0, :2] = targets[1, 2:4] = targets[2, 4:6] = True
    encode = lambda chunk: encoder(chunk["input_ids"], chunk["attention_mask"])  # noqa: E731
    q_chunks = [encoder.tokenize(query_texts)]
    l_chunks = [encoder.tokenize(label_texts[i : i + 3]) for i in range(0, 7, 3)]

    torch.manual_seed(3)
    plain_loss = _plain_step(encode, q_chunks, l_chunks, _loss_fn(targets))
    plain_grads = _grads(encoder)
    encoder.zero_grad()
    torch.manual_seed(3)
    cached_loss = gradcache_step(encode, q_chunks, l_chunks, _loss_fn(targets))
    torch.testing.assert_close(cached_loss, plain_loss, atol=1e-5, rtol=1e-5)
    _assert_same_grads(_grads(encoder), plain_grads)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_dropout_replay_and_bf16_autocast(batch):
    """On a GPU the dropout masks come from the CUDA generator, which the replay must restore."""
    from xmcbench.train.precision import autocast

    queries, labels, targets = batch
    model = TinyBertEncoder(dropout=0.1).cuda().train()
    to_cuda = lambda chunks: [{k: v.cuda() for k, v in c.items()} for c in chunks]  # noqa: E731
    q_chunks, l_chunks = to_cuda(split_into_chunks(queries, 4)), to_cuda(split_into_chunks(labels, 5))
    loss_fn = _loss_fn(targets.cuda())
    for precision, tol in [("fp32", 1e-5), ("bf16", 1e-2)]:
        model.zero_grad()
        torch.manual_seed(11)
        with autocast("cuda", precision):
            plain_loss = _plain_step(model, q_chunks, l_chunks, lambda q, l: loss_fn(q.float(), l.float()))
        plain_grads = _grads(model)
        plain_next = torch.rand(4, device="cuda")
        model.zero_grad()
        torch.manual_seed(11)
        with autocast("cuda", precision):
            cached_loss = gradcache_step(model, q_chunks, l_chunks, lambda q, l: loss_fn(q.float(), l.float()))
        torch.testing.assert_close(cached_loss, plain_loss, atol=tol, rtol=tol)
        for name, grad in _grads(model).items():
            torch.testing.assert_close(grad, plain_grads[name], atol=tol, rtol=tol, msg=name)
        assert torch.equal(torch.rand(4, device="cuda"), plain_next)
