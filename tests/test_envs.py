"""Tests for jaxrl_async.envs: registry, wrappers, probes, obs normalisation."""

import math

import chex
import gymnax
import gymnax.registration
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async import envs
from jaxrl_async.envs import (
    PROBE_ENVS,
    ClipAction,
    EpisodeStatistics,
    EpisodeStatsState,
    RunningMeanStd,
    SquashAction,
    make_env,
    register_env,
    registered_env_ids,
)
from jaxrl_async.envs import registry
from jaxrl_async.envs.spaces import MultiDiscrete, map_shapes, observation_shapes
from jaxrl_async.envs.wrappers import OneHotObservation, max_truncations

NUM_ENVS = 3


def _batched_reset(env, params, key, num_envs):
    return jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)


def _run_steps(env, params, actions, key, num_envs):
    """Scans `env.step` over actions [T, B, ...]; returns (obs0, per-step outputs)."""
    reset_key, step_key = jax.random.split(key)
    obs0, state0 = _batched_reset(env, params, reset_key, num_envs)
    step_keys = jax.random.split(step_key, actions.shape[0] * num_envs).reshape(
        actions.shape[0], num_envs, -1
    )
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def _body(state, inputs):
        keys, action = inputs
        obs, state, reward, terminated, truncated, info = batched_step(
            keys, state, action, params
        )
        return state, (obs, reward, terminated, truncated, info)

    _, outputs = jax.jit(lambda s: jax.lax.scan(_body, s, (step_keys, actions)))(state0)
    return obs0, outputs


# ---------------------------------------------------------------- registry


def test_registered_env_ids_lists_usable_ids():
    ids = registered_env_ids()
    assert ids == sorted(ids)
    assert "CartPole-v1" in ids and "Breakout-MinAtar" in ids
    assert set(PROBE_ENVS) <= set(ids)
    assert "MNISTBandit-bsuite" not in ids
    assert set(envs.PARTIALLY_OBSERVABLE_ENVS) <= set(ids)
    assert len(ids) == len(gymnax.registered_envs) - 1 + len(PROBE_ENVS) + len(envs.PARTIALLY_OBSERVABLE_ENVS)


@pytest.mark.parametrize(
    "env_id", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", *sorted(PROBE_ENVS)]
)
def test_make_env_jit_vmap_reset_step(env_id):
    env, params = make_env(env_id)
    assert isinstance(env, EpisodeStatistics)
    action_space = env.action_space(params)
    continuous = isinstance(action_space, spaces.Box)
    assert isinstance(env._env, ClipAction) == continuous
    assert continuous or isinstance(action_space, (spaces.Discrete, MultiDiscrete))
    assert env.name == env.unwrapped.name

    obs_shapes = observation_shapes(env.observation_space(params))  # a shape, or a dict / tuple of them

    def assert_obs(obs):
        map_shapes(lambda shape, leaf: chex.assert_shape(leaf, (NUM_ENVS, *shape)), obs_shapes, obs)
        chex.assert_type(jax.tree.leaves(obs), jnp.float32)

    obs, state = jax.jit(_batched_reset, static_argnums=(0, 3))(
        env, params, jax.random.PRNGKey(0), NUM_ENVS
    )
    assert isinstance(state, EpisodeStatsState)
    assert_obs(obs)

    actions = jax.vmap(action_space.sample)(jax.random.split(jax.random.PRNGKey(1), NUM_ENVS))
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    traces = []

    def counted_step(*args):
        # chex.assert_max_traces counts per code object, i.e. across parametrized
        # cases; a local counter checks retracing of this env only
        traces.append(1)
        return batched_step(*args)

    step = jax.jit(counted_step)
    keys = jax.random.split(jax.random.PRNGKey(2), NUM_ENVS)
    reset_state_types = jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), state)
    for _ in range(2):  # the second call, on the returned state, must not retrace
        outputs = step(keys, state, actions, params)
        assert len(outputs) == 6
        obs, state, reward, terminated, truncated, info = outputs
    assert len(traces) == 1
    # identical state types from reset and step: a lax.scan carry stays stable
    assert jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), state) == reset_state_types
    assert_obs(obs)
    chex.assert_shape([reward, terminated, truncated], (NUM_ENVS,))
    chex.assert_type([reward, terminated, truncated], [jnp.float32, bool, bool])
    assert_obs(info["final_observation"])
    chex.assert_type(
        [info["episode_return"], info["episode_length"], info["episode_done"]],
        [jnp.float32, jnp.int32, bool],
    )
    np.testing.assert_array_equal(info["terminated"], terminated)
    np.testing.assert_array_equal(info["truncated"], truncated)
    np.testing.assert_array_equal(info["episode_done"], terminated | truncated)


@pytest.mark.parametrize("env_id, num_actions, action_shape, obs_shape", [
    ("CartPole-v1", 2, (), (4,)), ("Breakout-MinAtar", 3, (), (10, 10, 4)),
    ("Pendulum-v1", None, (1,), (3,)), ("Probe-TwoStep", 1, (), (1,)),
])
def test_the_wrappers_keep_the_spaces(env_id, num_actions, action_shape, obs_shape):
    env, params = make_env(env_id)
    action_space = env.action_space(params)
    assert getattr(action_space, "n", None) == num_actions and tuple(action_space.shape) == action_shape
    assert tuple(env.observation_space(params).shape) == obs_shape


@pytest.mark.parametrize(
    "bad_id, suggestion",
    [("CartPole-v2", "CartPole-v1"), ("cartpole-v1", "CartPole-v1"),
     ("Probe-Truncaton", "Probe-Truncation"), ("bandit", "SimpleBandit-bsuite"),
     ("gymnax:CartPole-v1", "CartPole-v1")],  # a known id under a prefix it does not take
)
def test_unknown_id_suggests_close_matches(bad_id, suggestion):
    with pytest.raises(ValueError) as excinfo:
        make_env(bad_id)
    message = str(excinfo.value)
    assert "\n" not in message
    assert repr(bad_id) in message
    assert repr(suggestion) in message
    assert "`jaxrl-async envs` lists" in message and "registered_env_ids()" in message
    assert "jaxrl_async.register_env adds your own" in message


def test_unknown_id_without_close_match():
    with pytest.raises(ValueError, match="no close matches.*jaxrl-async envs.*registered_env_ids"):
        make_env("Qwxyz")


def test_mnist_refused_before_construction(monkeypatch):
    def _must_not_run(**kwargs):
        raise AssertionError("MNISTBandit was constructed (it downloads MNIST)")

    monkeypatch.setitem(gymnax.registration._registry, "MNISTBandit-bsuite", _must_not_run)
    with pytest.raises(ValueError) as excinfo:
        make_env("MNISTBandit-bsuite")
    message = str(excinfo.value)
    assert "offline" in message and "SimpleBandit-bsuite" in message
    assert "\n" not in message


def test_register_env(monkeypatch):
    import jaxrl_async

    assert jaxrl_async.register_env is register_env  # the top-level name README gives
    monkeypatch.setattr(registry, "_USER_FACTORIES", {})
    register_env("My-Constant", lambda **kwargs: envs.ConstantRewardProbe(**kwargs))
    assert "My-Constant" in registered_env_ids()
    env, params = make_env("My-Constant")
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    *_, info = env.step(jax.random.PRNGKey(1), state, 0, params)
    assert float(info["episode_return"]) == 1.0
    for taken in ["My-Constant", "CartPole-v1", "Probe-TwoStep", "MNISTBandit-bsuite"]:
        with pytest.raises(ValueError, match="already registered"):
            register_env(taken, envs.ConstantRewardProbe)
    register_env("Not-An-Env", lambda: object())
    with pytest.raises(ValueError, match="gymnax functional API"):
        make_env("Not-An-Env")

    class Unobserved:  # an env without its observation space, which make_env reads too
        default_params, reset, step = None, None, None

        def action_space(self, params):
            return spaces.Discrete(2)

    register_env("Unobserved", Unobserved)
    with pytest.raises(ValueError, match=r"lacks \['observation_space'\]"):
        make_env("Unobserved")


# ---------------------------------------------------------------- wrappers


def test_wrapper_delegates_unknown_attributes():
    env, _ = make_env("Probe-ContinuousAction")
    assert env.env_id == "Probe-ContinuousAction"  # through two wrappers
    assert isinstance(env.unwrapped, envs.ContinuousActionProbe)
    assert env.num_actions == 1
    with pytest.raises(AttributeError):
        env.no_such_attribute


def test_episode_statistics_hand_checked_on_truncation_probe():
    env, params = make_env("Probe-Truncation")
    params = params.replace(max_steps_in_episode=3)
    actions = jnp.zeros((7, 1), jnp.int32)
    obs0, (obs, reward, terminated, truncated, info) = _run_steps(
        env, params, actions, jax.random.PRNGKey(0), num_envs=1
    )
    ended = np.array([0, 0, 1, 0, 0, 1, 0], bool)
    np.testing.assert_array_equal(obs0[:, 0], [0.0])
    np.testing.assert_array_equal(reward[:, 0], np.ones(7))
    np.testing.assert_array_equal(terminated[:, 0], np.zeros(7, bool))
    np.testing.assert_array_equal(truncated[:, 0], ended)
    np.testing.assert_array_equal(info["episode_done"][:, 0], ended)
    np.testing.assert_array_equal(info["episode_return"][:, 0], 3.0 * ended)
    np.testing.assert_array_equal(info["episode_length"][:, 0], 3 * ended)
    # returned obs auto-resets; the pre-reset one is in final_observation
    np.testing.assert_allclose(obs[:, 0, 0], [1 / 3, 2 / 3, 0, 1 / 3, 2 / 3, 0, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(
        info["final_observation"][:, 0, 0], [1 / 3, 2 / 3, 1, 1 / 3, 2 / 3, 1, 1 / 3], rtol=1e-6
    )


def test_episode_statistics_matches_python_loop_on_cartpole():
    num_steps, num_envs = 200, 2
    env, params = make_env("CartPole-v1")
    raw_env, raw_params = gymnax.make("CartPole-v1")
    key = jax.random.PRNGKey(42)
    actions = jax.random.randint(jax.random.PRNGKey(7), (num_steps, num_envs), 0, 2)
    _, (_, reward, terminated, truncated, info) = _run_steps(env, params, actions, key, num_envs)

    # reference: the unwrapped env with the same keys, stepped from Python
    reset_key, step_key = jax.random.split(key)
    step_keys = jax.random.split(step_key, num_steps * num_envs).reshape(num_steps, num_envs, -1)
    _, raw_state = _batched_reset(raw_env, raw_params, reset_key, num_envs)
    raw_step = jax.jit(jax.vmap(raw_env.step, in_axes=(0, 0, 0, None)))
    running_return = np.zeros(num_envs)
    running_length = np.zeros(num_envs, int)
    expected_return = np.zeros((num_steps, num_envs))
    expected_length = np.zeros((num_steps, num_envs), int)
    expected_done = np.zeros((num_steps, num_envs), bool)
    for t in range(num_steps):
        _, raw_state, r, term, trunc, _ = raw_step(step_keys[t], raw_state, actions[t], raw_params)
        r, done = np.asarray(r), np.asarray(term) | np.asarray(trunc)
        for b in range(num_envs):
            running_return[b] += r[b]
            running_length[b] += 1
            if done[b]:
                expected_return[t, b] = running_return[b]
                expected_length[t, b] = running_length[b]
                expected_done[t, b] = True
                running_return[b], running_length[b] = 0.0, 0
        np.testing.assert_array_equal(reward[t], r)

    assert expected_done.sum() >= 10  # random CartPole episodes are short
    np.testing.assert_array_equal(info["episode_done"], expected_done)
    np.testing.assert_allclose(info["episode_return"], expected_return)
    np.testing.assert_array_equal(info["episode_length"], expected_length)


def test_clip_action_clips_to_box():
    env, params = make_env("Probe-ContinuousAction")
    raw_env = envs.ContinuousActionProbe()
    key = jax.random.PRNGKey(0)
    _, state = env.reset(key, params)
    _, raw_state = raw_env.reset(key, params)

    def wrapped_reward(action):
        return float(env.step(key, state, jnp.array([action]), params)[2])

    def raw_reward(action):
        return float(raw_env.step(key, raw_state, jnp.array([action]), params)[2])

    assert raw_reward(5.0) == -16.0  # the env alone does not clip
    assert wrapped_reward(5.0) == wrapped_reward(2.0) == -1.0
    assert wrapped_reward(-7.0) == wrapped_reward(-2.0) == -9.0
    assert wrapped_reward(0.5) == raw_reward(0.5) == -0.25
    assert float(jax.jit(env.step)(key, state, jnp.array([5.0]), params)[2]) == -1.0


def test_squash_action_maps_tanh_onto_the_box():
    env, params = make_env("Probe-ContinuousAction")  # a Box in [-2, 2], reward -(a - 1)^2
    squashed = SquashAction(env)
    key = jax.random.PRNGKey(0)
    _, state = squashed.reset(key, params)

    def reward(u):
        return float(jax.jit(squashed.step)(key, state, jnp.array([u]), params)[2])

    for u in (-30.0, -0.7, 0.0, 0.3, 1.5, 30.0):
        env_action = -2.0 + (math.tanh(u) + 1.0) * 0.5 * 4.0  # low + (tanh(u) + 1) (high - low) / 2, by hand
        assert reward(u) == pytest.approx(-((env_action - 1.0) ** 2), abs=1e-5)
    assert reward(0.0) == pytest.approx(-1.0) and reward(30.0) == pytest.approx(-1.0) and reward(-30.0) == -9.0
    assert max_truncations(squashed, params, 10) == max_truncations(env, params, 10)  # steps once a step
    with pytest.raises(TypeError, match="Box"):
        SquashAction(envs.ActionRewardProbe())


def test_a_discrete_observation_is_given_one_hot():
    # gymnax's FrozenLake-misc observes the agent's cell, an id of 16: as one number its size would
    # mean something to the network (greedy 0.06-0.09 over 3 seeds at 200k steps; one-hot 0.56-0.62)
    env, params = make_env("FrozenLake-misc")
    raw = gymnax.make("FrozenLake-misc")[0]
    assert isinstance(raw.observation_space(params), spaces.Discrete)
    assert (env.observation_space(params).shape, env.observation_space(params).dtype) == ((16,), jnp.float32)
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key, params)
    raw_obs, raw_state = raw.reset(key, params)
    np.testing.assert_array_equal(obs, np.eye(16)[int(raw_obs)])
    for action in (1, 2, 2, 1, 1, 2):  # down and right, slipping as the env draws
        key, step_key = jax.random.split(key)
        obs, state, _, _, _, info = jax.jit(env.step)(step_key, state, action, params)
        raw_obs, raw_state, _, _, _, raw_info = raw.step(step_key, raw_state, action, params)
        np.testing.assert_array_equal(obs, np.eye(16)[int(raw_obs)])
        np.testing.assert_array_equal(info["final_observation"], np.eye(16)[int(raw_info["final_observation"])])
    with pytest.raises(TypeError, match="Discrete observation"):
        OneHotObservation(envs.ActionRewardProbe())


def test_clip_action_rejects_discrete_env():
    with pytest.raises(TypeError, match="Box"):
        ClipAction(envs.ActionRewardProbe())


# ---------------------------------------------------------------- partially observable


@pytest.mark.parametrize("env_id, full_id, keep", [("StatelessCartPole-v1", "CartPole-v1", [0, 2]),
                                                   ("StatelessPendulum-v1", "Pendulum-v1", [0, 1])])
def test_stateless_env_is_the_full_env_with_entries_hidden(env_id, full_id, keep):
    env, params = make_env(env_id)
    full, full_params = make_env(full_id)
    assert env.observation_space(params).shape == (len(keep),)
    np.testing.assert_array_equal(env.observation_space(params).low,
                                  np.asarray(full.observation_space(full_params).low)[keep])
    key = jax.random.PRNGKey(3)
    obs, state = env.reset(key, params)
    full_obs, full_state = full.reset(key, full_params)
    step, full_step = jax.jit(env.step), jax.jit(full.step)
    ends = 0
    for t in range(300):  # CartPole under random actions ends an episode every ~20 steps
        key, act_key, step_key = jax.random.split(key, 3)
        action = full.action_space(full_params).sample(act_key)
        obs, state, reward, terminated, truncated, info = step(step_key, state, action, params)
        full_obs, full_state, full_reward, full_terminated, full_truncated, full_info = full_step(
            step_key, full_state, action, full_params)
        np.testing.assert_array_equal(obs, np.asarray(full_obs)[keep])
        np.testing.assert_array_equal(info["final_observation"],
                                      np.asarray(full_info["final_observation"])[keep])
        assert (reward, terminated, truncated) == (full_reward, full_terminated, full_truncated)
        ends += bool(terminated | truncated)
    assert ends > 0  # the reset path and the final observation were exercised


def test_observation_subset_rejects_bad_indices_and_images():
    with pytest.raises(ValueError, match="distinct indices"):
        envs.ObservationSubset(gymnax.make("CartPole-v1")[0], (0, 4))
    with pytest.raises(ValueError, match="distinct indices"):
        envs.ObservationSubset(gymnax.make("CartPole-v1")[0], (1, 1))
    with pytest.raises(ValueError, match="flat observations"):
        envs.ObservationSubset(gymnax.make("Breakout-MinAtar")[0], (0,))


# ---------------------------------------------------------------- normalisation


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    batches = [
        rng.normal(loc=[3.0, -1.0], scale=[2.0, 0.5], size=(size, 2)).astype(np.float32)
        for size in (5, 17, 1, 40)
    ]
    stats = RunningMeanStd.create((2,))
    np.testing.assert_array_equal(stats.normalize(jnp.array([1.5, -2.0])), [1.5, -2.0])
    update = jax.jit(lambda s, b: s.update(b))
    for i, batch in enumerate(batches):
        stats = update(stats, batch)
        seen = np.concatenate(batches[: i + 1])
        np.testing.assert_allclose(stats.mean, seen.mean(axis=0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats.var, seen.var(axis=0), rtol=1e-5, atol=1e-6)
        assert float(stats.count) == len(seen)

    obs = np.array([[3.0, -1.0], [100.0, -1.2]], np.float32)
    expected = np.clip((obs - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-8), -10.0, 10.0)
    np.testing.assert_allclose(stats.normalize(obs), expected, rtol=1e-4, atol=1e-5)
    assert float(stats.normalize(obs)[1, 0]) == 10.0  # the outlier is clipped
    assert float(stats.normalize(obs, clip=2.0)[1, 0]) == 2.0


def test_running_mean_std_rejects_wrong_shape():
    with pytest.raises(AssertionError):
        RunningMeanStd.create((3,)).update(jnp.zeros((4, 2)))


# ---------------------------------------------------------------- probe rules

NUM_PROBE_ENVS = 64


def _probe_step(env_id, action_fn, params_replace=None):
    """Resets NUM_PROBE_ENVS envs and takes one step with action_fn(obs)."""
    env, params = make_env(env_id)
    if params_replace:
        params = params.replace(**params_replace)
    obs, state = _batched_reset(env, params, jax.random.PRNGKey(3), NUM_PROBE_ENVS)
    keys = jax.random.split(jax.random.PRNGKey(4), NUM_PROBE_ENVS)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    return obs, step(keys, state, action_fn(obs), params)


def _discrete(value):
    return lambda obs: jnp.full(obs.shape[:1], value, jnp.int32)


@pytest.mark.parametrize("max_steps", [10, 1])
def test_constant_reward_probe(max_steps):
    obs, (next_obs, state, reward, term, trunc, info) = _probe_step(
        "Probe-ConstantReward", _discrete(0), {"max_steps_in_episode": max_steps}
    )
    assert make_env("Probe-ConstantReward")[0].num_actions == 1
    np.testing.assert_array_equal(obs, 0.0)
    np.testing.assert_array_equal(reward, 1.0)
    assert term.all() and not trunc.any()  # one-step episodes terminate, never truncate
    np.testing.assert_array_equal(state.env_state.time, 0)  # auto-reset
    np.testing.assert_array_equal(info["episode_length"], 1)


def test_obs_reward_probe():
    obs, (_, _, reward, term, trunc, _) = _probe_step("Probe-ObsReward", _discrete(0))
    assert set(np.unique(obs).tolist()) == {-1.0, 1.0}
    np.testing.assert_array_equal(reward, obs[:, 0])
    assert term.all() and not trunc.any()


def test_two_step_probe():
    env, params = make_env("Probe-TwoStep")
    actions = jnp.zeros((4, 1), jnp.int32)
    obs0, (obs, reward, term, trunc, info) = _run_steps(
        env, params, actions, jax.random.PRNGKey(0), num_envs=1
    )
    np.testing.assert_array_equal(obs0[:, 0], [0.0])
    np.testing.assert_array_equal(obs[:, 0, 0], [1.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(reward[:, 0], [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(term[:, 0], [False, True, False, True])
    assert not trunc.any()
    np.testing.assert_array_equal(info["episode_return"][:, 0], [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(info["episode_length"][:, 0], [0, 2, 0, 2])


def test_action_reward_probe():
    assert make_env("Probe-ActionReward")[0].num_actions == 2
    for action, expected in [(1, 1.0), (0, 0.0)]:
        obs, (_, _, reward, term, trunc, _) = _probe_step("Probe-ActionReward", _discrete(action))
        np.testing.assert_array_equal(obs, 0.0)
        np.testing.assert_array_equal(reward, expected)
        assert term.all() and not trunc.any()


def test_obs_action_reward_probe():
    def matching(obs):
        return (obs[:, 0] > 0).astype(jnp.int32)

    obs, (_, _, reward, term, trunc, _) = _probe_step("Probe-ObsActionReward", matching)
    assert set(np.unique(obs).tolist()) == {-1.0, 1.0}
    np.testing.assert_array_equal(reward, 1.0)
    assert term.all() and not trunc.any()
    _, (_, _, reward, _, _, _) = _probe_step(
        "Probe-ObsActionReward", lambda obs: 1 - matching(obs)
    )
    np.testing.assert_array_equal(reward, 0.0)
    # a fixed action is right only for one sign: reward tracks the observation
    obs, (_, _, reward, _, _, _) = _probe_step("Probe-ObsActionReward", _discrete(1))
    np.testing.assert_array_equal(reward, (obs[:, 0] > 0).astype(np.float32))


def test_truncation_probe_default_limit():
    env, params = make_env("Probe-Truncation")
    assert params.max_steps_in_episode == 10
    actions = jnp.zeros((20, 1), jnp.int32)
    obs0, (obs, reward, term, trunc, info) = _run_steps(
        env, params, actions, jax.random.PRNGKey(0), num_envs=1
    )
    steps = np.arange(1, 21)
    np.testing.assert_array_equal(obs0[:, 0], [0.0])
    np.testing.assert_array_equal(reward[:, 0], 1.0)
    assert not term.any()
    np.testing.assert_array_equal(trunc[:, 0], steps % 10 == 0)
    np.testing.assert_allclose(info["final_observation"][:, 0, 0], ((steps - 1) % 10 + 1) / 10)
    np.testing.assert_allclose(obs[:, 0, 0], (steps % 10) / 10)
    np.testing.assert_array_equal(info["episode_return"][:, 0], np.where(steps % 10 == 0, 10.0, 0.0))


def test_continuous_action_probe():
    env, params = make_env("Probe-ContinuousAction")
    space = env.action_space(params)
    assert isinstance(space, spaces.Box) and space.shape == (1,)
    assert (space.low, space.high) == (-2.0, 2.0)
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key, params)
    np.testing.assert_array_equal(obs, [0.0])
    for action, expected in [(1.0, 0.0), (0.0, -1.0), (-1.0, -4.0), (1.5, -0.25)]:
        _, _, reward, term, trunc, _ = env.step(key, state, jnp.array([action]), params)
        assert float(reward) == expected
        assert bool(term) and not bool(trunc)
