"""``--resume ID`` finds a run made with another --runs-dir through the database, which knows its folder."""

import pytest

from xmcbench.errors import XmcbenchError
from xmcbench.run import run_recipe
from xmcbench.run.check import load_recipe
from xmcbench.run.runner import find_run

RECIPE = """
name: elsewhere
dataset: {name: synth-elsewhere, synthetic: {labels: 40, train: 120, test: 30, seed: 2}}
supervision: {mode: zero_shot}
method: {name: tfidf}
evaluation: {k: [1], top_k: 5, bootstrap: 0, groups: false}
hardware: {devices: cpu}
"""


def test_a_run_in_another_runs_folder_is_found_through_the_database(tmp_path):
    (tmp_path / "r.yaml").write_text(RECIPE)
    db, made_in, default = tmp_path / "r.duckdb", tmp_path / "rüns dir", tmp_path / "runs"
    result = run_recipe(load_recipe(tmp_path / "r.yaml"), db=db, runs_dir=made_in, progress=False)
    run_id = result.run_dir.name
    assert find_run(default, run_id, db) == result.run_dir
    assert find_run(default, run_id[:-3], db) == result.run_dir  # a unique prefix, as under the folder
    with pytest.raises(XmcbenchError, match="already finished; nothing to resume"):
        run_recipe(None, resume=run_id, runs_dir=default, db=db, progress=False)
    with pytest.raises(XmcbenchError, match="give --runs-dir for a run made in another folder"):
        find_run(default, run_id, tmp_path / "no.duckdb")
