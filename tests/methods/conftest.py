"""Fixtures for method tests: recipes on the tiny real BERT of ``tests/conftest.py`` (``tiny_encoder_dir``)
so that a dual-encoder method trains for real in seconds on CPU."""

import pytest


@pytest.fixture
def tiny_recipe(tmp_path, tiny_encoder_dir):
    """Write a recipe on a small synthetic dataset with the tiny encoder; returns a loader."""
    from xmcbench.run import load_recipe

    def make(
        method_yaml: str,
        *,
        epochs: int = 2,
        extra: str = "",
        labels: int = 60,
        train: int = 300,
        test: int = 60,
        batch_size: int = 32,
        precision: str = "auto",
    ):
        path = tmp_path / f"recipe-{len(list(tmp_path.glob('recipe-*.yaml')))}.yaml"
        path.write_text(
            f"name: tiny\n"
            f"dataset: {{name: synth-tiny, synthetic: {{labels: {labels}, train: {train}, test: {test}, seed: 1}}}}\n"
            f"method: {method_yaml}\n"
            f"encoder: {{name: '{tiny_encoder_dir}', max_length: 16}}\n"
            f"training: {{epochs: {epochs}, batch_size: {batch_size}, lr: 0.001, warmup_ratio: 0.0, "
            f"precision: {precision}}}\n"
            f"evaluation: {{k: [1, 5], top_k: 10, bootstrap: 100}}\n"
            f"hardware: {{devices: cpu}}\n" + extra
        )
        return load_recipe(path)

    return make


@pytest.fixture
def interrupt_then_resume(monkeypatch):
    """Run ``recipe``, raise KeyboardInterrupt at the ``at``-th call of ``method_cls.<step>``, check the
    run is recorded as interrupted after one checkpointed epoch, resume it, and return
    ``(result, run_dir, steps_run_after_resume)``."""
    import json

    from xmcbench.run import load_record, run_recipe

    def go(method_cls, step: str, recipe, tmp_path, at: int = 15):
        real = getattr(method_cls, step)
        calls = {"n": 0, "armed": True}

        def flaky(self, *args, **kwargs):
            calls["n"] += 1
            if calls["armed"] and calls["n"] == at:
                raise KeyboardInterrupt
            return real(self, *args, **kwargs)

        monkeypatch.setattr(method_cls, step, flaky)
        kwargs = dict(runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
        with pytest.raises(KeyboardInterrupt):
            run_recipe(recipe, **kwargs)
        (run_dir,) = (tmp_path / "runs").iterdir()
        assert load_record(run_dir)["status"] == "interrupted"
        meta = json.loads(next((run_dir / "checkpoints" / "train").glob("epoch-*/meta.json")).read_text())
        assert meta["epoch"] == 1
        calls.update(n=0, armed=False)
        result = run_recipe(None, resume=run_dir.name, **kwargs)
        assert result.record["status"] == "finished" and result.run_dir == run_dir
        return result, run_dir, calls["n"]

    return go
