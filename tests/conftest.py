"""Fixtures shared by the whole test suite.

- every test runs with ``XMCBENCH_HOME`` in its own temp folder and ``HF_HUB_OFFLINE=1``, so
  nothing is written outside temp folders and nothing tries the network;
- ``synth_raw_dir``: a small synthetic dataset in the raw LF format, generated once per session
  (treat it as read-only; copy it before changing anything); ``synth_params`` are its parameters;
- ``tiny_encoder_dir``: a 2-layer BERT with MiniLM's tokenizer (methods and Hub tests train and push it);
- ``synth_dataset``: that dataset registered under the test's home as the local dataset
  ``synth-test``, its raw files in place, so ``load_dataset("synth-test")`` prepares and loads it.
"""

from __future__ import annotations

import shutil

import pytest

SYNTH_PARAMS = {"n_labels": 200, "n_train": 1000, "n_test": 250, "seed": 0}


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "xmcbench-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # CPU precision decided the same on every machine (no timing probe); tests of the probe unset it
    monkeypatch.setenv("XMCBENCH_CPU_BF16", "off")


@pytest.fixture
def synth_params() -> dict:
    """The ``synthesize`` parameters of ``synth_raw_dir`` (a copy: change it freely)."""
    return dict(SYNTH_PARAMS)


@pytest.fixture(scope="session")
def synth_raw_dir(tmp_path_factory):
    """Raw files (trn/tst/lbl.json.gz, filter files) of a 200-label synthetic dataset (read-only)."""
    from xmcbench.data.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("synth-raw"), **SYNTH_PARAMS)


@pytest.fixture
def synth_dataset(synth_raw_dir):
    """The ``synth_raw_dir`` dataset registered as local dataset 'synth-test'; returns its spec."""
    from xmcbench import paths
    from xmcbench.data.catalog import save_local_spec
    from xmcbench.data.synth import make_synthetic_spec

    spec = make_synthetic_spec("synth-test", **SYNTH_PARAMS)
    save_local_spec(spec)
    raw = paths.dataset_raw_dir(spec.raw_group)
    raw.mkdir(parents=True, exist_ok=True)
    for name in spec.files:
        shutil.copyfile(synth_raw_dir / name, raw / name)
    return spec


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory):
    """A tiny real BERT (random weights, MiniLM's tokenizer) saved as a model folder; returns its path."""
    from xmcbench.encoders.tiny_bert import save_tiny_bert

    return str(save_tiny_bert(tmp_path_factory.mktemp("tiny-bert")))
