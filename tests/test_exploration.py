"""Temporally correlated exploration noise (jaxrl_async/core/exploration.py, `--action-noise-correlation`).

The noise must stay standard normal at every step (the learners' log-probabilities assume the
policy's own Gaussian), correlate as asked between steps, start afresh with each episode, reach
the actions through the rollout and its checkpointed state, and explore where white noise does
not: MountainCarContinuous-v0's flag.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async.config import NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.envs import make_env
from jaxrl_async.core.exploration import next_noise
from jaxrl_async.nets.actor_critic import make_policy
from jaxrl_async.rollout.device import make_rollout
from jaxrl_async.nets.sac import make_sac_policy
from jaxrl_async.trainer.training import train

SMALL_NET = NetworkConfig(hidden_sizes=(16,))


def autocorrelation(x: np.ndarray, lag: int) -> float:
    """Correlation between x[t] and x[t + lag] over time (axis 0), pooled over the other axes."""
    a, b = x[:-lag].ravel(), x[lag:].ravel()
    return float(np.corrcoef(a, b)[0, 1])


def noise_sequence(correlation: float, num_steps: int, num_envs: int, episode_start=None) -> np.ndarray:
    def step(previous, inputs):
        key, start = inputs
        eps = next_noise(key, previous, start, correlation)
        return eps, eps

    keys = jax.random.split(jax.random.PRNGKey(0), num_steps)
    if episode_start is None:
        episode_start = jnp.zeros((num_steps, num_envs), bool).at[0].set(True)
    _, eps = jax.lax.scan(step, jnp.zeros((num_envs, 1)), (keys, episode_start))
    return np.asarray(eps[..., 0], np.float64)


def test_noise_is_standard_normal_with_the_asked_correlation():
    # 4,000 steps x 64 envs: the estimates' standard errors are ~0.01, the margins 4-5 of them
    eps = noise_sequence(0.9, 4_000, 64)
    assert abs(eps.mean()) < 0.05
    assert abs(eps.var() - 1.0) < 0.05
    assert abs(autocorrelation(eps, 1) - 0.9) < 0.02
    assert abs(autocorrelation(eps, 10) - 0.9**10) < 0.05
    white = noise_sequence(0.0, 4_000, 64)
    assert abs(white.var() - 1.0) < 0.03 and abs(autocorrelation(white, 1)) < 0.02


def test_an_episode_start_draws_the_noise_afresh():
    key = jax.random.PRNGKey(3)
    previous = jnp.full((2, 1), 1e3)
    eps = next_noise(key, previous, jnp.array([True, False]), 0.6)
    fresh = jax.random.normal(key, (2, 1))
    np.testing.assert_allclose(eps[0], fresh[0])  # nothing of the previous episode is left
    np.testing.assert_allclose(eps[1], 0.6 * 1e3 + 0.8 * fresh[1], rtol=1e-6)
    # starts everywhere: white noise whatever the correlation
    eps = noise_sequence(0.99, 2_000, 64, episode_start=jnp.ones((2_000, 64), bool))
    assert abs(autocorrelation(eps, 1)) < 0.02 and abs(eps.var() - 1.0) < 0.03


def rollout_of(env_id, correlation, *, num_envs, num_steps, policy_maker=None, seed=0):
    env, env_params = make_env(env_id)
    if policy_maker is None:
        policy = make_policy(SMALL_NET, env.observation_space(env_params).shape, env.action_space(env_params))
    else:
        policy, _ = policy_maker(SMALL_NET, env.observation_space(env_params).shape, env.action_space(env_params))
    rollout = make_rollout(env, env_params, policy, num_envs=num_envs, num_steps=num_steps, gamma=0.99,
                           gae_lambda=0.95, noise_correlation=correlation)
    params = policy.init(jax.random.PRNGKey(1))
    state, traj = jax.jit(rollout.collect)(params, rollout.init(jax.random.PRNGKey(seed)))
    return policy, params, state, traj


def noise_behind(policy, params, traj):
    """(the policy's distribution at the recorded observations, the standard-normal noise [T, B]
    each recorded action was drawn with): eps = (action - mean) / std, for a feedforward policy."""
    dist, _, _ = policy.step(params, traj.obs, ())
    return dist, np.asarray((traj.action - dist.mean) / jnp.exp(dist.log_std), np.float64)[..., 0]


def test_the_rollout_acts_with_the_correlated_noise():
    # Pendulum's episodes last 200 steps: none ends in these 64
    policy, params, state, traj = rollout_of("Pendulum-v1", 0.8, num_envs=32, num_steps=64)
    dist, eps = noise_behind(policy, params, traj)
    assert abs(autocorrelation(eps, 1) - 0.8) < 0.06  # 2,016 pairs: standard error ~0.013
    assert abs(eps.var() - 1.0) < 0.15
    # the policy's own density of the action taken, and the last noise carried to the next fragment
    np.testing.assert_allclose(traj.log_prob, dist.log_prob(traj.action), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.noise[:, 0], eps[-1], rtol=1e-4, atol=1e-5)


def test_each_one_step_episode_gets_fresh_noise():
    policy, params, _, traj = rollout_of("Probe-ContinuousAction", 0.99, num_envs=32, num_steps=64)
    _, eps = noise_behind(policy, params, traj)
    assert np.all(traj.terminated | traj.truncated)
    assert abs(autocorrelation(eps, 1)) < 0.08


@pytest.mark.parametrize("correlation", [0.8, 0.0])
def test_a_host_envs_actor_acts_with_the_correlated_noise(correlation):
    # gymnasium's Pendulum-v1 stepped by the host actor: the same noise as the jitted rollout's
    cfg = TrainConfig(env="gymnasium:Pendulum-v1", mode="async", num_envs=32, num_steps=64, total_timesteps=2048,
                      action_noise_correlation=correlation, network=SMALL_NET)
    c = build(cfg)
    state = initial_states(c)
    device = jax.devices()[0]
    actor = c.rollout.actor(list(range(32)), device, jax.sharding.SingleDeviceSharding(device))
    new_state, traj = actor.collect(state.learner.params, state.rollout)
    actor.close()
    params = jax.tree.map(lambda x: x[0], state.learner.params)
    traj = jax.tree.map(lambda x: x[0], traj)
    _, eps = noise_behind(c.policy, params, traj)
    assert not np.any(traj.reset[1:])  # no episode starts inside: the whole fragment is correlated
    assert abs(autocorrelation(eps, 1) - correlation) < 0.06
    if correlation:
        np.testing.assert_allclose(new_state.noise[0, :, 0], eps[-1], rtol=1e-4, atol=1e-5)
    else:
        assert new_state.noise == ()


def test_white_noise_leaves_the_rollout_state_as_it_was():
    _, _, state, _ = rollout_of("Pendulum-v1", 0.0, num_envs=2, num_steps=4)
    assert state.noise == ()  # no leaf added: checkpoints of white-noise runs keep their layout


def test_sacs_warm_up_maps_the_noise_uniformly_onto_the_box():
    env, env_params = make_env("Pendulum-v1")  # Box [-2, 2]
    policy, nets = make_sac_policy(SMALL_NET, (3,), env.action_space(env_params))
    params = policy.init(jax.random.PRNGKey(0))
    noise = jnp.array([[-3.0], [0.0], [1.0]])
    warm_up = nets.actor(params.actor, jnp.zeros((3, 3)), uniform=True)
    cdf = np.array([0.0013499, 0.5, 0.8413447])
    np.testing.assert_allclose(warm_up.sample_from_noise(noise)[:, 0], -2.0 + 4.0 * cdf, rtol=1e-4, atol=1e-5)
    learned = nets.actor(params.actor, jnp.zeros((3, 3)))
    expected = 2.0 * np.tanh(np.asarray(learned.mean + jnp.exp(learned.log_std) * noise))
    np.testing.assert_allclose(learned.sample_from_noise(noise), expected, rtol=1e-5, atol=1e-6)
    # uniform marginals: the normal CDF of N(0, 1) draws fills the box evenly
    warm_up = nets.actor(params.actor, jnp.zeros((20_000, 3)), uniform=True)
    draws = warm_up.sample_from_noise(jax.random.normal(jax.random.PRNGKey(1), (20_000, 1)))
    counts, _ = np.histogram(np.asarray(draws), bins=4, range=(-2.0, 2.0))
    assert np.all(np.abs(counts / 20_000 - 0.25) < 0.015)


def test_correlated_warm_up_reaches_mountain_car_flag_where_white_noise_does_not():
    # a fresh SAC policy acts uniformly (the warm-up); one episode (999 steps) of 16 envs.
    # Measured, seeds 0-2: white noise 0 of 16 envs each, correlation 0.99: 5, 8, 10 of 16
    reached = {}
    for correlation in (0.0, 0.99):
        *_, traj = rollout_of("MountainCarContinuous-v0", correlation, num_envs=16, num_steps=999,
                              policy_maker=make_sac_policy)
        reached[correlation] = int(np.asarray(traj.reward > 0).any(axis=0).sum())  # the flag pays +100
    assert reached[0.0] == 0 and reached[0.99] >= 2, reached


def test_a_discrete_action_refuses_correlated_noise():
    with pytest.raises(ValueError, match=r"action_noise_correlation=0.5 .* discrete: use --action-noise-correlation 0"):
        rollout_of("CartPole-v1", 0.5, num_envs=2, num_steps=2)


@pytest.mark.parametrize("fields, message", [
    (dict(action_noise_correlation=1.0), r"action_noise_correlation=1.0 is invalid: must be in \[0, 1\)"),
    (dict(action_noise_correlation=-0.1), r"action_noise_correlation=-0.1 is invalid: must be in \[0, 1\)"),
])
def test_bad_correlations_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)


def test_resume_continues_the_noise_exactly(tmp_path):
    def config(run_dir):
        return TrainConfig(env="Pendulum-v1", num_envs=4, num_steps=16, total_timesteps=8 * 64,
                           iterations_per_call=2, eval_interval=4, eval_episodes=2, action_noise_correlation=0.9,
                           run_dir=str(run_dir), network=SMALL_NET)

    full = train(config(tmp_path / "full"), console=False)
    stopped = config(tmp_path / "resumed")
    train(stopped, console=False, stop_after_updates=4)
    resumed = train(stopped, console=False, resume=True)
    assert np.asarray(resumed.state.rollout.noise).shape == (1, 4, 1)
    for got, want in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(full.state)):
        np.testing.assert_array_equal(got, want)


def test_several_host_actors_carry_their_share_of_the_noise(tmp_path):
    cfg = TrainConfig(env="gymnasium:Pendulum-v1", mode="async", num_envs=4, num_actors=2, num_steps=8,
                      total_timesteps=64, eval_episodes=1, action_noise_correlation=0.9, network=SMALL_NET,
                      run_dir=str(tmp_path / "run"))
    noise = np.asarray(train(cfg, console=False).state.rollout.noise)
    assert noise.shape == (1, 4, 1) and np.all(noise != 0.0)  # every env's noise joined back, none lost
