"""Run directories written before the package moved into folders (main 4c6621d) still load: their
config.json (the replay flags under "dqn") and checkpoints (a replay learner's buffer, target nets
and counters beside its params, not in `LearnerState.extra`). tests/data/runs_4c6621d holds three
tiny runs written by that code: PPO, DQN saved without its buffer, SAC saved with it, each
stopped after 4 updates of 2 envs x 8 steps."""

import dataclasses
import os
import shutil

import jax
import numpy as np
import pytest
from flax import serialization

from jaxrl_async import train
from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async.trainer.run import restore_training_state
from jaxrl_async.trainer.run_dir import load_config

OLD_RUNS = os.path.join(os.path.dirname(__file__), "data", "runs_4c6621d")


def old_run(name: str, tmp_path) -> str:
    run_dir = str(tmp_path / name)
    shutil.copytree(os.path.join(OLD_RUNS, name), run_dir)
    return run_dir


def restored(run_dir: str):
    cfg = load_config(run_dir)
    c = build(cfg)
    path = ckpt.latest_checkpoint(run_dir)
    saved = ckpt.load(path)
    return cfg, saved, restore_training_state(initial_states(c), saved, path, c.algo.host)


def assert_tree_equal(actual, saved_state_dict):
    """`actual`'s leaves equal the saved state dict's, path by path."""
    actual_leaves = jax.tree_util.tree_leaves_with_path(serialization.to_state_dict(actual))
    saved_leaves = jax.tree_util.tree_leaves_with_path(saved_state_dict)
    assert [path for path, _ in actual_leaves] == [path for path, _ in saved_leaves]
    for (path, leaf), (_, saved_leaf) in zip(actual_leaves, saved_leaves):
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(saved_leaf), err_msg=str(path))


def test_an_old_configs_replay_flags_land_in_the_replay_section(tmp_path):
    cfg = load_config(old_run("dqn", tmp_path))
    assert (cfg.replay.replay_capacity, cfg.replay.learning_starts, cfg.replay.replay_batch_size) == (64, 16, 8)
    assert cfg.dqn == type(cfg.dqn)()  # the DQN-only flags were left at their defaults
    assert load_config(old_run("sac", tmp_path)).replay.checkpoint_replay is True


def test_an_old_ppo_checkpoint_restores_its_params(tmp_path):
    _, saved, (state, fields, note) = restored(old_run("ppo", tmp_path))
    assert_tree_equal(state.learner.params, saved["state"]["learner"]["params"])
    assert state.learner.extra == () and fields == {} and note is None


def test_an_old_dqn_checkpoint_without_its_buffer_restores_the_rest(tmp_path):
    _, saved, (state, fields, note) = restored(old_run("dqn", tmp_path))
    old = saved["state"]["learner"]
    assert_tree_equal(state.learner.params, old["params"])
    assert_tree_equal(state.learner.extra.nets, old["target_network"])
    np.testing.assert_array_equal(state.learner.extra.gradient_steps, old["gradient_steps"])
    assert int(state.learner.extra.buffer.size[0]) == 0  # refills: it was saved without the buffer
    assert fields == {"replay_refilled": True} and "holds no replay buffer" in note


def test_an_old_sac_checkpoint_with_its_buffer_restores_everything(tmp_path):
    _, saved, (state, fields, note) = restored(old_run("sac", tmp_path))
    old = saved["state"]["learner"]
    assert_tree_equal(state.learner.params, old["params"])
    for name in ("critic", "target_critic", "log_temperature"):
        assert_tree_equal(getattr(state.learner.extra.nets, name), old[name])
    assert_tree_equal(state.learner.extra.buffer, old["replay"])
    assert int(state.learner.extra.buffer.size[0]) == 32 and fields == {} and note is None


@pytest.mark.parametrize("name", ["ppo", "dqn", "sac"])
def test_an_old_run_resumes_to_a_larger_budget(name, tmp_path):
    run_dir = old_run(name, tmp_path)
    cfg = dataclasses.replace(load_config(run_dir), total_timesteps=2 * 8 * 6, run_dir=run_dir)
    result = train(cfg, console=False, resume=True)
    assert result.completed and result.summary["num_updates"] == 6
    assert np.isfinite(result.summary["final_eval_return_mean"])
