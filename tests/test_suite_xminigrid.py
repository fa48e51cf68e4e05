"""The XLand-MiniGrid adapter (`xminigrid:ID`) against xminigrid's own step, and training through it.

MiniGrid-Empty-5x5 by hand: the agent starts at (1, 1) facing right, the goal is at (3, 3), the
reset is deterministic, and reaching the goal pays 1 - 0.9 * steps / max_steps (xminigrid's
time limit, `max_steps`). xminigrid's
actions: 0 forward, 1 turn right, 2 turn left. Its step never resets, so its own step and reset
are the reference.
"""

from __future__ import annotations

import bz2
import pickle
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xminigrid
from xminigrid.core.constants import TILES_REGISTRY, Colors, Tiles
from xminigrid.core.goals import AgentHoldGoal, AgentNearGoal
from xminigrid.core.rules import EmptyRule

from gridworld_checks import assert_suite_runs, learn_preset, run_actions, suite_runs
from jaxrl_async.envs import make_env
from jaxrl_async.envs.wrappers import max_truncations
from jaxrl_async.envs.spaces import observation_shapes
from jaxrl_async.envs.suites import suite_env_ids

ENV = "xminigrid:MiniGrid-Empty-5x5"
TO_GOAL = [0, 0, 1, 0, 0]  # right, right, turn to face down, down, down: onto the goal


def xminigrid_reference(actions, max_steps):
    """xminigrid's own step, reset (deterministically) after each LAST step: per action, the
    observation, reward, step type and discount, and where it ended an episode the reset's."""
    env, params = xminigrid.make("MiniGrid-Empty-5x5", max_steps=max_steps)
    step = jax.jit(env.step)
    timestep = env.reset(params, jax.random.PRNGKey(0))
    out = []
    for action in actions:
        timestep = step(params, timestep, jnp.asarray(action))
        row = [np.asarray(timestep.observation), float(timestep.reward), int(timestep.step_type),
               float(timestep.discount), None]
        if int(timestep.step_type) == 2:
            timestep = env.reset(params, jax.random.PRNGKey(1))
            row[4] = np.asarray(timestep.observation)
        out.append(row)
    return out


def test_steps_match_xminigrid_termination_then_truncation():
    # xminigrid's time limit is 5 steps. Episode 1 reaches the goal on its 5th step, at the limit:
    # xminigrid says termination (discount 0), so do we; paid 1 - 0.9 * 5 / 5. Episode 2 turns on
    # the spot until the limit (truncated, discount 1).
    actions = TO_GOAL + [1] * 5
    obs0, ours = run_actions(ENV, actions, jax.random.PRNGKey(1), max_steps=5)
    reference = xminigrid_reference(actions, max_steps=5)
    paid = 1 - 0.9 * 5 / 5
    np.testing.assert_allclose(ours.reward, [0, 0, 0, 0, paid] + [0] * 5, rtol=1e-6)
    np.testing.assert_array_equal(ours.terminated, np.arange(10) == 4)
    np.testing.assert_array_equal(ours.truncated, np.arange(10) == 9)
    np.testing.assert_allclose(ours.episode_return, [0, 0, 0, 0, paid] + [0] * 5, rtol=1e-6)
    np.testing.assert_array_equal([r[1] for r in reference], ours.reward)
    # xminigrid's own signal: LAST (2) with discount 0 at the goal, LAST with discount 1 at the limit
    assert [(r[2], r[3]) for r in reference if r[2] == 2] == [(2, 0.0), (2, 1.0)]
    for t, (obs, _, step_type, _, next_first) in enumerate(reference):
        # the final observation is xminigrid's last one; the step's observation the next episode's first
        np.testing.assert_array_equal(ours.final_obs[t], obs)
        np.testing.assert_array_equal(ours.obs[t], obs if step_type != 2 else next_first)
    np.testing.assert_array_equal(ours.obs[4], obs0)
    # the step count restarts with each episode
    assert [int(s.env_state.inner.state.step_num) for s in ours.states] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0]


def test_spaces_and_ids():
    env, params = make_env(ENV)
    assert env.action_space(params).n == 6
    assert observation_shapes(env.observation_space(params)) == (7, 7, 2)
    env, params = make_env(ENV, view_size=5)
    assert observation_shapes(env.observation_space(params)) == (5, 5, 2)
    # xminigrid's step count restarts with each episode (above): 16 steps hold 4 truncations at 5 steps
    assert max_truncations(*make_env(ENV, max_steps=5), 16) == 4
    ids = suite_env_ids("xminigrid")
    assert len(ids) == len(xminigrid.registered_environments()) and "xminigrid:MiniGrid-DoorKey-8x8" in ids
    with pytest.raises(ValueError, match=r"env_kwargs \['colour'\] are not xminigrid params"):
        make_env(ENV, colour=3)
    with pytest.raises(ValueError, match="benchmark and ruleset are for the XLand-MiniGrid-\\* ids"):
        make_env(ENV, ruleset=0)


def _tile(tile, colour):
    return np.asarray(TILES_REGISTRY[tile, colour])


@pytest.fixture(scope="module")
def benchmark_file(tmp_path_factory):
    """A two-ruleset benchmark file in xminigrid's format: (hold the red ball | be near the blue
    square), each with its object on the floor."""
    ball, square = _tile(Tiles.BALL, Colors.RED), _tile(Tiles.SQUARE, Colors.BLUE)
    data = {"goals": np.stack([np.asarray(AgentHoldGoal(tile=ball).encode()),
                               np.asarray(AgentNearGoal(tile=square).encode())]),
            "rules": np.stack([np.asarray(EmptyRule().encode())[None]] * 2),
            "init_tiles": np.stack([ball[None], square[None]]),
            "num_rules": np.asarray([0, 0])}
    path = tmp_path_factory.mktemp("xland") / "two_rulesets"
    with bz2.open(path, "wb") as f:
        pickle.dump(data, f)
    return str(path), data


def test_xland_ids_take_a_ruleset(benchmark_file):
    path, data = benchmark_file
    env, params = make_env("xminigrid:XLand-MiniGrid-R1-9x9", benchmark=path, ruleset=1)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    inner = state.env_state.inner.state
    np.testing.assert_array_equal(inner.goal_encoding, data["goals"][1])
    # the ruleset's one object lies on the floor
    grid = np.asarray(inner.grid).reshape(-1, 2)
    assert (grid == data["init_tiles"][1][0]).all(axis=-1).sum() == 1
    assert observation_shapes(env.observation_space(params)) == (5, 5, 2)  # XLand's view
    with pytest.raises(ValueError, match="needs a task: --env-kwargs benchmark=NAME ruleset=INDEX"):
        make_env("xminigrid:XLand-MiniGrid-R1-9x9")
    with pytest.raises(ValueError, match="ruleset=2 must be an index into benchmark .*: 0 to 1"):
        make_env("xminigrid:XLand-MiniGrid-R1-9x9", benchmark=path, ruleset=2)
    with pytest.raises(ValueError, match="benchmark='nowhere' is neither a file nor one of xminigrid's"):
        make_env("xminigrid:XLand-MiniGrid-R1-9x9", benchmark="nowhere", ruleset=0)


def test_a_named_benchmark_loads_from_xminigrids_data_directory(benchmark_file, monkeypatch, tmp_path):
    import xminigrid.benchmarks as xminigrid_benchmarks

    path, data = benchmark_file  # as if fetched once into the data directory, under trivial-21k's file name
    shutil.copy(path, tmp_path / xminigrid_benchmarks.NAME2HFFILENAME["trivial-21k"])
    monkeypatch.setattr(xminigrid_benchmarks, "DATA_PATH", str(tmp_path))
    env, params = make_env("xminigrid:XLand-MiniGrid-R1-9x9", benchmark="trivial-21k", ruleset=1)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    np.testing.assert_array_equal(state.env_state.inner.state.goal_encoding, data["goals"][1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return suite_runs(ENV, tmp_path_factory.mktemp("xminigrid"))


def test_training_fused_async_and_resume(runs):
    assert_suite_runs(runs)


@pytest.mark.slow
def test_the_empty_preset_walks_straight_to_the_goal(tmp_path):
    # the shortest way on 8x8 is 11 steps, paid 1 - 0.9 * 11 / 256 = 0.961; 0.93 is within 11 steps of it
    summary, lengths = learn_preset("xminigrid:MiniGrid-Empty-8x8", tmp_path)
    assert min(summary["final_eval_return"]) >= 0.93, summary["final_eval_return"]
    assert (lengths <= 22).all(), lengths
