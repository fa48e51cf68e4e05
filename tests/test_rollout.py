"""Tests for jaxrl_async.rollout.device: the jitted scan against a plain Python loop.

The reference steps each env on its own (no vmap), keeps observation statistics
as a NumPy mean/var over every raw observation seen, and computes GAE with a
NumPy loop written in terms of episodes (if-statements on the flags).
"""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async.core.bootstrap import bootstrap_values
from jaxrl_async.config import NetworkConfig
from jaxrl_async.envs import make_env
from jaxrl_async.envs.suites.functional import SuiteEnv
from jaxrl_async.envs.wrappers import EpisodeStatistics, Wrapper, max_truncations
from jaxrl_async.nets.actor_critic import make_policy, reset_carry
from jaxrl_async.rollout.device import make_rollout

# the jitted scan against a step-by-step loop: full float32 matmuls on any backend (conftest.py)
pytestmark = pytest.mark.float32_matmuls

GAMMA = 0.9
GAE_LAMBDA = 0.8
NUM_ENVS = 4
SMALL_NET = NetworkConfig(hidden_sizes=(16,))
SMALL_GRU = NetworkConfig(hidden_sizes=(16,), core="gru", core_size=8)


def build(env_id, *, num_steps, num_envs=NUM_ENVS, normalize_obs=False, max_steps=None, network=SMALL_NET):
    env, env_params = make_env(env_id)
    if max_steps is not None:
        env_params = env_params.replace(max_steps_in_episode=max_steps)
    policy = make_policy(network, env.observation_space(env_params).shape, env.action_space(env_params))
    rollout = make_rollout(env, env_params, policy, num_envs=num_envs, num_steps=num_steps,
                           gamma=GAMMA, gae_lambda=GAE_LAMBDA, normalize_obs=normalize_obs)
    params = policy.init(jax.random.PRNGKey(1))
    state = rollout.init(jax.random.PRNGKey(2))
    return env, env_params, policy, rollout, params, state


def numpy_gae(reward, terminated, truncated, value, bootstrap_value, gamma, lam):
    """[T, B] GAE, one env at a time; an episode end cuts the recursion."""
    num_steps, num_envs = reward.shape
    advantage = np.zeros((num_steps, num_envs), np.float64)
    for b in range(num_envs):
        next_advantage = 0.0
        for t in reversed(range(num_steps)):
            if terminated[t, b] or truncated[t, b]:
                next_advantage = 0.0  # the next step belongs to another episode
            next_value = 0.0 if terminated[t, b] else bootstrap_value[t, b]
            delta = reward[t, b] + gamma * next_value - value[t, b]
            advantage[t, b] = delta + gamma * lam * next_advantage
            next_advantage = advantage[t, b]
    return advantage


def reference_rollout(env, env_params, policy, params, state, num_steps, normalize_obs):
    """The rollout as a step-by-step Python loop over the same keys; the policy's carry is reset
    where an episode starts, and the carry after each step values its next observation."""
    key, env_state, obs = state.key, state.env_state, np.asarray(state.obs)
    carry, reset, carries_after = state.carry, state.reset, []
    num_envs = obs.shape[0]
    seen = [obs]  # every raw observation the statistics have merged

    def observe(raw):
        if not normalize_obs:
            return raw
        everything = np.concatenate(seen).astype(np.float64)
        mean, var = everything.mean(0), everything.var(0)
        return np.clip((raw - mean) / np.sqrt(var + 1e-8), -10.0, 10.0).astype(np.float32)

    rec = {name: [] for name in ("obs", "action", "log_prob", "value", "reward", "terminated",
                                 "truncated", "next_obs", "episode_return", "episode_length",
                                 "episode_done")}
    for _ in range(num_steps):
        keys = jax.random.split(key, num_envs + 2)
        key, act_key, step_keys = keys[0], keys[1], keys[2:]
        policy_obs = observe(obs)
        dist, value, carry = policy.step(params, jnp.asarray(policy_obs), reset_carry(policy, carry, reset))
        carries_after.append(carry)
        action = dist.sample(act_key)
        log_prob = dist.log_prob(action)
        outputs = []
        for b in range(num_envs):
            env_state_b = jax.tree.map(lambda x: x[b], env_state)
            outputs.append(env.step(step_keys[b], env_state_b, action[b], env_params))
        next_obs = np.stack([np.asarray(o[0], np.float32) for o in outputs])
        env_state = jax.tree.map(lambda *xs: jnp.stack(xs), *[o[1] for o in outputs])
        infos = [o[5] for o in outputs]
        seen.append(next_obs)
        final_obs = np.stack([np.asarray(i["final_observation"], np.float32) for i in infos])
        rec["obs"].append(policy_obs)
        rec["action"].append(np.asarray(action))
        rec["log_prob"].append(np.asarray(log_prob))
        rec["value"].append(np.asarray(value))
        rec["reward"].append(np.array([o[2] for o in outputs], np.float32))
        rec["terminated"].append(np.array([o[3] for o in outputs], bool))
        rec["truncated"].append(np.array([o[4] for o in outputs], bool))
        reset = jnp.asarray(rec["terminated"][-1] | rec["truncated"][-1])
        rec["next_obs"].append(observe(final_obs))
        for name in ("episode_return", "episode_length", "episode_done"):
            rec[name].append(np.array([i[name] for i in infos]))
        obs = next_obs
    rec = {name: np.stack(values) for name, values in rec.items()}
    carries_after = jax.tree.map(lambda *steps: jnp.stack(steps), *carries_after) if carries_after else ()
    # what follows each step: nothing after a termination, else the pre-reset observation's value
    rec["bootstrap_value"] = np.where(
        rec["terminated"], 0.0, np.asarray(policy.value_step(params, jnp.asarray(rec["next_obs"]), carries_after)))
    rec["advantage"] = numpy_gae(rec["reward"], rec["terminated"], rec["truncated"], rec["value"],
                                 rec["bootstrap_value"], GAMMA, GAE_LAMBDA)
    rec["target"] = rec["advantage"] + rec["value"]
    return rec, dict(key=key, obs=obs, env_state=env_state, seen=np.concatenate(seen), carry=carry, reset=reset)


# CartPole with 32 steps sees terminations; the probe with a 3-step limit, truncations (its
# rollout values every step's final observation); CartPole with a 15-step limit, terminations
# and up to 2 truncations per env (its rollout values only the truncated steps': at most 3
# per env in 32 steps), or with a 10-step limit in 10 steps, one at the very end. A GRU: its
# carry must be reset at every episode start, and at a truncation the bootstrap must value
# the final observation with the carry after the step.
REFERENCE_CASES = [
    pytest.param("CartPole-v1", 32, False, None, SMALL_NET, id="cartpole"),
    pytest.param("CartPole-v1", 16, True, None, SMALL_NET, id="cartpole-normalized"),
    pytest.param("CartPole-v1", 32, False, None, SMALL_GRU, id="cartpole-gru"),
    pytest.param("CartPole-v1", 32, False, 15, SMALL_NET, id="cartpole-time-limit"),
    pytest.param("CartPole-v1", 32, True, 15, SMALL_GRU, id="cartpole-time-limit-gru-normalized"),
    pytest.param("CartPole-v1", 10, False, 10, SMALL_NET, id="cartpole-time-limit-at-the-end"),
    pytest.param("Probe-Truncation", 8, False, 3, SMALL_NET, id="truncation"),
    pytest.param("Probe-Truncation", 8, False, 3, SMALL_GRU, id="truncation-gru"),
    pytest.param("Probe-TwoStep", 6, False, None, SMALL_NET, id="twostep"),
]


@pytest.mark.parametrize("env_id, num_steps, normalize_obs, max_steps, network", REFERENCE_CASES)
def test_jitted_scan_equals_python_loop(env_id, num_steps, normalize_obs, max_steps, network):
    env, env_params, policy, rollout, params, state = build(
        env_id, num_steps=num_steps, normalize_obs=normalize_obs, max_steps=max_steps, network=network)
    new_state, traj = jax.jit(rollout.collect)(params, state)
    expected, final = reference_rollout(env, env_params, policy, params, state, num_steps, normalize_obs)

    # the case says something only if an episode ends inside the fragment
    assert np.any(expected["terminated"] | expected["truncated"])
    for name in ("action", "terminated", "truncated", "episode_done", "episode_length"):
        np.testing.assert_array_equal(getattr(traj, name), expected[name], err_msg=name)
    for name in ("obs", "next_obs", "log_prob", "value", "reward", "bootstrap_value",
                 "advantage", "target", "episode_return"):
        np.testing.assert_allclose(getattr(traj, name), expected[name], rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    np.testing.assert_array_equal(new_state.key, final["key"])
    np.testing.assert_allclose(new_state.obs, final["obs"], rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(new_state.env_state, final["env_state"], rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(new_state.carry, final["carry"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(new_state.reset, final["reset"])
    if normalize_obs:
        seen = final["seen"]
        assert float(new_state.obs_stats.count) == len(seen) == NUM_ENVS * (num_steps + 1)
        np.testing.assert_allclose(new_state.obs_stats.mean, seen.mean(0), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(new_state.obs_stats.var, seen.var(0), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------- shapes and dtypes


@pytest.mark.parametrize("env_id, obs_shape, action_shape, action_dtype", [
    ("CartPole-v1", (4,), (), jnp.int32),
    ("Probe-ContinuousAction", (1,), (1,), jnp.float32),
])
def test_trajectory_shapes_and_dtypes(env_id, obs_shape, action_shape, action_dtype):
    num_steps = 5
    _, _, _, rollout, params, state = build(env_id, num_steps=num_steps, num_envs=3)
    new_state, traj = jax.jit(rollout.collect)(params, state)
    time_batch = (num_steps, 3)
    chex.assert_shape([traj.obs, traj.next_obs], time_batch + obs_shape)
    chex.assert_type([traj.obs, traj.next_obs], jnp.float32)
    chex.assert_shape(traj.action, time_batch + action_shape)
    chex.assert_type(traj.action, action_dtype)
    float_fields = [traj.log_prob, traj.value, traj.reward, traj.bootstrap_value, traj.advantage,
                    traj.target, traj.episode_return]
    chex.assert_shape(float_fields, time_batch)
    chex.assert_type(float_fields, jnp.float32)
    chex.assert_shape([traj.terminated, traj.truncated, traj.episode_done, traj.episode_length],
                      time_batch)
    chex.assert_type([traj.terminated, traj.truncated, traj.episode_done], bool)
    chex.assert_type(traj.episode_length, jnp.int32)
    chex.assert_trees_all_equal_shapes_and_dtypes(new_state, state)
    np.testing.assert_array_equal(traj.target, traj.advantage + traj.value)


# ----------------------------------------------------------------- episode boundaries


@pytest.fixture(scope="module")
def truncation_rollout():
    """Probe-Truncation with a 3-step limit: obs 0, 1/3, 2/3, then final obs 1, reset to 0."""
    env, env_params, policy, rollout, params, state = build(
        "Probe-Truncation", num_steps=8, num_envs=2, max_steps=3)
    _, traj = jax.jit(rollout.collect)(params, state)
    return policy, params, traj


def test_truncation_bootstraps_from_the_final_observation(truncation_rollout):
    policy, params, traj = truncation_rollout
    truncated = np.asarray(traj.truncated)
    # steps 2 and 5 of every env end an episode; nothing terminates
    np.testing.assert_array_equal(np.nonzero(truncated[:, 0])[0], [2, 5])
    assert not np.any(traj.terminated)
    np.testing.assert_allclose(np.asarray(traj.next_obs)[truncated], 1.0)
    # and the env did reset: the step after a truncation acts on the reset observation 0
    np.testing.assert_allclose(np.asarray(traj.obs)[3:7:3], 0.0)

    value_final = float(policy.value_step(params, jnp.ones((1,)), ()))
    value_reset = float(policy.value_step(params, jnp.zeros((1,)), ()))
    assert abs(value_final - value_reset) > 1e-2, "critic too flat to tell the two apart"
    np.testing.assert_allclose(np.asarray(traj.bootstrap_value)[truncated], value_final, rtol=1e-6)

    # the advantage at a truncation is the one-step TD error: nothing after it leaks in
    expected = 1.0 + GAMMA * value_final - np.asarray(traj.value)[truncated]
    np.testing.assert_allclose(np.asarray(traj.advantage)[truncated], expected, rtol=1e-6, atol=1e-6)


def test_inside_an_episode_bootstrap_is_the_next_value(truncation_rollout):
    _, _, traj = truncation_rollout
    continues = ~np.asarray(traj.truncated)[:-1]
    np.testing.assert_allclose(np.asarray(traj.bootstrap_value)[:-1][continues],
                               np.asarray(traj.value)[1:][continues], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(traj.next_obs)[:-1][continues],
                               np.asarray(traj.obs)[1:][continues])


def test_termination_advantage_ignores_everything_after_it():
    """Probe-TwoStep terminates every second step: A_t = r_t - V(s_t) there."""
    _, _, _, rollout, params, state = build("Probe-TwoStep", num_steps=6, num_envs=2)
    _, traj = jax.jit(rollout.collect)(params, state)
    terminated = np.asarray(traj.terminated)
    np.testing.assert_array_equal(np.nonzero(terminated[:, 0])[0], [1, 3, 5])
    np.testing.assert_allclose(np.asarray(traj.advantage)[terminated],
                               1.0 - np.asarray(traj.value)[terminated], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(traj.episode_return)[terminated], 1.0)
    np.testing.assert_array_equal(np.asarray(traj.episode_length)[terminated], 2)


def test_max_truncations_follows_the_time_limit():
    env, params = make_env("CartPole-v1")  # 500 steps
    assert [max_truncations(env, params, t) for t in (1, 128, 500, 501, 1024)] == [1, 1, 1, 2, 3]
    assert max_truncations(env, params.replace(max_steps_in_episode=15), 32) == 3  # steps 15 and 30
    # an env under its own truncation rule, or behind a wrapper of unknown stepping: any step may be one
    probe, probe_params = make_env("Probe-Truncation")
    assert max_truncations(probe, probe_params, 32) == 32

    class Skip(Wrapper):  # might step the env it wraps more than once a step
        pass

    assert max_truncations(Skip(env), params, 32) == 32


class ClockSuite(SuiteEnv):
    """A suite's adapter in miniature: its own clock truncates at OWN_LIMIT steps (restarting at
    each reset), a random tenth of the steps terminate, and SuiteEnv adds our time limit."""

    OWN_LIMIT = 5

    def own_truncation_interval(self):
        return self.OWN_LIMIT

    def reset_env(self, key, params):
        x = jax.random.uniform(key)
        return jnp.stack([0.0, x]), (jnp.int32(0), x)

    def step_env(self, key, inner, action, params):
        clock, x = inner
        clock, x = clock + 1, x + action.astype(jnp.float32) - 0.5
        obs = jnp.stack([clock.astype(jnp.float32), x])
        return obs, (clock, x), x, jax.random.uniform(key) < 0.1, clock >= self.OWN_LIMIT

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)


def test_max_truncations_follows_a_suites_clock_and_ours():
    """A suite's truncations are at least the shorter of its clock's limit and ours apart; a suite
    that never truncates by itself is truncated only by our limit; one that says nothing, anywhere."""
    wrapped = EpisodeStatistics(ClockSuite(max_steps_in_episode=7))
    assert [max_truncations(wrapped, wrapped.default_params, t) for t in (5, 6, 16)] == [1, 2, 4]
    assert max_truncations(ClockSuite(max_steps_in_episode=3), None, 16) == 6  # ours is the shorter
    never = type("Never", (ClockSuite,), {"own_truncation_interval": lambda self: math.inf})
    assert max_truncations(never(), None, 16) == 1 and max_truncations(never(max_steps_in_episode=4), None, 16) == 4
    unknown = type("Unknown", (ClockSuite,), {"own_truncation_interval": lambda self: None})
    assert max_truncations(unknown(max_steps_in_episode=7), None, 16) == 16


def test_a_suites_bound_values_the_same_bootstraps_as_every_step():
    """Over 16 steps of the clock suite (its clock truncating every 5 steps, ours at 12), the
    rollout that values 4 truncated steps per env agrees with the one that values every step
    (ours alone would allow 2)."""
    env = EpisodeStatistics(ClockSuite(max_steps_in_episode=12))
    params = env.default_params
    policy = make_policy(SMALL_NET, (2,), env.action_space(params))
    rollouts = [make_rollout(env, params, policy, num_envs=8, num_steps=16, gamma=GAMMA, gae_lambda=GAE_LAMBDA,
                             max_truncations=k) for k in (None, 16)]
    policy_params = policy.init(jax.random.PRNGKey(1))
    state = rollouts[0].init(jax.random.PRNGKey(2))
    (_, traj), (_, reference) = (jax.jit(r.collect)(policy_params, state) for r in rollouts)
    assert np.sum(traj.truncated) >= 8 and np.any(traj.terminated)
    assert np.max(np.sum(traj.truncated, axis=0)) >= 3  # an env truncated 3+ times: the bound is used
    chex.assert_trees_all_close(traj, reference, rtol=1e-5, atol=1e-6)


def test_reward_scale_scales_what_the_learner_sees_and_not_the_episode_returns():
    """`reward_scale` multiplies the trajectory's rewards, and its advantages are GAE over the scaled
    rewards (the NumPy reference); the episode statistics stay the env's own."""
    env, env_params, policy, rollout, params, state = build("CartPole-v1", num_steps=32, max_steps=15)
    scaled = make_rollout(env, env_params, policy, num_envs=NUM_ENVS, num_steps=32, gamma=GAMMA,
                          gae_lambda=GAE_LAMBDA, reward_scale=3.0)
    _, plain = jax.jit(rollout.collect)(params, state)
    _, traj = jax.jit(scaled.collect)(params, state)
    assert np.any(plain.terminated) and np.any(plain.truncated) and np.any(plain.episode_done)
    np.testing.assert_array_equal(traj.reward, 3.0 * np.asarray(plain.reward))
    np.testing.assert_array_equal(traj.episode_return, plain.episode_return)  # the env's own returns
    np.testing.assert_array_equal(traj.value, plain.value)
    expected = numpy_gae(*(np.asarray(x, np.float64) for x in (traj.reward, traj.terminated, traj.truncated,
                                                               traj.value, traj.bootstrap_value)), GAMMA, GAE_LAMBDA)
    np.testing.assert_allclose(traj.advantage, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(traj.advantage, plain.advantage)


def test_valuing_every_step_gives_the_same_trajectory():
    """`max_truncations=num_steps` (the benchmark's reference, every step valued) and the env's bound
    (3 in 32 steps at a 15-step limit) agree to float rounding; a count below the bound is refused."""
    env, env_params, policy, rollout, params, state = build("CartPole-v1", num_steps=32, max_steps=15)
    every_step = make_rollout(env, env_params, policy, num_envs=NUM_ENVS, num_steps=32, gamma=GAMMA,
                              gae_lambda=GAE_LAMBDA, max_truncations=32)
    _, traj = jax.jit(rollout.collect)(params, state)
    _, reference = jax.jit(every_step.collect)(params, state)
    assert np.any(traj.truncated) and np.any(traj.terminated)
    chex.assert_trees_all_close(traj, reference, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="max_truncations=2: an env can be truncated up to 3 times in 32 steps"):
        make_rollout(env, env_params, policy, num_envs=NUM_ENVS, num_steps=32, gamma=GAMMA, gae_lambda=GAE_LAMBDA,
                     max_truncations=2)


def test_bootstrap_values_value_only_the_truncated_steps():
    """Env 0 is truncated at steps 1 and 4 and terminated at 2; env 1 terminated at 3; env 2
    truncated at the last step. A truncation takes V(final obs), a termination 0, any other
    step the next step's value (after the last step, the following observation's): with
    k = 2 truncations per env one critic call sees [2 + 1, 3] rows."""
    num_steps, num_envs = 6, 3
    terminated, truncated = np.zeros((num_steps, num_envs), bool), np.zeros((num_steps, num_envs), bool)
    truncated[[1, 4], 0] = True
    terminated[2, 0] = terminated[3, 1] = True
    truncated[5, 2] = True
    grid = jnp.arange(num_steps * num_envs, dtype=jnp.float32).reshape(num_steps, num_envs)
    rec = dict(next_obs=grid[..., None], value=-1.0 - grid, terminated=jnp.asarray(terminated),
               truncated=jnp.asarray(truncated))
    following_obs = jnp.asarray([[100.0], [200.0], [300.0]])
    seen = []

    def value_fn(obs, carry):
        seen.append(obs.shape)
        return 10.0 * obs[..., 0]

    final_value = 10.0 * np.asarray(grid)
    next_step_value = np.concatenate([np.asarray(rec["value"])[1:], [[1000.0, 2000.0, 3000.0]]])
    expected = np.where(terminated, 0.0, np.where(truncated, final_value, next_step_value))
    np.testing.assert_array_equal(bootstrap_values(value_fn, rec, (), 2, following=(following_obs, ())), expected)
    assert seen == [(3, num_envs, 1)]
    # at most one truncation per env (env 0's second is left out): [1 + 1, 3] rows
    one = truncated.copy()
    one[4, 0] = False
    rec_one = {**rec, "truncated": jnp.asarray(one)}
    np.testing.assert_array_equal(bootstrap_values(value_fn, rec_one, (), 1, following=(following_obs, ())),
                                  np.where(terminated, 0.0, np.where(one, final_value, next_step_value)))
    assert seen[-1] == (2, num_envs, 1)
    # valuing every step (a host env's rollout): V(final obs) everywhere but at the termination
    np.testing.assert_array_equal(bootstrap_values(value_fn, rec, (), num_steps),
                                  np.where(terminated, 0.0, final_value))
    assert seen[-1] == (num_steps, num_envs, 1)


# ----------------------------------------------------------------- observation normalisation


def test_normalized_rollout_keeps_statistics_in_the_state():
    _, _, _, rollout, params, state = build("CartPole-v1", num_steps=10, normalize_obs=True)
    assert float(state.obs_stats.count) == NUM_ENVS
    # the first batch sets the statistics exactly: the policy sees a standardised batch
    np.testing.assert_allclose(state.obs_stats.mean, np.asarray(state.obs).mean(0), rtol=1e-5, atol=1e-7)
    new_state, traj = jax.jit(rollout.collect)(params, state)
    assert float(new_state.obs_stats.count) == NUM_ENVS * 11
    stats = state.obs_stats
    np.testing.assert_allclose(
        traj.obs[0], (np.asarray(state.obs) - stats.mean) / np.sqrt(stats.var + 1e-8), rtol=1e-5, atol=1e-5)

    # off: statistics untouched, observations raw
    _, _, _, plain, params, plain_state = build("CartPole-v1", num_steps=10, normalize_obs=False)
    plain_new, plain_traj = jax.jit(plain.collect)(params, plain_state)
    assert float(plain_new.obs_stats.count) == 0.0
    np.testing.assert_array_equal(plain_traj.obs[0], plain_state.obs)


# ----------------------------------------------------------------- no retrace


def test_collect_traces_once_across_iterations():
    _, _, policy, rollout, params, state = build("CartPole-v1", num_steps=4)
    collect = jax.jit(chex.assert_max_traces(rollout.collect, n=1))
    values = []
    for i in range(4):
        params = jax.tree.map(lambda x: x * (1.0 + 0.1 * i), params)  # new values, same types
        state, traj = collect(params, state)
        values.append(np.asarray(traj.value))
    assert not np.allclose(values[0], values[-1])  # the new params were really used
