"""The stage cache: keys, a round trip of weights and random states, refusals, one writer at a time."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
import torch

from xmcbench.train.stage_cache import StageCache, fingerprint_texts


def _module(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))


def test_keys_follow_the_inputs_and_nothing_else(tmp_path):
    a = StageCache("kind", {"x": 1, "y": [1, 2]}, root=tmp_path)
    assert StageCache("kind", {"y": [1, 2], "x": 1}, root=tmp_path).key == a.key  # order of keys is no input
    assert StageCache("kind", {"x": 2, "y": [1, 2]}, root=tmp_path).key != a.key
    assert StageCache("other", {"x": 1, "y": [1, 2]}, root=tmp_path).key != a.key
    assert a.folder == tmp_path / "kind" / a.key


def test_text_fingerprints_tell_columns_and_boundaries_apart():
    assert fingerprint_texts(["ab", "c"]) != fingerprint_texts(["a", "bc"])
    assert fingerprint_texts(["a"], ["b"]) != fingerprint_texts(["a", "b"])
    assert fingerprint_texts(None, ["a"]) != fingerprint_texts(["a"], None)
    assert fingerprint_texts(["é"]) == fingerprint_texts(["é"])


def test_a_kept_stage_gives_back_its_weights_and_every_random_state(tmp_path):
    cache = StageCache("kind", {"x": 1}, root=tmp_path)
    assert cache.load() is None
    trained = _module(0)
    torch.manual_seed(5)
    random.seed(6)
    np.random.seed(7)
    assert cache.save(trained, {"note": "made here"})
    after = (torch.rand(3), random.random(), np.random.rand())  # what the next stage would draw

    entry = cache.load()
    assert entry is not None and entry.facts == {"note": "made here"}
    fresh = _module(1)
    torch.manual_seed(99)
    assert cache.restore(fresh, entry)
    for name, value in trained.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value)
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(again[0], after[0]) and again[1:] == after[1:]


def test_weights_that_do_not_fit_are_refused_untouched(tmp_path):
    cache = StageCache("kind", {"x": 1}, root=tmp_path)
    cache.save(_module(0), {})
    other = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.LayerNorm(5))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    state = torch.get_rng_state()
    assert cache.restore(other, cache.load()) is False
    assert all(torch.equal(other.state_dict()[k], v) for k, v in before.items())
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("damage", ["cut weights", "facts of another key", "no rng"])
def test_a_damaged_entry_reads_as_none(tmp_path, damage, caplog):
    import json

    cache = StageCache("kind", {"x": 1}, root=tmp_path)
    cache.save(_module(0), {})
    if damage == "cut weights":
        path = cache.folder / "weights.safetensors"
        path.write_bytes(path.read_bytes()[:50])
    elif damage == "facts of another key":
        facts = json.loads((cache.folder / "stage.json").read_text())
        facts["key"] = "0" * 64
        (cache.folder / "stage.json").write_text(json.dumps(facts))
    else:
        (cache.folder / "rng.pt").unlink()
    assert cache.load() is None
    assert "computing it again" in caplog.text


def test_a_second_writer_waits_for_the_first_and_reads_its_entry(tmp_path):
    first, second = StageCache("kind", {"x": 1}, root=tmp_path), StageCache("kind", {"x": 1}, root=tmp_path)
    inside = threading.Event()
    seen = {}

    def compute():
        with first.lock():
            inside.set()
            time.sleep(0.5)  # the stage being computed
            first.save(_module(0), {"by": "first"})

    thread = threading.Thread(target=compute)
    thread.start()
    inside.wait(5)
    with second.lock():  # blocks until the first has kept its entry
        entry = second.load()
        seen["by"] = entry.facts["by"] if entry else None
    thread.join()
    assert seen == {"by": "first"}


def test_a_real_write_failure_keeps_nothing_and_says_so(tmp_path):
    """A file-size limit makes the writes fail as a full disk does (SafetensorError, not OSError)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import resource, signal, torch
        from xmcbench.train.stage_cache import StageCache
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        cache = StageCache("kind", {{"x": 1}}, root=__import__("pathlib").Path({str(tmp_path)!r}))
        print("kept" if cache.save(torch.nn.Linear(200, 200), {{}}) else "not kept")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "not kept"
    assert "could not keep the kind" in done.stderr
    left = [p.name for p in (tmp_path / "kind").iterdir()]
    assert all(name.endswith(".lock") for name in left), left  # no temp folder, no entry
