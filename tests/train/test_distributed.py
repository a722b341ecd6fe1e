"""Distributed helpers: shards, collectives with gradients, the sharded DEXML loss, DDP.

Multi-process tests run 2 CPU processes (gloo, loopback only) and compare with one process.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import dist_worker
import pytest
import torch
import torch.multiprocessing as mp
from tiny_models import TinyBertEncoder, reference_decoupled_softmax

from xmcbench.errors import XmcbenchError
from xmcbench.train.distributed import (
    all_gather_with_grad,
    all_reduce_gradients,
    all_reduce_sum,
    init_distributed,
    is_main,
    shard_range,
    wrap_ddp,
)
from xmcbench.train.sharded_decoupled_softmax import sharded_decoupled_softmax_loss

WORKER = Path(dist_worker.__file__)


def _run_spawned(scenario: str, out_dir: Path, world_size: int = 2, timeout_s: float = 180) -> None:
    context = mp.spawn(
        dist_worker.spawn_entry,
        args=(world_size, scenario, str(out_dir), str(out_dir / "rendezvous")),
        nprocs=world_size,
        join=False,
    )
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"{scenario}: worker processes did not finish within {timeout_s} s")


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """Run the spawn-launched scenarios once (2 gloo processes); tests read their result files."""
    out_dir = tmp_path_factory.mktemp("spawn")
    _run_spawned("spawn_suite", out_dir)

    def results(scenario: str) -> list:
        return [torch.load(out_dir / f"{scenario}-rank{r}.pt", weights_only=False) for r in range(2)]

    return results


@pytest.mark.parametrize("n", [0, 1, 2, 7, 10, 13, 100, 1_000_003])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_shards_cover_every_label_exactly_once(n, world_size):
    shards = [shard_range(n, r, world_size) for r in range(world_size)]
    assert [i for s in shards for i in s] == list(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_bad_shard_arguments():
    with pytest.raises(XmcbenchError, match="rank 2 is not in a world of size 2"):
        shard_range(10, 2, 2)
    with pytest.raises(XmcbenchError, match="negative"):
        shard_range(-1, 0, 1)


def test_single_process_is_the_identity(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    info = init_distributed(device="cpu")
    assert (info.rank, info.world_size, info.is_main, str(info.device)) == (0, 1, True, "cpu")
    assert is_main()
    x = torch.randn(3, 2)
    assert all_gather_with_grad(x) is x and all_reduce_sum(x) is x
    model = torch.nn.Linear(2, 2)
    assert wrap_ddp(model) is model
    all_reduce_gradients(model.parameters())  # nothing to do, no error


def test_world_size_without_rank_says_use_torchrun(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(XmcbenchError, match="launch with torchrun"):
        init_distributed(device="cpu")


def test_exit_rank_flushes_streams_and_logs_and_keeps_the_exit_code(tmp_path):
    """exit_rank skips interpreter finalization, so whatever is still buffered must be written
    by it: block-buffered stdout (a pipe), stderr and a logging file handler."""
    log_file = tmp_path / "rank.log"
    script = f"""
import logging, sys
from xmcbench.train.distributed import exit_rank
logging.basicConfig(filename={str(log_file)!r}, level=logging.INFO)
logging.getLogger("xmcbench").info("logged before exit")
sys.stdout.write("x" * 100 + "printed before exit")
sys.stderr.write("warned before exit")
exit_rank(3)
raise SystemExit("exit_rank returned")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout.endswith("printed before exit")
    assert done.stderr == "warned before exit"
    assert "logged before exit" in log_file.read_text()


def _single_process_reference(case: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    queries = case["queries"].clone().requires_grad_(True)
    labels = case["labels"].clone().requires_grad_(True)
    loss = reference_decoupled_softmax(queries, labels, case["targets"], case["temperature"], case.get("counted"))
    loss.backward()
    return loss.detach(), queries.grad, labels.grad


@pytest.mark.parametrize("index", range(len(dist_worker.sharded_loss_cases())))
def test_sharded_loss_in_one_process_is_the_decoupled_softmax(index):
    case = dist_worker.sharded_loss_cases()[index]
    ref_loss, ref_q, ref_l = _single_process_reference(case)
    queries = case["queries"].clone().requires_grad_(True)
    labels = case["labels"].clone().requires_grad_(True)
    loss = sharded_decoupled_softmax_loss(
        queries, labels, case["targets"], case["temperature"], counted_shard=case.get("counted")
    )
    loss.backward()
    informative = (case["targets"].any(1) & (~case["targets"]).any(1)).any()  # a row with both kinds
    assert torch.isfinite(loss) and (loss > 0) == informative
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(queries.grad, ref_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(labels.grad, ref_l, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block", [1, 2, 5, 10_000])
@pytest.mark.parametrize("index", range(len(dist_worker.sharded_loss_cases())))
def test_label_blocks_do_not_change_the_loss_or_its_gradients(index, block):
    """In float64 every block size gives the plain expression's value and gradients to 1e-12."""
    case = {
        k: v.double() if v.is_floating_point() else v
        for k, v in dist_worker.sharded_loss_cases()[index].items()
        if torch.is_tensor(v)
    }
    case["temperature"] = dist_worker.sharded_loss_cases()[index]["temperature"]
    ref_loss, ref_q, ref_l = _single_process_reference(case)
    queries = case["queries"].clone().requires_grad_(True)
    labels = case["labels"].clone().requires_grad_(True)
    loss = sharded_decoupled_softmax_loss(
        queries, labels, case["targets"], case["temperature"], counted_shard=case.get("counted"), block=block
    )
    loss.backward()
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, ref_loss, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(queries.grad, ref_q, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(labels.grad, ref_l, atol=1e-12, rtol=1e-10)


def _sparse(mask: torch.Tensor, repeat: bool) -> torch.Tensor:
    """``mask`` as a sparse COO tensor, uncoalesced; ``repeat``: every cell stored twice, plus a
    stored False at every negative cell (none of which may change anything)."""
    index = mask.nonzero().T
    values = torch.ones(index.shape[1], dtype=torch.bool)
    if repeat:
        off = (~mask).nonzero().T
        index = torch.cat([index, index, off], dim=1)
        values = torch.cat([values, values, torch.zeros(off.shape[1], dtype=torch.bool)])
    return torch.sparse_coo_tensor(index, values, mask.shape, check_invariants=True)


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("index", range(len(dist_worker.sharded_loss_cases())))
def test_sparse_masks_give_the_dense_masks_loss_and_gradients(index, repeat):
    case = dist_worker.sharded_loss_cases()[index]
    results = []
    for layout in ("dense", "sparse"):
        queries = case["queries"].double().requires_grad_(True)
        labels = case["labels"].double().requires_grad_(True)
        targets, counted = case["targets"], case.get("counted")
        if layout == "sparse":
            targets = _sparse(targets, repeat)
            counted = None if counted is None else _sparse(counted, repeat)
        loss = sharded_decoupled_softmax_loss(queries, labels, targets, case["temperature"], counted, block=4)
        loss.backward()
        results.append((loss.detach(), queries.grad, labels.grad))
    for dense, sparse in zip(*results, strict=True):
        torch.testing.assert_close(sparse, dense, atol=0, rtol=0)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_masks_are_checked_like_dense_ones():
    q, labels = torch.randn(2, 3), torch.randn(4, 3)
    targets = torch.tensor([[True, False, False, False], [False, False, True, True]])
    with pytest.raises(XmcbenchError, match="counted_shard must"):  # a counted cell that is no positive
        sharded_decoupled_softmax_loss(q, labels, targets.to_sparse(), 0.1, (~targets).to_sparse())
    with pytest.raises(XmcbenchError, match="counted_shard must"):
        sharded_decoupled_softmax_loss(q, labels, targets.to_sparse(), 0.1, targets[:, :3].to_sparse())
    with pytest.raises(XmcbenchError, match=r"targets_shard has shape \(2, 3\)"):
        sharded_decoupled_softmax_loss(q, labels, targets[:, :3].to_sparse(), 0.1)
    cancelled = torch.sparse_coo_tensor(torch.tensor([[1, 1], [0, 0]]), torch.tensor([1.0, -1.0]), (2, 4))
    one = sharded_decoupled_softmax_loss(q, labels, targets.float().to_sparse(), 0.1)
    summed = torch.sparse_coo_tensor(
        torch.cat([targets.nonzero().T, cancelled._indices()], 1),
        torch.cat([torch.ones(3), cancelled._values()]),
        (2, 4),
    )  # what to_dense() reads: +1 and -1 at one cell make no positive
    assert sharded_decoupled_softmax_loss(q, labels, summed, 0.1) == one
    hybrid = torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.ones(2, 4, dtype=torch.bool), (2, 4))
    with pytest.raises(XmcbenchError, match="2 sparse and no dense dimensions"):
        sharded_decoupled_softmax_loss(q, labels, hybrid, 0.1)
    with pytest.raises(XmcbenchError, match="dense or sparse COO"):
        sharded_decoupled_softmax_loss(q, labels, targets.float().to_sparse_csr(), 0.1)


def test_sharded_loss_gradients_match_finite_differences():
    gen = torch.Generator().manual_seed(3)
    queries = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    labels = torch.randn(7, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.rand(4, 7, generator=gen) < 0.4
    targets[0] = False
    targets[1, :] = True
    targets[2, 0] = True
    counted = targets & (torch.rand(4, 7, generator=gen) < 0.7)
    for kwargs in ({}, {"counted_shard": counted}):
        assert torch.autograd.gradcheck(
            lambda q, z, kw=kwargs: sharded_decoupled_softmax_loss(q, z, targets, 0.3, block=3, **kw),
            (queries, labels),
        )


def test_half_precision_embeddings_are_scored_in_float32():
    case = dist_worker.sharded_loss_cases()[0]
    queries = case["queries"].bfloat16().requires_grad_(True)
    labels = case["labels"].bfloat16().requires_grad_(True)
    loss = sharded_decoupled_softmax_loss(queries, labels, case["targets"], case["temperature"], block=4)
    loss.backward()
    assert loss.dtype == torch.float32 and queries.grad.dtype == torch.bfloat16
    expected = sharded_decoupled_softmax_loss(queries.float(), labels.float(), case["targets"], case["temperature"])
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)


def test_backward_under_autocast_stays_in_float32():
    """A caller may run backward inside a bf16 autocast region: the recomputed scores stay float32."""
    case = dist_worker.sharded_loss_cases()[0]
    grads = []
    for autocast in (False, True):
        queries = case["queries"].clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = sharded_decoupled_softmax_loss(
                queries, case["labels"], case["targets"], case["temperature"], block=3
            )
            loss.backward()
        grads.append(queries.grad)
    torch.testing.assert_close(grads[1], grads[0], atol=0, rtol=0)


def test_large_margins_keep_float64_exact():
    """log(1 + e^x) past x = 20, where softplus would return x itself (2e-9 off in float64)."""
    queries = torch.tensor([[1.0]], dtype=torch.float64)
    labels = torch.tensor([[0.0], [21.0], [-3.0]], dtype=torch.float64)
    targets = torch.tensor([[True, False, False]])
    loss = sharded_decoupled_softmax_loss(queries, labels, targets, 1.0)
    expected = reference_decoupled_softmax(queries, labels, targets, 1.0)
    assert abs(loss.item() - expected.item()) < 1e-12 and abs(loss.item() - 21.0) > 1e-10


def test_sharded_loss_agrees_with_the_losses_package():
    """A second, independently written implementation (xmcbench.losses) gives the same values."""
    losses = pytest.importorskip("xmcbench.losses.decoupled_softmax")
    for case in dist_worker.sharded_loss_cases()[:4]:
        scores = case["queries"] @ case["labels"].T / case["temperature"]
        expected = losses.decoupled_softmax_loss(scores, case["targets"])
        loss = sharded_decoupled_softmax_loss(case["queries"], case["labels"], case["targets"], case["temperature"])
        torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)


def test_sharded_loss_edge_cases():
    q, labels = torch.randn(2, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    none = sharded_decoupled_softmax_loss(q, labels, torch.zeros(2, 4, dtype=torch.bool), 0.1)
    none.backward()
    assert none.item() == 0.0 and torch.count_nonzero(q.grad) == 0
    with pytest.raises(
        XmcbenchError,
        match=r"targets_shard has shape \(2, 3\) but the global batch has 2 queries and this rank has 4 labels",
    ):
        sharded_decoupled_softmax_loss(q, labels, torch.zeros(2, 3, dtype=torch.bool), 0.1)
    with pytest.raises(XmcbenchError, match="counted_shard must"):
        sharded_decoupled_softmax_loss(
            q, labels, torch.zeros(2, 4, dtype=torch.bool), 0.1, torch.ones(2, 4, dtype=torch.bool)
        )
    with pytest.raises(XmcbenchError, match="temperature"):
        sharded_decoupled_softmax_loss(q, labels, torch.zeros(2, 4, dtype=torch.bool), 0.0)
    with pytest.raises(XmcbenchError, match="block must be >= 1 label"):
        sharded_decoupled_softmax_loss(q, labels, torch.zeros(2, 4, dtype=torch.bool), 0.1, block=0)


@pytest.mark.slow
def test_sharded_loss_on_two_processes_matches_one(spawned):
    ranks = spawned("sharded_loss")
    for index, case in enumerate(dist_worker.sharded_loss_cases()):
        ref_loss, ref_q, ref_l = _single_process_reference(case)
        for rank in ranks:  # every rank holds the full-label-space loss
            torch.testing.assert_close(rank[index]["loss"], ref_loss, atol=1e-5, rtol=1e-5)
        q_grad = torch.cat([rank[index]["q_grad"] for rank in ranks])
        label_grad = torch.cat(
            [
                rank[index]["label_grad"] if rank[index]["label_grad"] is not None else torch.zeros(0, ref_l.shape[1])
                for rank in ranks
            ]
        )
        torch.testing.assert_close(q_grad, ref_q, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(label_grad, ref_l, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_ddp_on_two_processes_matches_one_process_on_the_whole_batch(spawned):
    ranks = spawned("ddp")
    model, x, y = dist_worker.ddp_batch()
    (model(x) - y).pow(2).mean().backward()
    for r, rank in enumerate(ranks):
        assert rank["type"] == "DistributedDataParallel"
        for name, param in model.named_parameters():
            torch.testing.assert_close(rank["grads"][name], param.grad, atol=1e-6, rtol=1e-5)
        # save_checkpoint gathered each rank's RNG; load_checkpoint gave each rank its own back.
        assert torch.equal(rank["after_load"], rank["expected"])
        assert rank["sampler"] == {"rank": r}
    assert not torch.equal(ranks[0]["expected"], ranks[1]["expected"])
    # DDP + gradient cache + sharded loss: the gradients of one process over all labels.
    reference = _dexml_reference_grads()
    for rank in ranks:
        _assert_grads_match(rank["encoder_grads"], reference)


def _dexml_reference_grads() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model = TinyBertEncoder(dropout=0.0)
    queries, labels, targets = dist_worker.dexml_batch()
    loss = reference_decoupled_softmax(model(queries), model(labels), targets, 0.1)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def _assert_grads_match(grads: dict, reference: tuple) -> None:
    _, ref_grads = reference
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_dexml_step_under_torchrun_matches_one_process(tmp_path):
    """torchrun, 2 ranks: gradient cache on each label shard + sharded loss + summed gradients
    give the gradients of one process doing plain backpropagation over all labels."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "XMCBENCH_HOME": str(tmp_path / "home")}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--nnodes",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "127.0.0.1:0",
        str(WORKER),
        "dexml_step",
        str(tmp_path),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"dexml_step-rank{r}.pt", weights_only=False) for r in range(2)]
    reference = _dexml_reference_grads()
    for rank in ranks:
        torch.testing.assert_close(rank["loss"], reference[0], atol=1e-5, rtol=1e-5)
        _assert_grads_match(rank["grads"], reference)
