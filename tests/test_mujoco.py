"""A MuJoCo env through the `mujoco` extra (`pip install -e '.[mujoco]'`, part of `dev`): float64
Box observations unbounded on both sides, a Box action, a 1,000-step time limit, `--normalize-obs`."""

from __future__ import annotations

import json
import os

from jaxrl_async.cli.main import main


def test_halfcheetah_trains_and_evaluates_as_a_host_env(tmp_path):
    run_dir = str(tmp_path / "cheetah")
    assert main(["train", "--env", "gymnasium:HalfCheetah-v5", "--num-envs", "2", "--num-steps", "8",
                 "--total-timesteps", "32", "--eval-episodes", "1", "--hidden-sizes", "16", "--normalize-obs",
                 "--run-dir", run_dir]) == 0
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["env_steps"] == 32 and summary["final_eval_episodes"] == 1
    # HalfCheetah never terminates: the evaluation episode is cut by the time limit, a finite return
    metrics = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    assert metrics[-1]["eval_length_mean"] == 1000
