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
    rng_state,
    seed_everything,
    set_rng_state,
)


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_bf16_means_autocast_on_cuda_only():
    assert autocast_dtype("cuda", "bf16") == torch.bfloat16
    assert autocast_dtype("cuda:1", "fp32") is None
    assert autocast_dtype("cpu", "bf16") is None
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast("cpu", "bf16"):
        assert not torch.is_autocast_enabled("cpu")
        assert (a @ b).dtype == torch.float32


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
