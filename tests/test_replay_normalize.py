"""`--normalize-obs` with a replay learner (dqn, sac, td3): the rollouts record the env's own
observations and hand their statistics over with the trajectory (`Trajectory.obs_stats`); the
buffer stores them as they are, and each update normalises what it samples by the newest
statistics (`replay.learner.normalized_batch`), as Brax's SAC does. The policy acts as it does
for the on-policy learners, on observations normalised by the statistics that include them."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from jaxrl_async import TrainConfig
from jaxrl_async.config import NetworkConfig
from jaxrl_async.envs import make_env
from jaxrl_async.envs.normalize import RunningMeanStd
from jaxrl_async.nets.actor_critic import make_policy
from jaxrl_async.rollout.device import make_rollout
from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async.trainer.training import train
from host_envs_helpers import SCRIPTED_ID, host_fragments, register  # tests/host_envs_helpers.py

# the rollouts compared op for op: full float32 matmuls on any backend (conftest.py)
pytestmark = pytest.mark.float32_matmuls

register()


def _normalise(x, seen):
    """x normalised by the population statistics of the observations `seen` (NumPy, float64)."""
    data = np.concatenate(seen).astype(np.float64)
    return np.clip((x - data.mean(0)) / np.sqrt(data.var(0) + 1e-8), -10.0, 10.0)


def test_a_replay_rollout_records_the_envs_observations_and_hands_over_its_statistics():
    env, env_params = make_env("CartPole-v1")
    policy = make_policy(NetworkConfig(hidden_sizes=(16,)), env.observation_space(env_params).shape,
                         env.action_space(env_params))
    params, key = policy.init(jax.random.PRNGKey(1)), jax.random.PRNGKey(2)
    runs = {}
    for raw in (False, True):
        rollout = make_rollout(env, env_params, policy, num_envs=4, num_steps=64, gamma=0.9, gae_lambda=0.8,
                               normalize_obs=True, record_raw_obs=raw)
        state = rollout.init(key)
        runs[raw] = (state, *jax.jit(rollout.collect)(params, state))
    (start, _, normalised), (_, end, recorded) = runs[False], runs[True]
    assert normalised.obs_stats == ()  # an on-policy learner's trajectory: what the policy saw
    assert np.any(np.asarray(recorded.terminated))  # the case says something only if an episode ends in it
    # the policy acted alike: it saw the same normalised observations
    for name in ("action", "log_prob", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(recorded, name), getattr(normalised, name), err_msg=name)
    # the values (which no replay learner reads) of the recorded observations, by the fragment's statistics
    np.testing.assert_allclose(recorded.value, policy.value_step(params, end.obs_stats.normalize(recorded.obs), ()),
                               rtol=1e-5, atol=1e-6)
    obs, next_obs = np.asarray(recorded.obs), np.asarray(recorded.next_obs)
    np.testing.assert_array_equal(obs[0], start.obs)  # the env's own: the reset observations
    assert np.abs(obs).max() > 0.05 and np.abs(obs - np.asarray(normalised.obs)).max() > 0.1
    seen = [obs[t] for t in range(len(obs))] + [np.asarray(end.obs)]  # every observation the statistics took in
    for t in range(len(obs)):  # the normalised run's record, from the raw one by NumPy
        np.testing.assert_allclose(normalised.obs[t], _normalise(obs[t], seen[:t + 1]), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(normalised.next_obs[t], _normalise(next_obs[t], seen[:t + 2]),
                                   rtol=1e-5, atol=1e-5)
    # the statistics handed over are the rollout's after the fragment: those of every observation seen
    jax.tree.map(np.testing.assert_array_equal, recorded.obs_stats, end.obs_stats)
    np.testing.assert_allclose(recorded.obs_stats.mean, np.concatenate(seen).mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(recorded.obs_stats.var, np.concatenate(seen).var(0), rtol=1e-5, atol=1e-6)
    assert float(recorded.obs_stats.count) == 4 * 65


def _distance(a, b) -> float:
    """The largest difference between two params trees' float leaves."""
    return max(float(np.abs(x - y).max()) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
               if np.issubdtype(np.asarray(x).dtype, np.floating))


@pytest.mark.parametrize("algo, env", [("sac", "Pendulum-v1"), ("td3", "Pendulum-v1"), ("dqn", "CartPole-v1")])
def test_a_replay_update_normalises_what_it_samples_by_the_fragments_statistics(algo, env):
    """One update on a fragment of raw observations and its statistics gives the update on the
    same fragment normalised beforehand by those statistics (without them), to float rounding
    (XLA fuses the normalisation into other ops): the sampled cells are the same, the networks
    see the same inputs, `obs` and the bootstrap's."""
    cfg = TrainConfig(env=env, algo=algo, num_envs=4, num_steps=16, total_timesteps=4 * 16 * 4, normalize_obs=True,
                      network=NetworkConfig(hidden_sizes=(16,))).with_fields(
        replay_capacity=256, learning_starts=64, replay_ratio=2, replay_batch_size=16, n_step=2)
    c = build(cfg)
    state = jax.tree.map(lambda x: x[0], initial_states(c))  # one seed
    rollout_state, trajectory = jax.jit(c.rollout.collect)(state.learner.params, state.rollout)
    stats = trajectory.obs_stats
    assert isinstance(stats, RunningMeanStd) and float(stats.count) == 4 * 17
    beforehand = dataclasses.replace(trajectory, obs=stats.normalize(trajectory.obs),
                                     next_obs=stats.normalize(trajectory.next_obs), obs_stats=())
    update = jax.jit(c.algo.update)
    learner, metrics = update(state.learner, trajectory)
    expected, expected_metrics = update(state.learner, beforehand)
    assert float(metrics["gradient_steps"]) == 2  # the update learned
    # the buffer holds the env's own observations
    np.testing.assert_array_equal(learner.extra.buffer.storage["obs"][:16], trajectory.obs)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)  # noqa: E731
    jax.tree.map(close, (learner.params, learner.extra.nets), (expected.params, expected.extra.nets))
    close(metrics["loss"], expected_metrics["loss"])
    # and the statistics matter: the update on the raw fragment without them learns otherwise
    unnormalised, _ = update(state.learner, dataclasses.replace(trajectory, obs_stats=()))
    rounding = _distance(learner.params, expected.params)
    assert _distance(unnormalised.params, learner.params) > max(100 * rounding, 1e-6)


def _host_fragments(normalize_obs: bool):
    """Two 6-step fragments of 2 scripted envs (seeds 0, 1) by DQN's host actor: the trajectories
    and the state after them."""
    return host_fragments(TrainConfig(env="gymnasium:" + SCRIPTED_ID, algo="dqn", mode="async", num_envs=2,
                                      num_steps=6, total_timesteps=24, normalize_obs=normalize_obs).with_fields(
        replay_capacity=64, learning_starts=12, replay_batch_size=4))


def test_a_host_replay_rollout_records_the_envs_observations_and_hands_over_its_statistics():
    """The scripted env's observations do not depend on the actions, so a run without
    normalisation records the same ones; the statistics handed over with each fragment are the
    actor's after it (the second's, the state's it returns)."""
    plain, _ = _host_fragments(normalize_obs=False)
    recorded, state = _host_fragments(normalize_obs=True)
    for without, raw in zip(plain, recorded):
        assert without.obs_stats == ()
        np.testing.assert_array_equal(raw.obs, without.obs)
        np.testing.assert_array_equal(raw.next_obs, without.next_obs)
    assert np.any(recorded[0].terminated) and np.any(recorded[0].truncated)
    assert float(recorded[0].obs_stats.count) == 2 * 6 and float(recorded[1].obs_stats.count) == 2 * 12
    jax.tree.map(np.testing.assert_array_equal, recorded[1].obs_stats, state.obs_stats)
    seen = np.concatenate([plain[0].obs, plain[1].obs]).reshape(-1, 2)
    np.testing.assert_allclose(recorded[1].obs_stats.mean, seen.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(recorded[1].obs_stats.var, seen.var(0), rtol=1e-5, atol=1e-6)


def test_sac_trains_evaluates_and_resumes_with_normalised_observations(tiny_config):
    """The whole run: the evaluation normalises by the run's statistics, a checkpoint keeps them,
    and a resume from it ends where the run that never stopped does."""
    cfg = tiny_config(env="Pendulum-v1", algo="sac", num_envs=2, num_steps=8, total_timesteps=16 * 12,
                      eval_interval=6, normalize_obs=True).with_fields(
        replay_capacity=512, learning_starts=64, replay_ratio=1, replay_batch_size=16, checkpoint_replay=True)
    straight = train(cfg, console=False)
    assert straight.summary["gradient_steps"] == 12 - 3
    assert float(straight.state.rollout.obs_stats.count[0]) == 2 * (16 * 12 // 2 + 1)
    resumed_cfg = dataclasses.replace(cfg, run_dir=cfg.run_dir + "-resumed")
    train(resumed_cfg, console=False, stop_after_updates=6)
    resumed = train(resumed_cfg, console=False, resume=True)
    assert resumed.summary["params_digest"] == straight.summary["params_digest"]
    assert np.isfinite(resumed.summary["final_eval_return"])
