import json
import random

import numpy as np
import pytest
import torch
from torch import nn

from xmcbench.errors import XmcbenchError
from xmcbench.train import checkpoint as checkpoint_module
from xmcbench.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from xmcbench.train.optim import build_optimizer, build_scheduler
from xmcbench.train.precision import seed_everything

EPOCHS, STEPS_PER_EPOCH = 4, 5


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))


class Trainer:
    """A miniature fit loop drawing from every RNG a real one uses: NumPy (batch order),
    torch (data noise, dropout) and Python's random (an augmentation coin)."""

    def __init__(self, seed: int = 0):
        seed_everything(seed)
        self.model = _model()
        self.optimizer = build_optimizer([(self.model.named_parameters(), 1e-2)], weight_decay=0.01)
        self.scheduler = build_scheduler(self.optimizer, EPOCHS * STEPS_PER_EPOCH, 0.2, "linear")
        self.sampler = np.random.default_rng(seed)
        self.data = torch.linspace(-1, 1, 40 * 6).reshape(40, 6)
        self.step = 0

    def run_epoch(self) -> None:
        order = self.sampler.permutation(len(self.data))
        for batch in np.array_split(order, STEPS_PER_EPOCH):
            x = self.data[batch] + 0.1 * torch.randn(len(batch), 6)
            if random.random() < 0.5:
                x = x.flip(0)
            loss = self.model(x).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()
            self.step += 1

    def save(self, directory, epoch: int, **kwargs):
        return save_checkpoint(
            directory,
            epoch,
            self.step,
            self.model,
            self.optimizer,
            self.scheduler,
            sampler_state={"bit_generator": self.sampler.bit_generator.state},
            extra={"note": "hi"},
            **kwargs,
        )

    def load(self, directory, **kwargs) -> int:
        state = load_checkpoint(directory, self.model, self.optimizer, self.scheduler, **kwargs)
        self.sampler.bit_generator.state = state["sampler_state"]["bit_generator"]
        self.step = state["step"]
        assert state["extra"] == {"note": "hi"}
        return state["epoch"]


def _uninterrupted() -> Trainer:
    trainer = Trainer()
    for _ in range(EPOCHS):
        trainer.run_epoch()
    return trainer


def _resumed(tmp_path, restore_rng: bool = True) -> Trainer:
    first = Trainer()
    for epoch in range(2):
        first.run_epoch()
        first.save(tmp_path, epoch + 1)
    # Fresh objects, fresh seed: everything must come from the checkpoint.
    second = Trainer(seed=999)
    start = second.load(tmp_path, restore_rng=restore_rng)
    assert start == 2 and second.step == 2 * STEPS_PER_EPOCH
    for _ in range(start, EPOCHS):
        second.run_epoch()
    return second


def test_resume_reproduces_the_uninterrupted_trajectory(tmp_path):
    reference = _uninterrupted()
    resumed = _resumed(tmp_path)
    for (name, a), b in zip(reference.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.optimizer.param_groups[0]["lr"] == reference.optimizer.param_groups[0]["lr"]
    assert resumed.scheduler.last_epoch == EPOCHS * STEPS_PER_EPOCH


def test_without_the_rng_state_the_trajectory_differs(tmp_path):
    """The RNG really matters to this loop, so the test above can fail."""
    reference = _uninterrupted()
    resumed = _resumed(tmp_path, restore_rng=False)
    assert not torch.equal(reference.model[0].weight, resumed.model[0].weight)


def test_layout_latest_pointer_and_pruning(tmp_path):
    trainer = Trainer()
    paths = [trainer.save(tmp_path, epoch) for epoch in range(3)]
    trainer.step = 7
    newest = trainer.save(tmp_path, 3, keep=2)
    assert newest.name == "epoch-0003-step-000000007"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0002-step-000000000", newest.name, "latest"]
    assert latest_checkpoint(tmp_path) == newest
    assert {p.name for p in newest.iterdir()} == {"model.safetensors", "state.pt", "meta.json"}
    meta = json.loads((newest / "meta.json").read_text())
    assert meta["epoch"] == 3 and meta["step"] == 7 and meta["world_size"] == 1
    assert [p.exists() for p in paths] == [False, False, True]  # keep=1 pruned the older two
    again = trainer.save(tmp_path, 3, keep=2)  # same epoch and step again: replaced in place
    assert again == newest and latest_checkpoint(tmp_path) == newest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0002-step-000000000", newest.name, "latest"]


def test_a_crash_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    trainer = Trainer()
    trainer.run_epoch()
    good = trainer.save(tmp_path, 1)
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.run_epoch()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        trainer.save(tmp_path, 2)
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path) == good
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # the half-written folder

    fresh = Trainer(seed=5)
    assert fresh.load(tmp_path) == 1
    for key, value in fresh.model.state_dict().items():
        assert torch.equal(value, weights[key])
    trainer.save(tmp_path, 2)  # the next save clears the debris
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_no_checkpoint_yet_gives_none(tmp_path):
    assert load_checkpoint(tmp_path, _model()) is None
    assert load_checkpoint(tmp_path / "missing", _model()) is None


def test_broken_latest_pointer_is_a_clear_error(tmp_path):
    Trainer().save(tmp_path, 0)
    (tmp_path / "latest").write_text("epoch-0009-step-000000099\n")
    with pytest.raises(XmcbenchError, match=r"latest: points to 'epoch-0009-step-000000099', which is not a complete"):
        load_checkpoint(tmp_path, _model())


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda ckpt: (ckpt / "model.safetensors").write_bytes(b"\x00" * 100), "model.safetensors: damaged checkpoint"),
        (lambda ckpt: (ckpt / "model.safetensors").write_bytes(b""), "model.safetensors: damaged checkpoint"),
        (lambda ckpt: _cut(ckpt / "state.pt", 5000), "state.pt: damaged checkpoint"),
        (lambda ckpt: torch.save([1, 2], ckpt / "state.pt"), "state.pt: damaged checkpoint"),
        (lambda ckpt: (ckpt.parent / "latest").write_bytes(b"\xff\xfe\n"), "which is not a complete checkpoint"),
    ],
)
def test_a_damaged_checkpoint_names_the_folder_to_delete(tmp_path, damage, message):
    """A file cut short by hand or a dying disk: one error naming the whole checkpoint folder, whose
    deletion lets the run train again (deleting only the damaged epoch folder left ``latest`` dangling)."""
    ckpt = Trainer().save(tmp_path, 0)
    damage(ckpt)
    with pytest.raises(XmcbenchError, match=message) as info:
        load_checkpoint(tmp_path, _model())
    assert f"delete {tmp_path} to train this run again from its first epoch" in str(info.value)


def _cut(path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)


def test_a_deleted_latest_pointer_resumes_from_the_newest_complete_checkpoint(tmp_path, caplog):
    trainer = Trainer()
    trainer.save(tmp_path, 0)
    trainer.step = 5
    newest = trainer.save(tmp_path, 1, keep=2)
    (tmp_path / "latest").unlink()
    (tmp_path / "epoch-0002-step-000000009").mkdir()  # not a checkpoint: no files in it
    with caplog.at_level("WARNING", logger="xmcbench.train"):
        assert latest_checkpoint(tmp_path) == newest
    assert "latest is missing; resuming from epoch-0001-step-000000005" in caplog.text
    assert load_checkpoint(tmp_path, _model())["epoch"] == 1


def test_checkpoint_of_another_model_is_refused(tmp_path):
    Trainer().save(tmp_path, 0)
    with pytest.raises(XmcbenchError, match="does not fit this model"):
        load_checkpoint(tmp_path, nn.Linear(6, 3))


def test_world_size_change_is_refused_unless_allowed(tmp_path, monkeypatch):
    Trainer().save(tmp_path, 0)
    monkeypatch.setattr(checkpoint_module, "get_world_size", lambda: 2)
    with pytest.raises(XmcbenchError, match="written by 1 process.* this run has 2"):
        load_checkpoint(tmp_path, _model())
    assert load_checkpoint(tmp_path, _model(), allow_world_size_change=True)["epoch"] == 0


def test_numpy_state_round_trips(tmp_path):
    model = _model()
    bank = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    save_checkpoint(
        tmp_path,
        1,
        2,
        model,
        None,
        None,
        sampler_state={"clusters": np.arange(7), "epoch_seed": np.int64(3)},
        extra={"bank": bank, "best": [0.5, 1]},
    )
    state = load_checkpoint(tmp_path, model)
    np.testing.assert_array_equal(state["sampler_state"]["clusters"], np.arange(7))
    assert state["sampler_state"]["epoch_seed"] == 3
    np.testing.assert_array_equal(state["extra"]["bank"], bank)
    assert state["extra"]["best"] == [0.5, 1]
    with pytest.raises(XmcbenchError, match=r"extra\['names'\]: cannot checkpoint a NumPy array of dtype <U1"):
        save_checkpoint(tmp_path, 1, 3, model, None, None, extra={"names": np.array(["a"])})


def test_tied_weights_are_saved_once_and_restored(tmp_path):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
            self.out.weight = self.embed.weight

    model = Tied()
    save_checkpoint(tmp_path, 0, 0, model, None, None)
    fresh = Tied()
    load_checkpoint(tmp_path, fresh)
    assert torch.equal(fresh.embed.weight, model.embed.weight) and fresh.out.weight is fresh.embed.weight
