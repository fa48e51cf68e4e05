"""Host environments (`--env gymnasium:<id>`): the SAME_STEP vector env against a hand-made env whose
episode ends are known, the host actor's trajectory step by step, determinism, resume, errors, CLI."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import threading

import gymnasium as gym
import jax
import numpy as np
import pytest

from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.trainer.asynchronous.loop import RolloutFailed
from jaxrl_async.core.advantages import gae_inputs
from jaxrl_async.cli.main import main
from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async.config import NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.envs.host.gymnasium import make_host_env
from jaxrl_async.envs.host.observations import OneHotBox, PixelBox, policy_input, policy_space
from jaxrl_async.envs.spaces import as_observation, from_gymnasium, observation_shapes
from jaxrl_async.envs.host.cores import on_core
from jaxrl_async.nets.actor_critic import reset_carry
from jaxrl_async.trainer.training import train
from jaxrl_async.trainer.run import Run
# tests/host_envs_helpers.py
from host_envs_helpers import FAILING_ID, NESTED_ID, SCRIPTED_ID, TEXT_ID, ScriptedEnv, host_fragments, register

register()
SCRIPTED = "gymnasium:" + SCRIPTED_ID


def test_spaces_map_to_gymnax_spaces():
    spec = make_host_env(SCRIPTED)
    assert spec.observation_space.shape == (2,)
    assert spec.action_space.n == 2
    assert spec.max_episode_steps == 4


def test_images_reach_the_policy_in_the_unit_range_channels_last_and_ids_one_hot():
    from gymnasium import spaces as gym_spaces

    frames = policy_space(from_gymnasium(gym_spaces.Box(0, 255, (4, 84, 84), np.uint8)))  # EnvPool's Atari
    screen = policy_space(from_gymnasium(gym_spaces.Box(0, 255, (210, 160, 3), np.uint8)))
    assert isinstance(frames, PixelBox) and frames.channels_first and frames.shape == (84, 84, 4)
    assert isinstance(screen, PixelBox) and not screen.channels_first and screen.shape == (210, 160, 3)
    assert (frames.low, frames.high, frames.dtype) == (0.0, 1.0, np.float32)
    for kept in (gym_spaces.Box(0, 10, (5, 5, 3), np.uint8), gym_spaces.Box(0, 255, (84, 84), np.uint8),
                 gym_spaces.Box(0.0, 255.0, (3, 8, 8), np.float32)):  # ids; one channel; floats
        assert type(policy_space(from_gymnasium(kept))) is type(from_gymnasium(kept))
    assert policy_input(policy_space(from_gymnasium(gym_spaces.Box(-1.0, 1.0, (3,))))) is None
    space = policy_space(from_gymnasium(gym_spaces.Dict({
        "frames": gym_spaces.Box(0, 255, (2, 9, 7), np.uint8), "screen": gym_spaces.Box(0, 255, (9, 7, 2), np.uint8),
        "card": gym_spaces.Discrete(5), "pos": gym_spaces.Box(-1.0, 1.0, (3,))})))
    assert isinstance(space.spaces["card"], OneHotBox) and space.spaces["card"].shape == (5,)
    rng = np.random.default_rng(0)
    raw = {"frames": rng.integers(0, 256, (6, 2, 9, 7)), "screen": rng.integers(0, 256, (6, 9, 7, 2)),
           "card": np.array([0, 4, 2, 2, 1, 3]), "pos": rng.normal(size=(6, 3))}
    obs = policy_input(space)(as_observation(observation_shapes(space), raw, np))
    np.testing.assert_allclose(obs["frames"], np.transpose(raw["frames"], (0, 2, 3, 1)) / 255, rtol=1e-6)
    np.testing.assert_allclose(obs["screen"], raw["screen"] / 255, rtol=1e-6)
    np.testing.assert_array_equal(obs["card"], np.eye(5)[raw["card"]])
    np.testing.assert_array_equal(obs["pos"], raw["pos"].astype(np.float32))
    assert all(x.dtype == np.float32 for x in obs.values()) and obs["frames"].shape == (6, 9, 7, 2)


def test_a_discrete_observation_steps_one_hot():
    # FrozenLake's state is one id of 16: as a number, its size would mean something to the MLP
    spec = make_host_env("gymnasium:FrozenLake-v1", is_slippery=False)
    assert spec.observation_space.shape == (16,)
    envs = spec.make_vec(2)
    np.testing.assert_array_equal(envs.reset([0, 1]), np.eye(16)[[0, 0]])
    step = envs.step(np.array([2, 1]))  # right (to state 1), down (to state 4)
    np.testing.assert_array_equal(step.obs, np.eye(16, dtype=np.float32)[[1, 4]])
    envs.close()


def test_the_spec_takes_the_time_limit_the_env_kwargs_give():
    """The evaluator plays episodes up to the spec's limit: the one the envs run with."""
    spec = make_host_env(SCRIPTED, max_episode_steps=6)
    assert spec.max_episode_steps == 6
    envs = spec.make_vec(1)
    envs.reset([1])  # an odd seed's episode runs on until the time limit
    assert [bool(envs.step(np.array([0])).truncated[0]) for _ in range(6)] == [False] * 5 + [True]


def test_vector_env_keeps_terminations_truncations_and_the_pre_reset_obs_apart():
    """env 0 (seed 0) terminates at t=3, env 1 (seed 1) is truncated at t=4; the step that ends an
    episode returns the reset obs and the final one apart, and the next step is a real one (no
    NEXT_STEP dummy transition with reward 0)."""
    envs = make_host_env(SCRIPTED).make_vec(2)
    np.testing.assert_array_equal(envs.reset([0, 1]), [[0, 0], [0, 1]])
    # per step: env 0's t after the step, env 1's
    t0, t1 = [1, 2, 3, 1, 2, 3], [1, 2, 3, 4, 1, 2]
    for k in range(6):
        step = envs.step(np.array([0, 1]))
        term = np.array([t0[k] == 3, False])
        trunc = np.array([False, t1[k] == 4])
        np.testing.assert_array_equal(step.terminated, term)
        np.testing.assert_array_equal(step.truncated, trunc)
        np.testing.assert_array_equal(step.reward, [t0[k], t1[k] + 0.5])
        np.testing.assert_array_equal(step.final_obs, [[t0[k], 0], [t1[k], 1]])
        np.testing.assert_array_equal(step.obs, [[0 if term[0] else t0[k], 0], [0 if trunc[1] else t1[k], 1]])
        np.testing.assert_array_equal(step.episode_done, term | trunc)
        if term[0]:
            assert (step.episode_return[0], step.episode_length[0]) == (6.0, 3)
        if trunc[1]:
            assert (step.episode_return[1], step.episode_length[1]) == (1 + 2 + 3 + 4 + 4 * 0.5, 4)
    envs.close()


def test_tally_gives_each_steps_episode_statistics_as_float64_sums_step_by_step():
    """`tally` over a fragment's [T, B] steps (a host actor's way, after its loop) against a NumPy
    float64 running sum taken step by step: the same float32 returns to the bit, lengths, a restart
    after every episode end, and the running sums carried from one fragment to the next."""
    T, B = 60, 3
    rng = np.random.default_rng(0)
    reward = (rng.normal(size=(2 * T, B)) * 100).astype(np.float32)
    done = rng.random((2 * T, B)) < 0.1
    envs = make_host_env(SCRIPTED).make_vec(B)
    envs.reset([0, 1, 2])
    fragments = [envs.tally(reward[i:i + T], done[i:i + T]) for i in (0, T)]
    returns, lengths = (np.concatenate(parts) for parts in zip(*fragments))
    assert returns.dtype == np.float32 and lengths.dtype == np.int32
    total, n = np.zeros(B), np.zeros(B, np.int32)
    for t in range(2 * T):
        total += reward[t]
        n += 1
        np.testing.assert_array_equal(returns[t], total.astype(np.float32))
        np.testing.assert_array_equal(lengths[t], n)
        total[done[t]], n[done[t]] = 0.0, 0
    assert done.any(axis=0).all() and not done[-1].all()  # every env restarts, some run on at the end
    envs.close()


def test_vector_env_steps_as_gymnasiums_own_same_step_vector_env():
    """Our loop over the envs gives gymnasium's SyncVectorEnv (autoreset SAME_STEP) bit for bit:
    CartPole-v1 x 3, 400 random steps through many terminations (time limits: the scripted env's
    test above)."""
    import gymnasium as gym

    ours = make_host_env("gymnasium:CartPole-v1").make_vec(3)
    theirs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync",
                          vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    seeds = [5, 6, 7]
    np.testing.assert_array_equal(ours.reset(seeds), theirs.reset(seed=seeds)[0])
    actions = np.random.default_rng(0).integers(0, 2, (400, 3)).astype(np.int32)
    ended = 0
    for a in actions:
        step = ours.step(a)
        obs, reward, terminated, truncated, info = theirs.step(a)
        final = obs.copy()
        for i in np.flatnonzero(info.get("_final_obs", np.zeros(3, bool))):
            final[i] = info["final_obs"][i]
        np.testing.assert_array_equal(step.obs, obs)
        np.testing.assert_array_equal(step.final_obs, final)
        np.testing.assert_array_equal(step.reward, reward.astype(np.float32))
        np.testing.assert_array_equal(step.terminated, terminated)
        np.testing.assert_array_equal(step.truncated, truncated)
        ended += int((terminated | truncated).sum())
    assert ended >= 20  # the resets were exercised
    ours.close()
    theirs.close()


NESTED = "gymnasium:" + NESTED_ID


def test_nested_observations_and_multidiscrete_actions_keep_the_pre_reset_obs_per_leaf():
    """A Dict / Tuple observation becomes a pytree of float32 [B, ...] arrays in the spaces' own
    structure, and the pre-reset observation of an ended episode is kept in every leaf."""
    spec = make_host_env(NESTED)
    assert spec.action_space.nvec == (2, 3)
    envs = spec.make_vec(2)
    obs = envs.reset([0, 1])
    assert jax.tree.structure(obs) == jax.tree.structure({"pair": (0, 0), "t": 0})
    assert all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(obs))
    t0, t1 = [1, 2, 3, 1], [1, 2, 3, 4]
    for k in range(4):
        step = envs.step(np.array([[1, 2], [0, 1]]))
        np.testing.assert_array_equal(step.reward, [t0[k] + 1.0, t1[k] + 0.25])
        ended = np.array([t0[k] == 3, t1[k] == 4])
        np.testing.assert_array_equal(step.final_obs["t"][:, 0], [t0[k], t1[k]])
        np.testing.assert_array_equal(step.final_obs["pair"][0], np.full((2, 3, 3), [[[t0[k]]], [[t1[k]]]]))
        one_hot = np.eye(4, dtype=np.float32)  # the Discrete(4) leaf reaches the policy one-hot
        np.testing.assert_array_equal(step.final_obs["pair"][1], one_hot[[t0[k] % 4, t1[k] % 4]])
        after = np.where(ended, 0, [t0[k], t1[k]])  # the reset observation where the episode ended
        np.testing.assert_array_equal(step.obs["t"][:, 0], after)
        np.testing.assert_array_equal(step.obs["pair"][0][:, 0, 0], after)
        np.testing.assert_array_equal(step.obs["pair"][1], one_hot[after % 4])
    envs.close()


def test_a_nested_host_env_trains_and_evaluates_end_to_end(tmp_path, capsys):
    """Dict / Tuple observations through the actor, the trajectory, the per-leaf encoders and the
    evaluation (with per-leaf running statistics, frozen there); MultiDiscrete actions through the
    categorical heads."""
    run_dir = str(tmp_path / "nested")
    assert main(["train", "--env", NESTED, "--num-envs", "2", "--num-steps", "8", "--total-timesteps", "32",
                 "--eval-episodes", "2", "--hidden-sizes", "16", "--normalize-obs", "--run-dir", run_dir]) == 0
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["num_updates"] == 2 and summary["final_eval_episodes"] == 2
    # an episode's return: 1+2+3 (terminated) or 1+2+3+4 (truncated), plus up to 0.5 + 0.5 a step
    assert all(6.0 <= r <= 10.0 + 4 * 1.0 for r in summary["final_eval_return"])
    stats = ckpt.load(ckpt.latest_checkpoint(run_dir))["state"]["rollout"]["obs_stats"]
    assert stats["count"][0] == 2 * 8 * 2 and set(stats["mean"]) == {"t", "pair"}


@pytest.fixture(scope="module")
def scripted_fragment():
    """One 6-step fragment of 2 scripted envs (seeds 0, 1) by the host actor, with its components."""
    cfg = TrainConfig(env=SCRIPTED, mode="async", num_envs=2, num_steps=6, total_timesteps=12)
    c = build(cfg)
    state = initial_states(c)
    device = jax.devices()[0]
    actor = c.rollout.actor([0, 1], device, jax.sharding.SingleDeviceSharding(device))
    actor.warm_up(state.learner.params, state.rollout)
    new_state, trajectory = actor.collect(state.learner.params, state.rollout)
    actor.close()
    return c, state, new_state, jax.tree.map(lambda x: np.asarray(x[0]), trajectory)


def test_host_actor_records_the_fragment_step_by_step(scripted_fragment):
    _, _, new_state, tr = scripted_fragment
    t0, t1 = np.array([1, 2, 3, 1, 2, 3]), np.array([1, 2, 3, 4, 1, 2])
    np.testing.assert_array_equal(tr.obs[:, :, 0], np.stack([[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 0, 1]], 1))
    np.testing.assert_array_equal(tr.obs[:, :, 1], np.stack([np.zeros(6), np.ones(6)], 1))
    np.testing.assert_array_equal(tr.next_obs[:, :, 0], np.stack([t0, t1], 1))  # pre-reset at the ends
    np.testing.assert_array_equal(tr.terminated, np.stack([t0 == 3, np.zeros(6, bool)], 1))
    np.testing.assert_array_equal(tr.truncated, np.stack([np.zeros(6, bool), t1 == 4], 1))
    np.testing.assert_array_equal(tr.reward, np.stack([t0, t1], 1) + 0.5 * tr.action)
    np.testing.assert_array_equal(tr.reset, np.stack([[1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 1, 0]], 1).astype(bool))
    np.testing.assert_array_equal(tr.episode_done, tr.terminated | tr.truncated)
    ends = tr.episode_done
    np.testing.assert_array_equal(tr.episode_length[ends], [3, 4, 3])  # time-major: (2,0) (3,1) (5,0)
    # the carried state: the envs' current obs (env 0 just reset, env 1 at t=2)
    np.testing.assert_array_equal(np.asarray(new_state.obs[0]), [[0, 0], [2, 1]])
    np.testing.assert_array_equal(np.asarray(new_state.reset[0]), [True, False])


def test_host_actor_draws_each_steps_randomness_from_that_steps_key(scripted_fragment):
    """The actor draws a fragment's randomness in one call before it (`fragment_draws`); step t's
    action is still the one the policy samples with the fragment's key t + 1, as if drawn in step t's
    own act call, and the next state carries key 0."""
    c, state, new_state, tr = scripted_fragment
    r = c.rollout
    params = r.unbatch(state.learner.params)
    keys = jax.random.split(state.rollout.key[0], r.num_steps + 1)
    carry = r.policy.initial_carry((r.num_envs,))
    expected = [np.asarray(r.act(params, tr.obs[t], carry, tr.reset[t], keys[t + 1])[0]) for t in range(r.num_steps)]
    np.testing.assert_array_equal(tr.action, np.stack(expected))
    assert len(np.unique(tr.action)) > 1  # sampled, not one action throughout
    np.testing.assert_array_equal(new_state.key[0], keys[0])


def test_host_actor_values_the_truncation_from_the_final_obs_and_runs_gae(scripted_fragment):
    c, state, _, tr = scripted_fragment
    params = jax.tree.map(lambda x: x[0], state.learner.params)
    value = np.asarray(c.policy.value_step(params, tr.next_obs, ()))
    # V(final obs) at the truncation, V(next obs) where the episode went on, 0 after the termination
    assert np.any(tr.terminated) and np.any(tr.truncated)
    np.testing.assert_allclose(tr.bootstrap_value, np.where(tr.terminated, 0.0, value), rtol=1e-6)
    np.testing.assert_allclose(tr.value, np.asarray(c.policy.value_step(params, tr.obs, ())), rtol=1e-6)
    # NumPy reference GAE: discount 0 at terminations, lambda 0 at truncations (bootstrap V(final obs))
    cfg = c.cfg.learner
    discount, lam = (np.asarray(x) for x in gae_inputs(tr.reward, tr.terminated, tr.truncated, cfg.gamma,
                                                       cfg.gae_lambda))
    advantage, next_adv = np.zeros_like(tr.reward), np.zeros(2, np.float32)
    for t in reversed(range(6)):
        delta = tr.reward[t] + discount[t] * tr.bootstrap_value[t] - tr.value[t]
        next_adv = delta + discount[t] * lam[t] * next_adv
        advantage[t] = next_adv
    np.testing.assert_allclose(tr.advantage, advantage, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tr.target, advantage + tr.value, rtol=1e-5, atol=1e-5)


def _two_fragments(normalize_obs: bool):
    """Two 6-step fragments of 2 scripted envs (seeds 0, 1): the trajectories, [2, T, B] each leaf,
    and the carried statistics."""
    fragments, rollout = host_fragments(TrainConfig(env=SCRIPTED, mode="async", num_envs=2, num_steps=6,
                                                    total_timesteps=24, normalize_obs=normalize_obs))
    return jax.tree.map(lambda *xs: np.stack(xs), *fragments), rollout.obs_stats


def test_normalize_obs_on_a_host_env_matches_a_numpy_reference():
    """`--normalize-obs` on a host env: the statistics take in each observation once (also across
    fragments), the policy and the record see `obs` normalised by the statistics that include it,
    and `next_obs` (the pre-reset obs) by those that include the observation after it — the jitted
    rollout's order. The scripted env's observations do not depend on the actions, so a run without
    normalisation gives the raw observations."""
    raw, _ = _two_fragments(normalize_obs=False)
    normalised, stats = _two_fragments(normalize_obs=True)
    T = raw.obs.shape[1]
    seen = np.concatenate([raw.obs.reshape(2 * T, 2, 2), _next_obs_after(raw)[None]])  # [2T + 1, B, 2]

    def normalise(x, upto):  # by the population statistics of every observation seen up to step `upto`
        data = seen[:upto + 1].reshape(-1, 2)
        return np.clip((x - data.mean(0)) / np.sqrt(data.var(0) + 1e-8), -10, 10)

    for k in range(2 * T):
        f, t = divmod(k, T)
        np.testing.assert_allclose(normalised.obs[f, t], normalise(seen[k], k), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(normalised.next_obs[f, t], normalise(raw.next_obs[f, t], k + 1),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats.mean, seen[:2 * T].reshape(-1, 2).mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.var, seen[:2 * T].reshape(-1, 2).var(0), rtol=1e-5, atol=1e-6)


def _fragments(env_groups: int, steps: int = 3) -> tuple:
    """Three 6-step fragments of 4 nested envs (seeds 0-3) by a GRU policy's host actor, the envs in
    `env_groups` groups: (the components, the params, each fragment's trajectory and carried state,
    on the host)."""
    c = build(TrainConfig(env="gymnasium:" + NESTED_ID, mode="async", num_envs=4, num_steps=6, total_timesteps=48,
                          env_groups=env_groups, network=NetworkConfig(hidden_sizes=(16,), core="gru", core_size=8)))
    assert c.rollout.env_groups == env_groups
    state = initial_states(c)
    device = jax.devices()[0]
    actor = c.rollout.actor([0, 1, 2, 3], device, jax.sharding.SingleDeviceSharding(device))
    actor.warm_up(state.learner.params, state.rollout)
    rollout, fragments = state.rollout, []
    for _ in range(steps):
        rollout, trajectory = actor.collect(state.learner.params, rollout)
        fragments.append(jax.tree.map(np.asarray, (trajectory, rollout)))
    actor.close()
    return c, jax.tree.map(lambda x: x[0], state.learner.params), fragments


@pytest.fixture(scope="module")
def one_group():
    return _fragments(env_groups=1)


def test_env_groups_record_what_one_group_records(one_group):
    """Two env groups, each a vector env of its own stepped in turn, record the trajectory and carry
    the state (observations, recurrent carry, reset flags, key) one vector env of all the envs does,
    fragment after fragment (nested observations and a GRU's carry joined by env): the same
    episodes, actions and flags; the network's outputs to float rounding, as each group's act call
    computes them over its 2 envs' rows rather than 4 (XLA's CPU kernels may round a matmul of
    another row count differently: docs/host_envs.md, "Env groups")."""
    one, two = one_group[2], _fragments(env_groups=2)[2]
    for a, b in zip(one, two):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            if x.dtype.kind == "f":
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
            else:  # actions, flags, counts, keys
                np.testing.assert_array_equal(x, y)
    trajectory = one[0][0]
    assert trajectory.episode_done.any() and len(np.unique(trajectory.action)) > 1  # episode ends; sampled actions


def test_a_recurrent_host_fragment_records_each_steps_value_and_log_prob(one_group):
    """The actor's act calls compute the action and its log-probability; the critic values the
    fragment's observations at its end, in one call (`HostRollout.finish`). Both as the policy gives
    them step by step from the fragment's first carry, reset at each episode's start."""
    c, params, fragments = one_group
    policy = c.policy
    for trajectory, _ in fragments:
        carry = trajectory.initial_carry[0]
        for t in range(trajectory.reward.shape[1]):
            obs = jax.tree.map(lambda x: x[0, t], trajectory.obs)
            dist, value, carry = policy.step(params, obs, reset_carry(policy, carry, trajectory.reset[0, t]))
            np.testing.assert_allclose(trajectory.value[0, t], value, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(trajectory.log_prob[0, t], dist.log_prob(trajectory.action[0, t]),
                                       rtol=1e-5, atol=1e-6)
    assert fragments[0][0].reset[0, 1:].any()  # an episode starts inside a fragment: its carry resets


def _next_obs_after(raw):
    """The envs' observation after the second fragment: its last next_obs, or the reset one where
    that step ended the episode (t back to 0)."""
    last = raw.next_obs[-1, -1].copy()
    ended = raw.terminated[-1, -1] | raw.truncated[-1, -1]
    last[ended, 0] = 0.0
    return last


def _cfg(tmp_path, name, **overrides):
    fields = dict(env=SCRIPTED, mode="async", num_envs=2, num_steps=8, total_timesteps=2 * 8 * 6, eval_episodes=2,
                  iterations_per_call=2, eval_interval=2, checkpoint_interval=2, run_dir=str(tmp_path / name))
    fields.update(overrides)
    from jaxrl_async.config import LearnerConfig, NetworkConfig

    return TrainConfig(**fields, network=NetworkConfig(hidden_sizes=(16,)),
                       learner=LearnerConfig(update_epochs=1, num_minibatches=2))


@pytest.mark.parametrize("lag", ["0", "1"])
def test_same_seed_gives_identical_params(tmp_path, lag):
    a = train(_cfg(tmp_path, "a", lag=lag), console=False)
    b = train(_cfg(tmp_path, "b", lag=lag), console=False)
    assert a.summary["params_digest"] == b.summary["params_digest"]
    assert a.summary["policy_lag_max"] == int(lag)
    for key in ("env_s", "inference_s", "transfer_s", "update_s", "samples_per_update"):
        assert key in json.loads(open(os.path.join(a.run_dir, "metrics.jsonl")).readline())
    assert a.summary["final_eval_episodes"] == 2
    c = train(_cfg(tmp_path, "c", lag=lag, seed=1), console=False)
    assert c.summary["params_digest"] != a.summary["params_digest"]


def test_resume_continues_the_learner_and_counters_with_fresh_episodes(tmp_path):
    cfg = _cfg(tmp_path, "r")
    stopped = train(cfg, console=False, stop_after_updates=2)
    assert not stopped.completed and stopped.summary["updates_done"] == 2
    saved = ckpt.load(ckpt.latest_checkpoint(cfg.run_dir))
    assert int(saved["counters"]["updates"]) == 2
    resumed = train(cfg, console=False, resume=True)
    assert resumed.completed and resumed.summary["num_updates"] == cfg.num_updates
    lines = [json.loads(line) for line in open(os.path.join(cfg.run_dir, "metrics.jsonl"))]
    assert [line["iteration"] for line in lines] == [2, 4, 6]
    # the resumed run's first fragment starts new episodes: its first recorded step is a reset
    # (episode statistics restart), so the run differs from one that never stopped
    whole = train(_cfg(tmp_path, "w"), console=False)
    assert whole.summary["params_digest"] != resumed.summary["params_digest"]


def test_an_error_between_the_compile_and_the_loop_still_closes_the_actors_envs(tmp_path, monkeypatch):
    """The actor's envs are open from the compile on: an error before its loop starts (here in
    the evaluation's hand-off, `Run.loop_compiled`) closes them too, as an error in the loop does."""
    made, closed = [], []
    monkeypatch.setattr(ScriptedEnv, "__init__", lambda self: made.append(self), raising=False)
    monkeypatch.setattr(ScriptedEnv, "close", lambda self: closed.append(self), raising=False)

    def fail(self, state):
        raise RuntimeError("failed after the compile")

    monkeypatch.setattr(Run, "loop_compiled", fail)
    with pytest.raises(RuntimeError, match="failed after the compile"):
        train(_cfg(tmp_path, "fails_after_compile"), console=False)
    assert len(made) > 2 and sorted(map(id, closed)) == sorted(map(id, made))  # the actor's 2, and the spec's


def test_an_env_failing_mid_run_stops_it_as_a_failed_rollout(tmp_path):
    """A ValueError from a simulator's step is no bad input: the run raises RolloutFailed (a
    RuntimeError: the CLI's exit 1 with the traceback, not the one line and exit 2 of a bad flag),
    with the env's error as its cause; no actor thread is left."""
    with pytest.raises(RolloutFailed, match=r"a rollout failed in the actor thread: ValueError: the simulator "
                                            r"failed at step 12") as info:
        train(_cfg(tmp_path, "fails", env="gymnasium:" + FAILING_ID), console=False)
    assert not isinstance(info.value, ValueError) and isinstance(info.value.__cause__, ValueError)
    assert not [t for t in threading.enumerate() if t.name == "rollout-worker"]


class _FailsInFlightAtTheStop(ScriptedEnv):
    """Fails in the actor's first step after the learner took its second rollout (the last before a
    stop at update 2): the rollout in flight at the stop's sync, whose error no later `get` raises."""

    consumed = threading.Event()  # the learner took rollout 1
    raised = threading.Event()

    def step(self, action):
        if threading.current_thread().name == "rollout-worker" and self.consumed.is_set():
            self.raised.set()
            raise ValueError("the simulator failed as the run stopped")
        return super().step(action)


def test_an_env_failing_in_the_rollout_in_flight_at_a_stop_fails_the_run(tmp_path, monkeypatch):
    """Before, the stop's sync waited for the failing rollout, stopped, and the run returned as if
    stopped cleanly: the actor's error was never raised."""
    from jaxrl_async.trainer.asynchronous.pipeline import RolloutWorker

    env_id = "JaxrlTest/FailsInFlightAtTheStop-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_FailsInFlightAtTheStop, max_episode_steps=4)
    get, held, taken = RolloutWorker.get, RolloutWorker.held, []

    def counted_get(self, *args, **kwargs):
        item = get(self, *args, **kwargs)
        taken.append(item.index)
        if len(taken) == 2:
            _FailsInFlightAtTheStop.consumed.set()
        return item

    @contextlib.contextmanager
    def held_once_the_actor_failed(self):
        assert _FailsInFlightAtTheStop.raised.wait(60), "the actor's next rollout never stepped"
        with held(self):
            yield

    monkeypatch.setattr(RolloutWorker, "get", counted_get)
    monkeypatch.setattr(RolloutWorker, "held", held_once_the_actor_failed)
    with pytest.raises(RolloutFailed, match=r"as the run stopped \(its checkpoint is written\): ValueError: "
                                            r"the simulator failed as the run stopped"):
        train(_cfg(tmp_path, "stops", env="gymnasium:" + env_id, lag="1"), console=False, stop_after_updates=2)
    assert taken == [0, 1]
    assert ckpt.latest_checkpoint(str(tmp_path / "stops")) == ckpt.numbered_path(str(tmp_path / "stops"), 2)
    assert not [t for t in threading.enumerate() if t.name == "rollout-worker"]


@pytest.mark.parametrize("env, message", [
    ("gymnasium:CartPol-v1", "did you mean 'gymnasium:CartPole-v1'"),
    ("gymnasium:" + TEXT_ID, "its observation space: gymnasium space Text"),
    ("gymnasium:", "write gymnasium:<id> or envpool:<id>"),
])
def test_clear_errors(env, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        build(TrainConfig(env=env, mode="async"))


@pytest.mark.parametrize("overrides, field", [
    (dict(mode="fused"), "mode='fused'"), (dict(mode="async", num_seeds=2), "num_seeds=2"),
    (dict(mode="async", normalize_obs=True, num_envs=4, num_actors=2), "normalize_obs=True"),
    (dict(mode="async", normalize_obs=True, num_envs=4, env_groups=2), "normalize_obs=True"),
    (dict(mode="async", num_envs=8, num_actors=2, env_groups=3), "env_groups=3 is invalid: must divide each actor's 4"),
    (dict(mode="async", env_groups=0), "env_groups=0"),
    (dict(env="CartPole-v1", env_groups=2), "env_groups=2"),
])
def test_config_refuses_what_host_envs_cannot_do(overrides, field):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{"env": "gymnasium:CartPole-v1", **overrides})


def test_cli_trains_a_host_env_with_no_other_flag_and_refuses_fused(tmp_path, capsys):
    run_dir = str(tmp_path / "cli")
    assert main(["train", "--env", SCRIPTED, "--num-envs", "2", "--num-steps", "8", "--total-timesteps", "32",
                 "--eval-episodes", "2", "--hidden-sizes", "16", "--run-dir", run_dir]) == 0
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["mode"] == "async" and summary["env_id"] == SCRIPTED
    # `jaxrl-async eval` on host envs: a scripted episode's return is 1+2+3 (terminated at t=3) or
    # 1+2+3+4 (truncated at t=4) plus 0.5 per action 1: whatever the policy, between 6 and 12
    capsys.readouterr()
    assert main(["eval", run_dir, "--episodes", "3", "--checkpoint", "latest"]) == 0
    out = capsys.readouterr().out
    assert "(3 episodes)" in out
    assert 6.0 <= float(out.split("mean return over seeds:")[1]) <= 12.0
    assert main(["train", "--env", SCRIPTED, "--mode", "fused"]) == 2
    assert "use --mode async" in capsys.readouterr().err


def test_host_envs_experiment_smoke(tmp_path, capsys):
    from experiments.host_envs import main as experiment

    results = experiment(["overlap", "--repeats", "1", "--total-timesteps", "1024", "--busy-us", "1",
                          "--update-epochs", "1", "--run-dir", str(tmp_path)])
    assert set(results) == {"lag 0 (lock step)", "lag 1"}
    assert "overlap efficiency" in capsys.readouterr().out
    assert os.path.exists(tmp_path / "overlap.json")


def test_ctrl_c_stops_a_host_env_run_at_a_sync_with_a_checkpoint(tmp_path, capsys):
    import signal
    import threading
    import time

    cfg = _cfg(tmp_path, "sigint", total_timesteps=2 * 8 * 400, eval_interval=0, checkpoint_interval=0)
    metrics = os.path.join(cfg.run_dir, "metrics.jsonl")

    def interrupt_once_logging():  # once the loop (and its SIGINT handler) runs
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if os.path.exists(metrics) and os.path.getsize(metrics) > 0:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=interrupt_once_logging, daemon=True)
    watcher.start()
    result = train(cfg, console=False)
    watcher.join()
    assert "interrupt: finishing the current step" in capsys.readouterr().out
    assert not result.completed and result.summary["updates_done"] < cfg.num_updates
    assert ckpt.load(result.summary["checkpoint"])["counters"]["updates"] == result.summary["updates_done"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no thread affinity on this system")
def test_on_core_runs_a_block_on_one_core_then_where_it_ran():
    """Inside the block the thread and a thread it starts run on the core alone; after it, and with
    None or a core the system refuses, the thread runs where it did; other threads are untouched."""
    cores = set(os.sched_getaffinity(0))
    core = min(cores)

    def body():
        with on_core(core), concurrent.futures.ThreadPoolExecutor(1) as child:
            inside = os.sched_getaffinity(0), child.submit(os.sched_getaffinity, 0).result()
        with on_core(None):
            untouched = os.sched_getaffinity(0)
        with on_core(max(cores) + 4096):  # no such core: refused, run where it is
            refused = os.sched_getaffinity(0)
        return inside, untouched, refused, os.sched_getaffinity(0)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        inside, untouched, refused, after = pool.submit(body).result()
    assert inside == ({core}, {core})
    assert untouched == refused == after == cores and os.sched_getaffinity(0) == cores
