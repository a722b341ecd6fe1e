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


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_bf16_autocasts_on_cuda_and_on_a_cpu_with_bf16_instructions(monkeypatch):
    import xmcbench.train.precision as precision

    assert autocast_dtype("cuda", "bf16") == torch.bfloat16
    assert autocast_dtype("cuda:1", "fp32") is None
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert autocast_dtype("cpu", "bf16") is None
    with autocast("cpu", "bf16"):
        assert not torch.is_autocast_enabled("cpu")
        assert (a @ b).dtype == torch.float32
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert autocast_dtype("cpu", "bf16") == torch.bfloat16
    assert autocast_dtype("cpu", "fp32") is None
    with autocast("cpu", "bf16"):
        assert (a @ b).dtype == torch.bfloat16
    with autocast("cpu", "fp32"):
        assert (a @ b).dtype == torch.float32


def test_the_run_records_the_precision_it_computes_in(monkeypatch, caplog):
    import xmcbench.train.precision as precision

    assert resolve_precision("auto", "cuda:0") == "bf16"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert resolve_precision("auto", "cpu") == "fp32"  # CPU results stay comparable unless a recipe asks
    assert resolve_precision("bf16", "cpu") == "bf16"
    assert resolve_precision("fp32", "cuda") == "fp32"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level("WARNING"):
        assert resolve_precision("bf16", "cpu") == "fp32"
    assert "no bf16 instructions" in caplog.text
    with pytest.raises(XmcbenchError, match="fp16 needs loss scaling"):
        resolve_precision("fp16", "cpu")


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
