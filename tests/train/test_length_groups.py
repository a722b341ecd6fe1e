"""Length-grouped micro-batches: the split rule on its own, and ``dual_encoder.embed`` built on it
(the same embeddings and gradients as one forward pass, in the caller's row order)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

from xmcbench.train.length_groups import GROUP_COST, length_groups, padded_tokens

WORDS = (
    "apple river house green music paper light stone table water window garden summer winter yellow "
    "orange silver market bridge castle"
).split()


def _check_partition(lengths, groups, min_rows, max_groups):
    """Every position once; groups are consecutive runs of the stable length order, each big enough."""
    lengths = np.asarray(lengths)
    assert 1 <= len(groups) <= max_groups
    order = np.concatenate(groups)
    np.testing.assert_array_equal(order, np.argsort(lengths, kind="stable"))
    if len(groups) > 1:
        assert all(g.size >= min_rows for g in groups)


def _brute_force_cost(lengths, min_rows, max_groups, group_cost):
    s = np.sort(lengths)
    n, best = s.size, np.inf
    for g in range(1, max_groups + 1):
        for inner in itertools.combinations(range(1, n), g - 1):
            edges = (0, *inner, n)
            sizes = np.diff(edges)
            if g > 1 and sizes.min() < min_rows:
                continue
            best = min(best, sum(int(b - a) * int(s[b - 1]) for a, b in zip(edges[:-1], edges[1:])) + g * group_cost)
    return best


def test_partition_covers_every_row_once_in_length_order():
    rng = np.random.default_rng(0)
    for trial in range(50):
        n = int(rng.integers(0, 300))
        lengths = rng.integers(3, 40, n)
        min_rows, max_groups = int(rng.integers(1, 40)), int(rng.integers(1, 6))
        groups = length_groups(lengths, min_rows=min_rows, max_groups=max_groups, group_cost=float(rng.integers(0, 80)))
        _check_partition(lengths, groups, min_rows, max_groups)
        ends = [int(lengths[g].max()) for g in groups if g.size]
        assert ends == sorted(ends)  # shortest group first


def test_split_is_the_cheapest_one():
    """Against every partition of the sorted rows, on small batches."""
    rng = np.random.default_rng(1)
    for trial in range(40):
        n = int(rng.integers(2, 26))
        lengths = rng.integers(2, 12, n) if trial % 2 else np.r_[rng.integers(2, 5, n - 3), rng.integers(20, 30, 3)]
        min_rows, max_groups = int(rng.integers(1, 6)), int(rng.integers(2, 5))
        group_cost = float(rng.choice([0.0, 3.0, 10.0]))
        groups = length_groups(lengths, min_rows=min_rows, max_groups=max_groups, group_cost=group_cost)
        _check_partition(lengths, groups, min_rows, max_groups)
        got = padded_tokens(lengths, groups) + len(groups) * group_cost
        assert got == pytest.approx(_brute_force_cost(lengths, min_rows, max_groups, group_cost))


def test_skewed_lengths_are_split_and_pad_less():
    rng = np.random.default_rng(2)
    lengths = rng.permutation(np.r_[rng.integers(8, 12, 120), rng.integers(28, 33, 30)])  # (150,)
    groups = length_groups(lengths, min_rows=16)
    _check_partition(lengths, groups, 16, 4)
    assert len(groups) >= 2
    single = lengths.size * int(lengths.max())
    assert padded_tokens(lengths, groups) + len(groups) * GROUP_COST < 0.6 * single
    # the short rows are not padded to the long ones
    assert int(lengths[groups[0]].max()) < 12


def test_one_group_for_uniform_lengths_and_small_batches():
    uniform = np.full(500, 17)
    assert len(length_groups(uniform, min_rows=16)) == 1
    assert len(length_groups(uniform, min_rows=1, group_cost=0.0)) == 1  # a tie goes to fewer groups
    skewed = np.r_[np.full(20, 3), np.full(11, 30)]  # worth splitting, but not into two groups of 16
    assert len(length_groups(skewed, min_rows=16)) == 1
    assert len(length_groups(np.r_[skewed, 3], min_rows=16)) == 2
    assert len(length_groups(skewed, min_rows=16, max_groups=1)) == 1
    for lengths in (np.array([], dtype=np.int32), np.array([5])):
        groups = length_groups(lengths, min_rows=16)
        assert len(groups) == 1 and groups[0].size == lengths.size


def test_cost_of_a_group_decides():
    lengths = np.r_[np.full(32, 10), np.full(32, 12)]  # splitting saves 64 padded tokens
    assert len(length_groups(lengths, min_rows=16, group_cost=63.0)) == 2
    assert len(length_groups(lengths, min_rows=16, group_cost=64.0)) == 1


def test_large_batches_stay_fast():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 513, 100_000).astype(np.int32)
    start = time.perf_counter()
    groups = length_groups(lengths, min_rows=16, max_groups=4)
    elapsed = time.perf_counter() - start
    _check_partition(lengths, groups, 16, 4)
    assert len(groups) == 4
    assert elapsed < 5.0  # a sort and a DP over ~2k cut points; O(n^2) would take minutes


# ---------------------------------------------------------------------------------------------
# dual_encoder.embed


def test_the_cost_of_a_group_follows_the_share_of_embedding_weights(tiny_encoder_dir):
    """MiniLM's measured cost at MiniLM's ratio; far more for the test BERT (nearly all embeddings)."""
    from xmcbench.encoders import TextEncoder
    from xmcbench.methods import dual_encoder as de
    from xmcbench.train.length_groups import group_cost_for

    assert group_cost_for(22_713_216, 11_918_592) == pytest.approx(GROUP_COST, rel=0.01)  # all-MiniLM-L6-v2
    assert group_cost_for(109_482_240, 23_837_184) < GROUP_COST  # BERT-base: a token costs more
    tiny = TextEncoder(tiny_encoder_dir, max_length=32)
    assert de._group_cost(tiny) > 20 * GROUP_COST  # so a training batch of the test BERT is never split
    assert de._group_cost(tiny) == de._group_cost(tiny)


@pytest.fixture
def minilm_cost(monkeypatch):
    """The tiny BERT priced like MiniLM, so that the batches below are split."""
    from xmcbench.methods import dual_encoder as de

    monkeypatch.setattr(de, "_group_cost", lambda encoder: GROUP_COST)


@pytest.fixture(scope="module")
def encoder_and_cache(tiny_encoder_dir, tmp_path_factory):
    """The tiny BERT (with a projection, so every part of TextEncoder has gradients) and a token
    cache of 200 distinct texts: most 2 to 6 words, some 20 to 28 (a skewed length mix)."""
    from xmcbench.data.tokenized import TokenCache
    from xmcbench.encoders import TextEncoder

    torch.manual_seed(0)
    encoder = TextEncoder(tiny_encoder_dir, max_length=32, projection_dim=8).eval()
    rng = np.random.default_rng(4)
    counts = np.r_[rng.integers(2, 7, 150), rng.integers(20, 29, 50)]
    texts = [" ".join(rng.choice(WORDS, int(k))) + f" {i}" for i, k in enumerate(rng.permutation(counts))]
    root = tmp_path_factory.mktemp("tokens")
    cache = TokenCache.build_or_load(texts, encoder.tokenizer, 32, "texts", root=root, progress=False)
    return encoder, cache


def _single_forward(encoder, cache, indices):
    batch = cache.batch(indices)
    return encoder(batch["input_ids"], batch["attention_mask"])  # (b, d)


def _spy(encoder, monkeypatch):
    widths = []
    forward = encoder.forward

    def spy(input_ids, attention_mask):
        widths.append((input_ids.shape[1], int(attention_mask.sum(1).max())))
        return forward(input_ids, attention_mask)

    monkeypatch.setattr(encoder, "forward", spy)
    return widths


def _batch_indices(cache):
    """64 positions, unsorted, with repeats, mixing short and long texts."""
    rng = np.random.default_rng(5)
    idx = rng.choice(len(cache), 64, replace=True)
    idx[10] = idx[50]
    lengths = np.asarray(cache.lengths[idx])
    assert len(np.unique(idx)) < idx.size and not np.all(np.diff(lengths) >= 0)
    assert lengths.min() < 10 and lengths.max() > 20
    return idx


def test_embed_in_groups_equals_one_forward_in_caller_order(encoder_and_cache, monkeypatch, minilm_cost):
    from xmcbench.methods import dual_encoder as de

    encoder, cache = encoder_and_cache
    idx = _batch_indices(cache)
    with torch.no_grad():
        want = _single_forward(encoder, cache, idx)  # (b, d)
        widths = _spy(encoder, monkeypatch)
        got = de.embed(encoder, cache, idx, "cpu")  # (b, d)
    assert len(widths) >= 2  # it was split
    assert got.shape == want.shape == (idx.size, encoder.dim) and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # rows differ, so a wrong order would not pass: repeated indices give the same row, others do not
    assert torch.equal(got[10], got[50])
    different_texts = torch.from_numpy(idx[:, None] != idx[None, :])  # (b, b)
    assert (torch.cdist(want, want)[different_texts] > 1e-4).all()
    # each row is what the text gives alone
    for i in (0, 10, 31, 63):
        torch.testing.assert_close(got[i], _single_forward(encoder, cache, idx[i : i + 1])[0], atol=1e-5, rtol=1e-5)


def test_each_group_is_padded_to_its_own_longest_row(encoder_and_cache, monkeypatch, minilm_cost):
    from xmcbench.methods import dual_encoder as de

    encoder, cache = encoder_and_cache
    idx = _batch_indices(cache)
    lengths = np.asarray(cache.lengths[idx])
    groups = de.embed_groups(encoder, lengths, "cpu")  # MiniLM's cost (minilm_cost): split
    assert len(groups) >= 2
    widths = _spy(encoder, monkeypatch)
    with torch.no_grad():
        de.embed(encoder, cache, idx, "cpu")
    assert [w for w, _ in widths] == [int(lengths[g].max()) for g in groups]
    assert all(width == longest for width, longest in widths)
    assert widths[0][0] < int(lengths.max())  # the short rows were not padded to the longest


def test_embed_gradients_equal_one_forward(encoder_and_cache, monkeypatch, minilm_cost):
    from xmcbench.methods import dual_encoder as de

    encoder, cache = encoder_and_cache
    idx = _batch_indices(cache)
    # The embeddings are unit vectors, so plain .pow(2).sum() would be constant; a target per row
    # makes the loss depend on which row is where.
    target = torch.randn(idx.size, encoder.dim, generator=torch.Generator().manual_seed(6))  # (b, d)

    def grads(fn):
        encoder.zero_grad(set_to_none=True)
        (fn() - target).pow(2).sum().backward()
        return {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}

    want = grads(lambda: _single_forward(encoder, cache, idx))
    widths = _spy(encoder, monkeypatch)
    got = grads(lambda: de.embed(encoder, cache, idx, "cpu"))
    encoder.zero_grad(set_to_none=True)
    assert len(widths) >= 2
    assert got.keys() == want.keys()
    # every weight on the path to the embedding (BERT's unused pooler has none)
    assert {name for name, _ in encoder.named_parameters() if ".pooler." not in name} == want.keys()
    for name in want:  # float sums in another order (and over 1 or 2 threads): ~1e-5 of gradients ~0.5
        torch.testing.assert_close(got[name], want[name], atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    # not a comparison of zeros (attention key biases do get ~0: softmax ignores a shift)
    assert sum(float(g.abs().max()) > 1e-3 for g in want.values()) > 0.8 * len(want)


def test_small_sorted_and_empty_batches_take_one_forward(encoder_and_cache, monkeypatch, minilm_cost):
    from xmcbench.methods import dual_encoder as de

    encoder, cache = encoder_and_cache
    widths = _spy(encoder, monkeypatch)
    order = np.argsort(np.asarray(cache.lengths), kind="stable")
    with torch.no_grad():
        small = order[-31:]  # under 2 x 16 rows
        torch.testing.assert_close(de.embed(encoder, cache, small, "cpu"), _single_forward(encoder, cache, small))
        assert len(widths) == 2  # de.embed's one forward and the reference's
        de.embed(encoder, cache, np.r_[np.repeat(order[60], 40), np.repeat(order[61], 40)], "cpu")  # one length
        assert len(widths) == 3
    # an empty batch reaches the encoder as before: one call with (0, 0) tensors (which BERT refuses)
    calls = []
    monkeypatch.setattr(encoder, "forward", lambda ids, mask: calls.append((ids.shape, mask.shape)) or ids.float())
    de.embed(encoder, cache, np.array([], dtype=np.int64), "cpu")
    assert calls == [((0, 0), (0, 0))]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_small_gpu_batches_take_one_forward(encoder_and_cache, monkeypatch, minilm_cost):
    from xmcbench.methods import dual_encoder as de

    encoder, cache = encoder_and_cache
    encoder = encoder.to("cuda")
    try:
        widths = _spy(encoder, monkeypatch)
        with torch.no_grad():
            de.embed(encoder, cache, _batch_indices(cache), "cuda")
        assert len(widths) == 1
    finally:
        encoder.to("cpu")


def test_a_gpu_batch_is_encoded_in_one_pass(encoder_and_cache, minilm_cost):
    """On a GPU each group's new shape costs more than its padding saves (measured on an H200):
    the batch that splits on a CPU is one group there."""
    from xmcbench.methods import dual_encoder as de

    encoder, cache = encoder_and_cache
    lengths = np.asarray(cache.lengths[_batch_indices(cache)])
    assert len(de.embed_groups(encoder, lengths, "cpu")) >= 2
    (one,) = de.embed_groups(encoder, lengths, "cuda")
    assert one.tolist() == list(range(lengths.size))
