"""The jumanji adapter (`jumanji:ID`) against jumanji's own step, and training through it.

Snake-v1 ends every episode with discount 0 (a collision, or its time limit: jumanji counts the
step count it observes as part of the state), so it only terminates; LevelBasedForaging-v0
truncates at its time limit (discount 1), and has a reward, a discount and an action mask per
agent (two agents, six actions each). Snake's actions: 0 up, 1 right, 2 down, 3 left.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jumanji
import numpy as np
import pytest
from jumanji.types import StepType
from jumanji.wrappers import MultiToSingleWrapper

from gridworld_checks import assert_suite_runs, learn_preset, run_actions, suite_runs
from jaxrl_async.config import NetworkConfig
from jaxrl_async.envs import make_env
from jaxrl_async.envs.spaces import MultiDiscrete, observation_shapes
from jaxrl_async.envs.suites import jumanji as jumanji_adapter
from jaxrl_async.envs.suites import suite_env_ids
from jaxrl_async.nets.actor_critic import make_policy

ENV = "jumanji:Snake-v1"


def reference_steps(env, actions, key):
    """jumanji's own reset and step, with the keys our adapted env hands it: `run_actions` splits
    (key -> reset key, then a step key per step), and `SuiteEnv.step` resets from the second half
    of its step key. Per action: (state, timestep) after it, and the reset jumanji would give."""
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    key, reset_key = jax.random.split(key)
    state, timestep = reset(reset_key)
    out = []
    for action in actions:
        key, step_key = jax.random.split(key)
        state, timestep = step(state, jnp.asarray(action))
        out.append((state, timestep, reset(jax.random.split(step_key)[1])))
    return out


def snake_observation(obs, time_limit):
    # the step counter as the share of the time limit gone (test_the_step_counter_is_the_share_...)
    return {"grid": np.asarray(obs.grid), "step_count": np.float32(obs.step_count) / np.float32(time_limit),
            "action_mask": np.asarray(obs.action_mask, np.float32)}


def assert_obs_equal(ours_t, expected: dict):
    assert set(ours_t) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(ours_t[name], value, err_msg=name)


@pytest.mark.parametrize("how", ["wall", "time limit"])
def test_snake_matches_jumanji_and_always_terminates(how):
    key = jax.random.PRNGKey(3)
    time_limit = 10 if how == "wall" else 2
    kwargs = dict(num_rows=6, num_cols=6, time_limit=time_limit)
    env = jumanji.make("Snake-v1", **kwargs)
    head = jax.jit(env.reset)(jax.random.split(key)[1])[0].head_position
    row, col = int(head.row), int(head.col)
    if how == "wall":  # straight to the nearest wall: off the grid after at most 3 steps
        steps_to_wall = {0: row + 1, 1: 6 - col, 2: 6 - row, 3: col + 1}
        action = min(steps_to_wall, key=steps_to_wall.get)
        end = steps_to_wall[action] - 1
    else:  # towards the middle: no wall within the 2 steps of the time limit
        action, end = (2 if row < 3 else 0), 1
    actions = [action] * (end + 2)
    reference = reference_steps(env, actions, key)
    _, ours = run_actions(ENV, actions, key, **kwargs)
    for t, (_, timestep, (_, reset_timestep)) in enumerate(reference[: end + 1]):
        assert float(ours.reward[t]) == float(timestep.reward)
        done = t == end
        assert int(timestep.step_type) == (StepType.LAST if done else StepType.MID)
        assert float(timestep.discount) == (0.0 if done else 1.0)  # jumanji's: a termination either way
        assert bool(ours.terminated[t]) == done and not ours.truncated[t]
        # the last observation kept for the bootstrap; the step's observation the reset's
        assert_obs_equal(jax.tree.map(lambda x: x[t], ours.final_obs), snake_observation(timestep.observation, time_limit))
        after = reset_timestep.observation if done else timestep.observation
        assert_obs_equal(jax.tree.map(lambda x: x[t], ours.obs), snake_observation(after, time_limit))
    assert int(ours.states[end + 1].env_state.inner[".step_count"]) == 0


def test_level_based_foraging_truncates_with_summed_rewards():
    key = jax.random.PRNGKey(0)
    kwargs = dict(time_limit=3)
    env = MultiToSingleWrapper(jumanji.make("LevelBasedForaging-v0", **kwargs))
    actions = [[0, 0], [5, 0], [0, 5], [0, 0]]  # noop and load: legal whatever the layout
    reference = reference_steps(env, actions, key)
    _, ours = run_actions("jumanji:LevelBasedForaging-v0", actions, key, **kwargs)
    np.testing.assert_array_equal(ours.truncated, [0, 0, 1, 0])
    np.testing.assert_array_equal(ours.terminated, [0, 0, 0, 0])
    for t, (_, timestep, (_, reset_timestep)) in enumerate(reference[:3]):
        assert float(ours.reward[t]) == float(timestep.reward)  # the agents' rewards summed
        observed = timestep.observation if t < 2 else reset_timestep.observation
        # each agent's six legal actions, agent 0's first: noop is always legal
        mask = ours.obs["action_mask"][t]
        np.testing.assert_array_equal(mask, np.asarray(observed.action_mask, np.float32).reshape(12))
        assert mask[0] == mask[6] == 1
        np.testing.assert_array_equal(ours.obs["agents_view"][t], observed.agents_view)
    assert float(reference[2][1].discount) == 1.0 and int(reference[2][1].step_type) == StepType.LAST


def test_spaces():
    env, params = make_env(ENV)
    assert env.action_space(params).n == 4
    assert observation_shapes(env.observation_space(params)) == {"grid": (12, 12, 5), "step_count": (),
                                                                  "action_mask": (4,)}
    env, params = make_env("jumanji:Cleaner-v0")
    space = env.action_space(params)
    assert isinstance(space, MultiDiscrete) and space.nvec == (4, 4, 4)
    assert observation_shapes(env.observation_space(params))["action_mask"] == (12,)  # 3 agents' rows of 4
    env, params = make_env("jumanji:Maze-v0")  # nested specs stay nested
    assert observation_shapes(env.observation_space(params))["agent_position"] == {"row": (), "col": ()}
    env, params = make_env("jumanji:SearchAndRescue-v0")  # a [2, 2] float action as a flat Box
    assert env.action_space(params).shape == (4,)
    assert len(suite_env_ids("jumanji")) == len(jumanji.registered_environments())


def test_only_channels_last_leaves_reach_the_cnn():
    # SearchAndRescue's views are [agents, channels, rays], RubiksCube's cube [faces, rows, columns]:
    # no image, so their last two axes are joined and `--torso auto` gives them an MLP, as jumanji's
    # own networks have it; Snake's [12, 12, 5] grid stays an image (test_spaces)
    for env_id, leaf, shape in (("SearchAndRescue-v0", "searcher_views", (2, 3, 128)), ("RubiksCube-v0", "cube", (6, 3, 3))):
        env, params = make_env("jumanji:" + env_id)
        joined = shape[:1] + (shape[1] * shape[2],)
        space = env.observation_space(params).spaces[leaf]
        assert observation_shapes(space) == joined and space.low.shape == joined
        obs, _ = env.reset(jax.random.PRNGKey(0), params)
        _, timestep = jumanji.make(env_id).reset(jax.random.PRNGKey(0))
        ours = np.asarray(obs[leaf])
        np.testing.assert_array_equal(ours, np.asarray(getattr(timestep.observation, leaf)).reshape(joined))
        policy = make_policy(NetworkConfig(), observation_shapes(env.observation_space(params)), env.action_space(params))
        assert all("Conv" not in str(path) for path, _ in
                   jax.tree_util.tree_flatten_with_path(policy.init(jax.random.PRNGKey(0)))[0])


@pytest.mark.parametrize("env_id, message", [
    ("Tetris-v0", r"action_mask has shape \(4, 10\) for the MultiDiscrete action \[4, 10\]: a mask over the joint"),
    ("Minesweeper-v0", r"action_mask has shape \(10, 10\) for the MultiDiscrete action \[10, 10\]"),
    ("MultiCVRP-v0", r"action spec BoundedArray.*int16.*is not supported"),
])
def test_refused_envs_say_why(env_id, message):
    with pytest.raises(ValueError, match=message):
        make_env(f"jumanji:{env_id}")


def test_the_step_counter_is_the_share_of_the_time_limit_gone():
    # raw, Snake's counter (0 to 3999) saturates a tanh layer within ~20 steps, and the critic cannot
    # see the limit that ends the episode with discount 0
    env, params = make_env(ENV)
    space = env.observation_space(params).spaces["step_count"]
    assert (space.low, space.high, space.dtype, space.shape) == (0.0, 1.0, jnp.float32, ())
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    step = jax.jit(env.step)
    counts = []
    for t in range(4):
        count = int(state.env_state.inner[".step_count"])  # jumanji's own counter, in its state
        assert obs["step_count"] == pytest.approx(count / 4000) and obs["step_count"].dtype == jnp.float32
        counts.append(count)
        obs, state, *_ = step(jax.random.PRNGKey(t), state, env.action_space(params).sample(jax.random.PRNGKey(t)),
                              params)
    assert max(counts) >= 2, counts  # the counter moved
    # Maze declares no maximum (its time_limit, 100), SearchAndRescue names its counter `step`;
    # Knapsack has none
    assert [jumanji_adapter._time_limit(e, e.observation_spec) for e in
            (jumanji.make("Maze-v0"), jumanji.make("SearchAndRescue-v0"), jumanji.make("Knapsack-v1"))] == [100, 400, None]


def test_sokoban_reads_its_levels_from_the_cache_and_never_downloads(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # an empty cache, on any machine
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online as far as the Hub's client knows
    with pytest.raises(ValueError, match="not in the local cache .*huggingface-cli download InstaDeepAI/boxoban-levels"):
        make_env("jumanji:Sokoban-v0")
    assert constants.HF_HUB_OFFLINE is False  # put back


def test_bad_env_kwargs():
    with pytest.raises(ValueError, match=r"jumanji could not build Snake-v1 with env_kwargs \{'rows': 5\}: TypeError"):
        make_env(ENV, rows=5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return suite_runs(ENV, tmp_path_factory.mktemp("jumanji"))


def test_training_fused_async_and_resume(runs):
    assert_suite_runs(runs)


# A uniformly random policy eats 0.10 fruits an episode (5 seeds x 32 episodes: 0.03 to 0.19 per seed)
RANDOM_SNAKE_RETURN = 0.10


@pytest.mark.slow
def test_snake_preset_eats_more_than_a_random_policy(tmp_path):
    # the sampling policy: the greedy one learns to circle safely, eating little (docs/suites.md).
    # Measured: 11.30, 8.80, 11.17 (the 1M-step preset: 15.1 over 5 seeds); the bar leaves a margin of
    # ~9x, as a seed's run is chaotic in XLA's float code (at 150k steps one seed ate 9.41 in one
    # process and 0.77 in another)
    summary, _ = learn_preset(ENV, tmp_path, total_timesteps=300_000, eval_episodes=64)
    sampling = summary["final_eval_return_stochastic"]
    assert min(sampling) >= 10 * RANDOM_SNAKE_RETURN, sampling
