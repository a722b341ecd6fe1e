"""benchmarks/bench_train.py: every method's scaled recipe is a valid recipe, and the step clock
follows the optimiser that trains (a new stage when a new optimiser takes over). Speed is not checked."""

import pytest
import torch

from benchmarks.bench_train import METHODS, StepClock, build_recipe, parse_args
from benchmarks.runner import _stage_results
from xmcbench.run import recipe_from_dict


@pytest.mark.parametrize("paper_batch", [False, True])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_scaled_recipe_is_valid(method, paper_batch):
    argv = ["--methods", method, "--labels", "300", "--train", "600", "--batch", "32"]
    args = parse_args(argv + (["--paper-batch"] if paper_batch else []))
    data, scaled = build_recipe(method, args, "all-MiniLM-L6-v2")
    recipe = recipe_from_dict(data)  # unknown keys and out-of-range values are refused here
    assert recipe.method.name == method.split("_")[0]
    assert recipe.training.batch_size == (scaled["paper_batch"] if paper_batch else 32)
    assert 0 < scaled["scale"] <= 1
    assert recipe.dataset.synthetic.labels == 300
    if method == "maclr":  # ICT needs titles and bodies: a dataset of its own
        assert recipe.dataset.synthetic.paraphrase and recipe.dataset.name == "bench-train-maclr"
        steps = 2 * -(-recipe.dataset.synthetic.train // recipe.training.batch_size)
        assert recipe.method.params()["stage1_steps"] == recipe.method.params()["stage2_steps"] == steps
    else:
        assert recipe.dataset.name == "bench-train"
    if method == "lmtx":
        assert recipe.method.params()["judge"]["backend"] == "fake"


def _step(optimizer):
    optimizer.zero_grad()
    sum(p.sum() for group in optimizer.param_groups for p in group["params"]).backward()
    optimizer.step()


def _optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1)


def test_step_clock_follows_one_optimiser_then_a_new_stage():
    clock = StepClock(cuda=False)
    try:
        together = _optimizer(), _optimizer()  # two optimisers stepping together (UniDEC): one stage
        for _ in range(4):
            for opt in together:
                _step(opt)
        stage_two = _optimizer()  # a new optimiser once the first has stepped: a new stage (MACLR)
        for _ in range(3):
            _step(stage_two)
    finally:
        clock.handle.remove()
    assert [len(stage["times"]) for stage in clock.stages] == [4, 3]
    first, second = clock.summary(8, 0), clock.summary(16, 1)
    assert first["steps"] == 4 and second["steps"] == 3
    assert first["queries_per_s"] == pytest.approx(8 / first["step_s"])
    assert second["queries_per_s"] == pytest.approx(16 / second["step_s"])
    assert first["peak_step_gb"] > 0 and second["resident_at_step_start_gb"] > 0
    assert clock.summary(8, 2) == {"steps": 0}  # a stage that never ran


def test_stage_results_name_a_row_per_stage():
    one = {"step_s": 1.0}
    assert _stage_results("prime", one) == [("train_prime", "prime training step", one)]
    stages = {"stage1": {"step_s": 1.0}, "stage2": {"step_s": 2.0}}
    rows = _stage_results("maclr", {"step_s": 1.0, "stages": stages})
    assert [name for name, _, _ in rows] == ["train_maclr_stage1", "train_maclr_stage2"]
    assert rows[1][2] is stages["stage2"]


def test_unknown_method_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--methods", "dexml_all,nope"])
    assert "unknown methods ['nope']" in capsys.readouterr().err


def test_shape_steps_are_epochs_of_batches():
    from benchmarks.bench_train import Shape

    assert Shape(0.5, 10, 100, 32, 2).steps == 8  # 2 x ceil(100 / 32)
