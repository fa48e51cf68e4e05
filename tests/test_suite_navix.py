"""The navix adapter (`navix:ID`) against navix's own step, and training through it.

Navix-Empty-5x5-v0 by hand: the player starts at (1, 1) facing east, the goal is at (3, 3), and
the reset is deterministic, so navix's own auto-resetting `step` is a reference for whole
sequences. Navix's actions (MiniGrid's): 0 turn left, 1 turn right, 2 forward.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import navix
import numpy as np
import pytest

from gridworld_checks import assert_suite_runs, learn_preset, run_actions, suite_runs
from jaxrl_async.envs import make_env
from jaxrl_async.envs.wrappers import max_truncations
from jaxrl_async.envs.spaces import observation_shapes
from jaxrl_async.envs.suites import suite_env_ids

ENV = "navix:Navix-Empty-5x5-v0"
TO_GOAL = [2, 2, 1, 2, 2]  # east, east, turn to face south, south, south: onto the goal
PLAYER = 10  # navix's object id of the player in the symbolic observation's first channel


def navix_reference(actions, max_steps):
    """navix's own `step` (it resets one call after an episode's end, the action then unused):
    per action, (observation, reward, step type) and, where it ended an episode, the next
    episode's first observation."""
    env = navix.make("Navix-Empty-5x5-v0", max_steps=max_steps)
    step = jax.jit(env.step)
    timestep = env.reset(jax.random.PRNGKey(0))
    out = []
    for action in actions:
        timestep = step(timestep, jnp.asarray(action))
        row = [np.asarray(timestep.observation), float(timestep.reward), int(timestep.step_type), None]
        if int(timestep.step_type) > 0:
            timestep = step(timestep, jnp.asarray(0))  # navix's reset
            row[3] = np.asarray(timestep.observation)
        out.append(row)
    return out


def test_steps_match_navix_termination_then_truncation():
    # navix's time limit is 5 steps. Episode 1 reaches the goal on its 5th step, at the limit:
    # navix says termination, so do we. Episode 2 turns on the spot until the limit (truncated).
    actions = TO_GOAL + [1] * 5
    obs0, ours = run_actions(ENV, actions, jax.random.PRNGKey(1), max_steps=5)
    reference = navix_reference(actions, max_steps=5)
    np.testing.assert_array_equal(ours.reward, [0, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(ours.terminated, np.arange(10) == 4)
    np.testing.assert_array_equal(ours.truncated, np.arange(10) == 9)
    np.testing.assert_array_equal(ours.episode_return, [0, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal([r[1] for r in reference], ours.reward)
    np.testing.assert_array_equal([r[2] for r in reference], [0, 0, 0, 0, 2, 0, 0, 0, 0, 1])
    for t, (obs, _, step_type, next_first) in enumerate(reference):
        # the final observation is navix's last one; the step's observation the next episode's first
        np.testing.assert_array_equal(ours.final_obs[t], obs)
        np.testing.assert_array_equal(ours.obs[t], obs if step_type == 0 else next_first)
    assert ours.final_obs[4][3, 3, 0] == PLAYER  # on the goal
    np.testing.assert_array_equal(ours.obs[4], obs0)  # reset to the start
    assert obs0[1, 1, 0] == PLAYER
    # navix's step count restarts with each episode
    assert [int(s.env_state.inner.t) for s in ours.states] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0]


def test_our_time_limit_truncates_before_navix_does():
    _, ours = run_actions(ENV, [1] * 5, jax.random.PRNGKey(0), max_steps_in_episode=2)
    np.testing.assert_array_equal(ours.truncated, [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(ours.terminated, [0] * 5)


def test_spaces_ids_and_bad_kwargs():
    env, params = make_env(ENV)
    assert env.action_space(params).n == 7
    assert observation_shapes(env.observation_space(params)) == (5, 5, 3)
    env, params = make_env(ENV, observation="symbolic_first_person")
    assert observation_shapes(env.observation_space(params)) == (7, 7, 3)
    # navix's step count restarts with each episode (above): 16 steps hold 4 truncations at its 5-step
    # limit, 8 at ours of 2
    assert max_truncations(*make_env(ENV, max_steps=5), 16) == 4
    assert max_truncations(*make_env(ENV, max_steps=5, max_steps_in_episode=2), 16) == 8
    ids = suite_env_ids("navix")
    assert len(ids) == len(navix.registry()) and ENV in ids and "navix:Navix-DoorKey-8x8-v0" in ids
    with pytest.raises(ValueError, match="observation='pixels' is not one of navix's observations"):
        make_env(ENV, observation="pixels")
    with pytest.raises(ValueError, match="unknown env_id 'navix:Navix-Empty-5x5'.*did you mean"):
        make_env("navix:Navix-Empty-5x5")


def test_rgb_observations_reach_the_policy_in_the_unit_range():
    # navix renders uint8 0-255; at that scale an MLP's or CNN's first layer saturates, so the
    # adapter feeds navix's pixels / 255 and says so in its space
    env, params = make_env(ENV, observation="rgb")
    obs, state = jax.jit(env.reset)(jax.random.PRNGKey(0), params)
    for _ in range(2):  # the reset's observation, then a step's
        pixels = np.asarray(state.env_state.inner.observation)  # navix's own, kept in its timestep
        assert pixels.dtype == np.uint8 and pixels.max() == 255
        assert obs.dtype == jnp.float32
        np.testing.assert_allclose(obs, pixels / 255.0, rtol=1e-6)
        obs, state, *_ = jax.jit(env.step)(jax.random.PRNGKey(1), state, 2, params)
    for observation, shape in (("rgb", pixels.shape), ("rgb_first_person", (56, 56, 3))):
        space = make_env(ENV, observation=observation)[0].observation_space(params)
        assert (space.low, space.high, space.dtype, space.shape) == (0.0, 1.0, jnp.float32, shape)
    env, params = make_env(ENV)
    assert env.reset(jax.random.PRNGKey(0), params)[0].dtype == jnp.uint8  # symbolic ids stay as navix's


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return suite_runs(ENV, tmp_path_factory.mktemp("navix"))


def test_training_fused_async_and_resume(runs):
    assert_suite_runs(runs)


@pytest.mark.slow
def test_the_empty_preset_walks_straight_to_the_goal(tmp_path):
    # 11 steps is the shortest way on 8x8 (5 east, a turn, 5 south); navix pays 1 for the goal however
    # late, within its 100 steps
    summary, lengths = learn_preset("navix:Navix-Empty-8x8-v0", tmp_path)
    assert summary["final_eval_return"] == [1.0, 1.0, 1.0]
    assert (lengths <= 14).all(), lengths
