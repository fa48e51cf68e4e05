"""Experiment scripts: a tiny-budget smoke run of each, and the curve statistics."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pathlib
import sys

import numpy as np
import pytest

# `experiments` is a top-level folder, not part of the installed package: a bare
# `pytest` (unlike `python -m pytest`) does not put the repository root on sys.path.
ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from experiments.common import COMPARISON_FILE, CURVE_FILE, bootstrap_ci, curve_from_metrics  # noqa: E402

# script -> rollouts in the smoke run (one host sync each: one point of the curve)
ROLLOUTS = {"ppo_cartpole": 2, "ppo_acrobot": 2, "ppo_pendulum": 2, "ppo_breakout_minatar": 2, "dqn_cartpole": 2,
            "sac_pendulum": 2, "td3_pendulum": 2}


@pytest.mark.parametrize("script", sorted(ROLLOUTS))
def test_script_smoke(script, tmp_path, capsys):
    module = importlib.import_module(f"experiments.{script}")
    rollouts, batch = ROLLOUTS[script], module.CONFIG.batch_size
    run_dir = tmp_path / script
    result = module.main(["--total-timesteps", str(rollouts * batch), "--num-seeds", "2",
                          "--run-dir", str(run_dir)])

    assert result.run_dir == str(run_dir)
    assert (run_dir / CURVE_FILE).stat().st_size > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == rollouts * batch and summary["num_seeds"] == 2
    env_steps, returns = curve_from_metrics(os.path.join(run_dir, "metrics.jsonl"))
    assert env_steps.tolist() == [batch * (i + 1) for i in range(rollouts)]
    assert returns.shape == (rollouts, 2)
    # the printed table row: env, seeds, env steps
    assert f"| {module.CONFIG.env} | 2 | {rollouts * batch:,} |" in capsys.readouterr().out


@pytest.mark.parametrize("script, env, algo", [
    ("ppo_cartpole", "CartPole-v1", None), ("ppo_acrobot", "Acrobot-v1", None), ("ppo_pendulum", "Pendulum-v1", "ppo"),
    ("sac_pendulum", "Pendulum-v1", None), ("td3_pendulum", "Pendulum-v1", "td3"), ("ppo_breakout_minatar", "Breakout-MinAtar", None),
    ("recurrent_pomdp", "StatelessCartPole-v1", None)])
def test_scripts_run_the_presets(script, env, algo):
    from jaxrl_async.trainer.presets import config_for

    config = importlib.import_module(f"experiments.{script}").CONFIG
    # the presets table in experiments/README.md is these scripts' output
    assert dataclasses.replace(config, eval_stochastic=False) == config_for(env, algo=algo)


def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_learners_smoke(tmp_path, capsys):
    from experiments import learners

    batch = learners.learner_config("CartPole-v1", "ppo", 10_000, 1).batch_size
    results = learners.main(["--envs", "CartPole-v1", "--algos", "a2c", "impala", "--num-seeds", "2",
                             "--total-timesteps", str(2 * batch), "--run-dir", str(tmp_path)])
    assert sorted(results) == [("CartPole-v1", "a2c"), ("CartPole-v1", "impala")]
    assert _summary(tmp_path / "CartPole-v1-impala")["algo"] == "impala"
    assert (tmp_path / "CartPole-v1.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert f"| CartPole-v1 | a2c | {2 * batch:,} |" in out and f"| CartPole-v1 | impala | {2 * batch:,} |" in out


def test_dqn_cartpole_compare_per_smoke(tmp_path, capsys):
    """`--compare-per`: uniform and prioritised replay alternated, one round here; the runs'
    configs differ only in the priority exponent, and the ratio line is printed. (Not `slow`
    any more: compiled fast, the uniform run's programs are test_script_smoke[dqn_cartpole]'s.)"""
    from experiments import dqn_cartpole

    batch = dqn_cartpole.CONFIG.batch_size
    results = dqn_cartpole.main(["--compare-per", "--rounds", "1", "--total-timesteps", str(2 * batch),
                                 "--num-seeds", "2", "--run-dir", str(tmp_path)])
    assert list(results) == ["uniform-1", "per-1"]
    from jaxrl_async.trainer.run_dir import load_config

    uniform, per = (load_config(str(tmp_path / label)) for label in results)
    assert (uniform.replay.priority_exponent, per.replay.priority_exponent) == (0.0, 0.6)
    assert dataclasses.replace(per, replay=dataclasses.replace(per.replay, priority_exponent=0.0),
                               run_dir=uniform.run_dir) == uniform
    assert (tmp_path / COMPARISON_FILE).stat().st_size > 0
    out = capsys.readouterr().out
    assert "| per | 1 | " in out and "steps/s PER / uniform, per round: " in out


def test_fused_vs_async_smoke(tmp_path, capsys):
    from experiments import fused_vs_async

    batch = fused_vs_async.CONFIG.batch_size
    fused_vs_async.main(["--total-timesteps", str(2 * batch), "--num-seeds", "2", "--run-dir", str(tmp_path)])
    assert (tmp_path / COMPARISON_FILE).stat().st_size > 0
    out = capsys.readouterr().out
    for label, mode in fused_vs_async.MODES.items():
        assert _summary(tmp_path / label)["mode"] == mode["mode"]
        wall_s, returns = curve_from_metrics(os.path.join(tmp_path, label, "metrics.jsonl"), x="wall_s")
        assert wall_s.dtype == np.float64 and np.all(np.diff(wall_s) > 0) and returns.shape == (2, 2)
        assert f"| {label} | " in out


def test_offpolicy_async_smoke(tmp_path, capsys):
    from experiments import offpolicy_async

    results = offpolicy_async.main(["--total-timesteps", "512", "--repeats", "1", "--run-dir", str(tmp_path)])
    assert set(results) == {"fused", "async lag 1", "host async lag 1"}
    assert results["async lag 1"][0]["policy_lag_mean"] == 0.5  # 2 fragments: versions 0 and 0
    assert (tmp_path / "offpolicy_async.json").stat().st_size > 0
    out = capsys.readouterr().out
    assert "host async lag 1" in out and "grad steps/s" in out


def test_recurrent_pomdp_smoke(tmp_path, capsys):
    from experiments import recurrent_pomdp

    batch = recurrent_pomdp.CONFIG.batch_size
    results = recurrent_pomdp.main(["--total-timesteps", str(batch), "--num-seeds", "2",
                                    "--run-dir", str(tmp_path)])
    assert results["gru"].summary["env_id"] == "StatelessCartPole-v1"
    assert json.loads((tmp_path / "gru" / "config.json").read_text())["network"]["core"] == "gru"
    assert json.loads((tmp_path / "mlp" / "config.json").read_text())["network"]["core"] == "none"
    assert (tmp_path / COMPARISON_FILE).stat().st_size > 0
    assert "| StatelessCartPole-v1 | gru |" in capsys.readouterr().out


def test_breakout_gap_smoke(tmp_path, capsys):
    from experiments import breakout_gap

    batch = breakout_gap.PUREJAXRL.batch_size
    results = breakout_gap.main(["--variants", "pjrl", "--total-timesteps", str(batch), "--num-seeds", "2",
                                 "--run-dir", str(tmp_path)])
    summary = results["pjrl"].summary
    # both evaluations, per seed: the greedy one and the sampling policy's beside it
    assert len(summary["final_eval_return"]) == 2 and len(summary["final_eval_return_stochastic"]) == 2
    config = json.loads((tmp_path / "pjrl" / "config.json").read_text())
    assert config["learner"]["learning_rate"] == 5e-3 and config["network"]["torso"] == "mlp"
    assert f"| pjrl | {batch:,} | " in capsys.readouterr().out


def test_breakout_gap_preset_variants_change_the_preset():
    from experiments import breakout_gap
    from jaxrl_async.trainer.presets import config_for

    preset, base = config_for("Breakout-MinAtar"), breakout_gap.VARIANTS["pjrl-8epochs-256envs"]
    # the variant named for the preset is it (the study evaluates both ways and sets its own budget)
    assert dataclasses.replace(base, total_timesteps=preset.total_timesteps, eval_stochastic=False,
                               preset=preset.preset) == preset
    assert breakout_gap.VARIANTS["preset-ent0.005"] == dataclasses.replace(
        base, learner=dataclasses.replace(base.learner, ent_coef=0.005))


def test_breakout_gap_refuses_an_unknown_variant(tmp_path):
    from experiments import breakout_gap

    with pytest.raises(SystemExit, match="unknown variants \\['nope'\\]; choose from pjrl"):
        breakout_gap.main(["--variants", "nope", "--run-dir", str(tmp_path)])


def test_presets_smoke(tmp_path, capsys):
    from experiments import presets

    results = presets.main(["--envs", "Probe-ConstantReward", "Probe-ActionReward", "--num-seeds", "2",
                            "--total-timesteps", "128", "--run-dir", str(tmp_path)])
    assert sorted(results) == ["Probe-ActionReward", "Probe-ConstantReward"]
    assert json.loads((tmp_path / "Probe-ActionReward" / "config.json").read_text())["preset"] == "Probe-ActionReward"
    assert (tmp_path / "Probe-ConstantReward" / CURVE_FILE).stat().st_size > 0
    # one step, reward +1 whatever the policy: both evaluations, and the preset's own figure beside them
    assert "| Probe-ConstantReward | 128 | 1.0 ± 0.0 | 1.0 | 1 |" in capsys.readouterr().out


def test_lr_sweep_smoke(tmp_path, capsys):
    from experiments import lr_sweep

    batch = lr_sweep.CONFIG.batch_size
    result = lr_sweep.main(["--total-timesteps", str(batch), "--seeds-per-lr", "2",
                            "--learning-rates", "1e-3", "3e-3", "--run-dir", str(tmp_path)])
    assert result.summary["num_seeds"] == 4
    assert (tmp_path / COMPARISON_FILE).stat().st_size > 0
    out = capsys.readouterr().out
    assert "| 0.001 | " in out and "| 0.003 | " in out


def test_episode_curve_bins_episodes_by_hand():
    from experiments.ppo_mujoco import episode_curve

    grid = np.array([10.0, 20.0, 30.0])
    # (0, 10]: returns 1 and 3; (10, 20]: 4; (20, 30]: none; step 31 is past the grid
    curve = episode_curve([(5, 1.0), (10, 3.0), (15, 4.0), (31, 9.0)], grid)
    np.testing.assert_array_equal(curve, [2.0, 4.0, np.nan])


def test_ppo_mujoco_smoke(tmp_path, capsys):
    """One rollout of ours on HalfCheetah-v5, beside SB3 files in the form benchmarks/peers_sb3.py
    writes them (SB3 itself is not installed here)."""
    from experiments import ppo_mujoco

    sb3_dir = tmp_path / "sb3"
    sb3_dir.mkdir()
    (sb3_dir / "sb3-seed0.log").write_text("SUMMARY " + json.dumps({"sps": 1000, "eval20_det_mean": -5.0}) + "\n")
    (sb3_dir / "sb3-seed0.jsonl").write_text("".join(json.dumps({"env_steps": 1000 * (i + 1), "episode_return": r})
                                                     + "\n" for i, r in enumerate([-300.0, -250.0])))
    batch = ppo_mujoco.CONFIG.batch_size
    results = ppo_mujoco.main(["--seeds", "0", "--total-timesteps", str(batch), "--sb3-dir", str(sb3_dir),
                               "--run-dir", str(tmp_path / "run")])
    ours = results["ours"][0]
    assert ours["env_steps"] == batch and ours["env_id"] == "gymnasium:HalfCheetah-v5" and ours["mode"] == "async"
    assert ours["final_eval_episodes"] == 20
    assert (tmp_path / "run" / COMPARISON_FILE).stat().st_size > 0
    out = capsys.readouterr().out
    # SB3's row: its steps/s, its evaluation, and its training return in the curve's last window
    # (2048 steps in 25 windows: the last, (1966, 2048], holds the episode that ended at 2000)
    assert "| SB3 | 1,000 ± 0 | -5.0 ± 0.0 | -250.0 ± 0.0 |" in out
    # --ours-dir: the same table from the runs on disk, nothing trained again
    ours_row = next(line for line in out.splitlines() if line.startswith("| ours |"))
    again = ppo_mujoco.main(["--seeds", "0", "--total-timesteps", str(batch), "--sb3-dir", str(sb3_dir),
                             "--ours-dir", str(tmp_path / "run"), "--run-dir", str(tmp_path / "replot")])
    assert again["ours"][0] == ours and ours_row in capsys.readouterr().out
    assert not (tmp_path / "replot" / "ours-seed0").exists()


def test_curve_from_metrics_reads_seeds_and_missing_episodes(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [{"env_steps": 100, "episode_return_mean": 2.0, "episode_return_per_seed": [None, 2.0]},
             {"env_steps": 200, "episode_return_mean": 4.0, "episode_return_per_seed": [3.0, 5.0]}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env_steps, returns = curve_from_metrics(str(path))
    np.testing.assert_array_equal(env_steps, [100, 200])
    np.testing.assert_array_equal(returns, [[np.nan, 2.0], [3.0, 5.0]])


def test_curve_from_metrics_single_seed_uses_the_mean(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"env_steps": 64, "episode_return_mean": 7.5}) + "\n"
                    + json.dumps({"env_steps": 128, "episode_return_mean": None}) + "\n")
    env_steps, returns = curve_from_metrics(str(path))
    np.testing.assert_array_equal(env_steps, [64, 128])
    np.testing.assert_array_equal(returns, [[7.5], [np.nan]])


def test_bootstrap_ci_of_constant_data_has_zero_width():
    low, high = bootstrap_ci(np.full((3, 5), 4.0))
    np.testing.assert_array_equal(low, [4.0] * 3)
    np.testing.assert_array_equal(high, [4.0] * 3)


def test_bootstrap_ci_contains_the_mean_and_is_deterministic():
    values = np.random.default_rng(1).normal(size=(4, 6)) * [[1.0], [2.0], [5.0], [0.1]]
    low, high = bootstrap_ci(values)
    mean = values.mean(axis=-1)
    assert np.all(low < mean) and np.all(mean < high)
    again = bootstrap_ci(values)
    np.testing.assert_array_equal(low, again[0])
    np.testing.assert_array_equal(high, again[1])


def test_bootstrap_ci_width_matches_the_normal_approximation():
    # many seeds: the bootstrap interval approaches mean +- 1.96 * sd / sqrt(S)
    num_seeds = 400
    values = np.random.default_rng(2).normal(size=(1, num_seeds))
    low, high = bootstrap_ci(values)
    expected = 2 * 1.96 * values.std() / np.sqrt(num_seeds)
    assert (high - low)[0] == pytest.approx(expected, rel=0.1)


def test_bootstrap_ci_ignores_nan_seeds():
    values = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, 2.0]])
    low, high = bootstrap_ci(values)
    assert 1.0 <= low[0] <= 2.0 <= high[0] <= 3.0
    np.testing.assert_array_equal([low[1], high[1]], [2.0, 2.0])


def test_bootstrap_ci_rejects_a_flat_array():
    with pytest.raises(ValueError, match=r"\[N, S\]"):
        bootstrap_ci(np.zeros(5))
