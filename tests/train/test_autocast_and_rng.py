import io
import random

import numpy as np
import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.train.precision import (
    autocast,
    autocast_dtype,
    check_precision,
    resolve_precision,
    rng_state,
    seed_everything,
    set_rng_state,
)

_REAL_MM = torch.mm


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_bf16_autocasts_on_cuda_and_on_a_cpu_with_bf16_instructions(monkeypatch):
    import xmcbench.train.precision as precision

    assert autocast_dtype("cuda", "bf16") == torch.bfloat16
    assert autocast_dtype("cuda:1", "fp32") is None
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    monkeypatch.setattr(precision, "use_cpu_bf16", lambda: False)
    assert autocast_dtype("cpu", "bf16") is None
    with autocast("cpu", "bf16"):
        assert not torch.is_autocast_enabled("cpu")
        assert (a @ b).dtype == torch.float32
    monkeypatch.setattr(precision, "use_cpu_bf16", lambda: True)
    assert autocast_dtype("cpu", "bf16") == torch.bfloat16
    assert autocast_dtype("cpu", "fp32") is None
    with autocast("cpu", "bf16"):
        assert (a @ b).dtype == torch.bfloat16
    with autocast("cpu", "fp32"):
        assert (a @ b).dtype == torch.float32


def test_the_run_records_the_precision_it_computes_in(monkeypatch, caplog):
    import xmcbench.train.precision as precision

    assert resolve_precision("auto", "cuda:0") == "bf16"
    monkeypatch.setattr(precision, "use_cpu_bf16", lambda: True)
    assert resolve_precision("auto", "cpu") == "fp32"  # CPU results stay comparable unless a recipe asks
    assert resolve_precision("bf16", "cpu") == "bf16"
    assert resolve_precision("fp32", "cuda") == "fp32"
    monkeypatch.setattr(precision, "use_cpu_bf16", lambda: False)
    with caplog.at_level("WARNING"):
        assert resolve_precision("bf16", "cpu") == "fp32"
    assert "running fp32" in caplog.text
    with pytest.raises(XmcbenchError, match="fp16 needs loss scaling"):
        resolve_precision("fp16", "cpu")


@pytest.fixture
def probe(monkeypatch):
    """The bf16 probe with a fresh per-process cache, on a CPU that has bf16 instructions."""
    import xmcbench.train.precision as precision

    monkeypatch.delenv(precision.CPU_BF16_ENV, raising=False)
    monkeypatch.setattr(precision, "cpu_has_bf16_instructions", lambda: True)
    monkeypatch.setattr(precision, "_speedup", None)  # this process has not asked yet
    return precision


def _spy_mm(monkeypatch, precision) -> list:
    outputs = []
    monkeypatch.setattr(precision.torch, "mm", lambda a, b: outputs.append(_REAL_MM(a, b).dtype) or outputs[-1])
    return outputs


@pytest.mark.parametrize(
    ("speedup", "used", "why"),
    [
        (0.6, False, "ran at 0.60x fp32's speed"),  # Intel without AMX: MKL's fp32 beats oneDNN's bf16
        (1.19, False, "ran at 1.19x fp32's speed"),
        (1.6, True, None),  # AMD EPYC with AVX512-BF16
    ],
)
def test_bf16_is_used_on_a_cpu_only_where_it_was_measured_clearly_faster(probe, monkeypatch, speedup, used, why):
    monkeypatch.setattr(probe, "cpu_bf16_speedup", lambda: speedup)
    assert probe.use_cpu_bf16() is used
    assert autocast_dtype("cpu", "bf16") == (torch.bfloat16 if used else None)
    if why:
        assert why in probe.cpu_bf16_why_not()


def test_without_bf16_instructions_nothing_is_timed_and_bf16_is_never_used(probe, monkeypatch):
    monkeypatch.setattr(probe, "cpu_has_bf16_instructions", lambda: False)
    monkeypatch.setattr(probe.torch, "mm", lambda *a: pytest.fail("timed a matmul"))
    assert probe.cpu_bf16_speedup() is None
    monkeypatch.setenv(probe.CPU_BF16_ENV, "on")  # on: only where the CPU has the instructions
    assert probe.use_cpu_bf16() is False
    assert "no bf16 instructions" in probe.cpu_bf16_why_not()


def test_the_environment_overrides_the_probe(probe, monkeypatch):
    monkeypatch.setattr(probe, "cpu_bf16_speedup", lambda: 0.6)
    monkeypatch.setenv(probe.CPU_BF16_ENV, "on")
    assert probe.use_cpu_bf16() is True
    monkeypatch.setattr(probe, "cpu_bf16_speedup", lambda: 1.6)
    monkeypatch.setenv(probe.CPU_BF16_ENV, "off")
    assert probe.use_cpu_bf16() is False and "XMCBENCH_CPU_BF16=off" in probe.cpu_bf16_why_not()
    monkeypatch.setenv(probe.CPU_BF16_ENV, "sometimes")
    with pytest.raises(XmcbenchError, match="on, off or auto"):
        probe.use_cpu_bf16()


def test_the_probe_is_measured_once_per_machine_and_kept(probe, monkeypatch):
    import json

    from xmcbench.paths import cache_dir

    outputs = _spy_mm(monkeypatch, probe)
    first = probe.cpu_bf16_speedup()
    assert first > 0 and outputs.count(torch.float32) == outputs.count(torch.bfloat16) == 7
    path = cache_dir() / "cpu-bf16.json"
    kept = json.loads(path.read_text())
    assert list(kept.values()) == [first] and "torch" in next(iter(kept))
    monkeypatch.setattr(probe, "_speedup", None)  # a new process on the same machine reads it
    monkeypatch.setattr(probe.torch, "mm", lambda *a: pytest.fail("measured again"))
    assert probe.cpu_bf16_speedup() == first
    for damaged in ("{damaged", '{"KEY": Infinity}'.replace("KEY", next(iter(kept)))):
        path.write_text(damaged)
        monkeypatch.setattr(probe, "_speedup", None)
        outputs = _spy_mm(monkeypatch, probe)
        again = probe.cpu_bf16_speedup()
        assert outputs  # measured again, not an error, and written back whole
        assert json.loads(path.read_text()) == {next(iter(kept)): again}


def test_a_read_only_home_still_answers(probe, monkeypatch):
    import json

    from xmcbench.paths import cache_dir

    cache_dir().mkdir(parents=True)
    (cache_dir() / "cpu-bf16.json").write_text(json.dumps({probe._machine_key(): 1.5}))
    monkeypatch.setattr(probe, "file_lock", lambda *a, **k: pytest.fail("took the lock"))
    assert probe.cpu_bf16_speedup() == 1.5
    monkeypatch.setattr(probe, "_speedup", None)
    (cache_dir() / "cpu-bf16.json").unlink()

    def no_lock(*a, **k):
        raise PermissionError("read-only")

    monkeypatch.setattr(probe, "file_lock", no_lock)
    outputs = _spy_mm(monkeypatch, probe)
    assert probe.cpu_bf16_speedup() > 0 and outputs  # measured for this process alone


def test_the_probe_ignores_an_enclosing_autocast_and_leaves_the_seeded_generator(probe, monkeypatch):
    outputs = _spy_mm(monkeypatch, probe)
    torch.manual_seed(3)
    state = torch.get_rng_state()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        probe.cpu_bf16_speedup()
    assert outputs.count(torch.float32) == 7  # the fp32 product stayed fp32
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bf16_autocast_on_cuda():
    a = torch.randn(8, 8, device="cuda")
    with autocast("cuda", "bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with autocast("cuda", "fp32"):
        assert (a @ a).dtype == torch.float32


def test_unknown_precision_is_an_error():
    assert check_precision("bf16") == "bf16"
    with pytest.raises(XmcbenchError, match="fp16 needs loss scaling; use bf16"):
        check_precision("fp16")
    with pytest.raises(XmcbenchError, match="unknown precision 'int8'"):
        with autocast("cpu", "int8"):
            pass


def test_seed_everything_reproduces_all_generators():
    seed_everything(123)
    first = _draws()
    seed_everything(123)
    assert _draws() == first
    seed_everything(124)
    assert _draws() != first


def test_rng_state_round_trips_through_a_weights_only_file():
    seed_everything(7)
    _draws()
    buffer = io.BytesIO()
    torch.save(rng_state(), buffer)
    expected = _draws()
    _draws()  # move every generator on
    buffer.seek(0)
    set_rng_state(torch.load(buffer, weights_only=True))
    assert _draws() == expected
