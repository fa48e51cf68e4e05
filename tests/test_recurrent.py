"""Recurrent policies: the carry is reset at episode starts, replayed exactly by the learners
(IMPALA's included), and gives the memory the memory probe needs."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async import TrainConfig, train
from jaxrl_async.core.advantages import gae_inputs, vtrace
from jaxrl_async.algorithms.impala import make_impala
from jaxrl_async.algorithms.ppo import make_ppo
from jaxrl_async.algorithms.sgd import replay, replay_batch
from jaxrl_async.trainer.build import build, init_state
from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async.nets.actor_critic import reset_carry

# the replayed and the acted carries are compared: full float32 matmuls on any backend (conftest.py)
pytestmark = pytest.mark.float32_matmuls


def memory_config(tmp_path, name, core, algo="ppo", **changes):
    # 50k steps, half the preset's 100k: with seeds 0-7 in one run the GRU reached 1.0 on every
    # seed with each learner at 30k, 50k and 100k alike, the MLP a mean of 0.47-0.53 (AMD EPYC,
    # jax 0.10.2)
    return TrainConfig(env="Probe-Memory", algo=algo, num_envs=16, num_steps=32, total_timesteps=50_000,
                       eval_episodes=64, run_dir=str(tmp_path / name), eval_interval=0,
                       network=NetworkConfig(core=core, core_size=32, hidden_sizes=(32,)),
                       learner=LearnerConfig(num_minibatches=4, learning_rate=3e-3, gamma=0.9,
                                             update_epochs=4 if algo == "ppo" else 1), **changes)


@pytest.fixture(scope="module", params=["gru", "lstm"])
def recurrent(request):
    cfg = TrainConfig(env="CartPole-v1", num_envs=3, num_steps=40, total_timesteps=120,
                      network=NetworkConfig(core=request.param, core_size=8, hidden_sizes=(8,)),
                      learner=LearnerConfig(num_minibatches=1))
    c = build(cfg)
    state = jax.jit(functools.partial(init_state, c))(jax.random.PRNGKey(0))
    # the module's pinned precision covers this module-scoped fixture too (conftest.py)
    assert jax.config.jax_default_matmul_precision == "float32"
    rollout_state, trajectory = jax.jit(c.rollout.collect)(state.learner.params, state.rollout)
    return c, state, rollout_state, trajectory


def test_rollout_carries_the_state_and_marks_episode_starts(recurrent):
    c, state, rollout_state, trajectory = recurrent
    assert trajectory.reset.shape == (40, 3) and bool(trajectory.reset[0].all())  # fresh envs start episodes
    done = np.asarray(trajectory.terminated | trajectory.truncated)
    # an episode ends at t exactly when the observation at t + 1 starts a new one
    np.testing.assert_array_equal(np.asarray(trajectory.reset[1:]), done[:-1])
    np.testing.assert_array_equal(np.asarray(rollout_state.reset), done[-1])
    assert all(leaf.shape == (3, 8) for leaf in jax.tree.leaves(trajectory.initial_carry))


def test_learner_replay_reproduces_the_behaviour_policy(recurrent):
    """Unrolling the stored fragment from its initial carry, with the stored resets, gives
    exactly the log-probs and values the actor saw step by step."""
    c, state, _, trajectory = recurrent
    assert int(trajectory.reset[1:].sum()) > 0, "the fragment should cross an episode boundary"
    batch, size = replay_batch(trajectory, ("obs", "action", "log_prob", "value"), c.policy.replay_length)
    assert size == 3 and batch["obs"].shape == (3, 40, 4)
    dist, value, _ = replay(c.policy, state.learner.params, batch)
    np.testing.assert_allclose(dist.log_prob(batch["action"]), batch["log_prob"], atol=1e-5)
    np.testing.assert_allclose(value, batch["value"], atol=1e-5)


def test_replay_without_resets_differs(recurrent):
    """The check above can fail: ignoring episode starts changes the replayed values."""
    c, state, _, trajectory = recurrent
    batch, _ = replay_batch(trajectory, ("obs", "value"), c.policy.replay_length)
    batch["reset"] = jnp.zeros_like(batch["reset"])
    _, value, _ = replay(c.policy, state.learner.params, batch)
    assert not np.allclose(value, batch["value"], atol=1e-5)


def test_reset_carry_only_touches_resetting_envs(recurrent):
    c = recurrent[0]
    carry = jax.tree.map(lambda x: x + 1.0, c.policy.initial_carry((2,)))
    out = reset_carry(c.policy, carry, jnp.array([True, False]))
    for leaf in jax.tree.leaves(out):
        np.testing.assert_array_equal(leaf[0], 0.0)
        np.testing.assert_array_equal(leaf[1], 1.0)


def test_recurrent_bootstrap_values_the_final_observation_with_the_carry(recurrent):
    """v_t at every step is the critic on the pre-reset observation after the step's carry (0 after a
    termination, where nothing follows)."""
    c, state, _, trajectory = recurrent
    params, carry, values = state.learner.params, trajectory.initial_carry, []
    for t in range(trajectory.reward.shape[0]):
        carry = reset_carry(c.policy, carry, trajectory.reset[t])
        _, _, carry = c.policy.step(params, trajectory.obs[t], carry)
        values.append(c.policy.value_step(params, trajectory.next_obs[t], carry))
    assert np.any(trajectory.terminated)
    np.testing.assert_allclose(np.where(trajectory.terminated, 0.0, np.stack(values)), trajectory.bootstrap_value,
                               atol=1e-5)


@pytest.mark.optimized_compile  # 50k steps a run: the time is in running the programs (compilation.py)
@pytest.mark.parametrize("algo", ["ppo", "a2c", "impala"])
def test_only_a_recurrent_policy_solves_the_memory_probe(tmp_path, algo):
    # 4 seeds in one run each. Measured on an AMD EPYC CPU (jax 0.10.2): the GRU 1.0 on every
    # seed with each learner; the MLP 0.36-0.67 (chance is 0.5; a seed's mean over 64 episodes
    # has a std of about 0.06, so the mean of 4 seeds sits 6 std below 0.7)
    returns = {core: train(memory_config(tmp_path, f"{algo}-{core}", core, algo, num_seeds=4, devices=1),
                           console=False).summary["final_eval_return"] for core in ("none", "gru")}
    assert min(returns["gru"]) >= 0.95, returns
    assert np.mean(returns["none"]) <= 0.7, returns  # a memoryless policy can only guess the cue


def test_recurrent_runs_in_the_async_mode_and_resumes_exactly(tmp_path):
    base = TrainConfig(env="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=64 * 12, iterations_per_call=3,
                       eval_episodes=4, mode="async", lag="1",
                       network=NetworkConfig(core="lstm", core_size=8, hidden_sizes=(8,)),
                       learner=LearnerConfig(num_minibatches=2, update_epochs=2))
    straight = train(dataclasses.replace(base, run_dir=str(tmp_path / "a")), console=False).summary
    cfg = dataclasses.replace(base, run_dir=str(tmp_path / "b"))
    train(cfg, console=False, stop_after_updates=6)
    resumed = train(cfg, console=False, resume=True).summary
    assert straight["params_digest"] == resumed["params_digest"]


def test_replay_refuses_to_cut_a_recurrent_fragment(recurrent):
    """The trajectory holds the carry only at the fragment's start: shorter sequences cannot be replayed."""
    c, _, _, trajectory = recurrent
    with pytest.raises(ValueError, match="replay_length=1"):
        replay_batch(trajectory, ("obs",), 1)


def test_ppo_minibatches_of_whole_sequences_replay_the_behaviour_policy(recurrent):
    """PPO's minibatches shuffle the envs' sequences, each with its own initial carry: at the
    behaviour params (a step size of 1e-20 keeps them there) every minibatch of every epoch
    replays the actor's log-probs, so the ratio is 1: no KL, nothing clipped. The second fragment:
    its envs' initial carries differ, so a carry shuffled apart from its sequence would show."""
    c, state, rollout_state, _ = recurrent
    # params 3x the initial ones: a sharper policy, whose log-probs tell the carries apart
    params = jax.tree.map(lambda x: 3.0 * x, state.learner.params)
    collect = jax.jit(c.rollout.collect)
    _, trajectory = collect(params, collect(params, rollout_state)[0])
    carries = jax.tree.leaves(trajectory.initial_carry)
    assert all(np.abs(np.diff(np.asarray(leaf), axis=0)).max() > 0.1 for leaf in carries)  # the envs' differ
    ppo = make_ppo(LearnerConfig(update_epochs=2, num_minibatches=3, learning_rate=1e-20), c.policy, num_updates=1,
                   batch_size=trajectory.reward.size)
    learner = ppo.init(jax.random.PRNGKey(0)).replace(params=params)
    _, metrics = jax.jit(ppo.update)(learner, trajectory)
    # 0.0 here; 1.1e-6 and 1.5e-6 with the carries left in env order while their sequences were shuffled
    assert abs(float(metrics["approx_kl"])) < 1e-9 and float(metrics["clip_fraction"]) == 0.0


def test_impala_replays_a_recurrent_policy_exactly(recurrent):
    """At the behaviour params IMPALA's replay of whole sequences gives the actor's log-probs
    (rho = 1) and values, and values each next observation with the carry after the step, as
    the rollout's bootstrap did: the loss is V-trace on the rollout's own values."""
    c, state, _, trajectory = recurrent
    assert bool(trajectory.truncated.any() | trajectory.terminated.any())
    gamma = 0.9
    impala = make_impala(LearnerConfig(update_epochs=1, num_minibatches=1, gamma=gamma, gae_lambda=1.0), c.policy,
                         num_updates=1)
    learner = impala.init(jax.random.PRNGKey(0)).replace(params=state.learner.params)
    updated, metrics = jax.jit(impala.update)(learner, trajectory)

    np.testing.assert_allclose(metrics["rho_mean"], 1.0, atol=1e-5)
    assert abs(float(metrics["approx_kl"])) < 1e-6
    discount_t, lambda_t = gae_inputs(trajectory.reward, trajectory.terminated, trajectory.truncated, gamma, 1.0)
    targets = jax.vmap(vtrace, in_axes=1, out_axes=1)(trajectory.value, trajectory.bootstrap_value,
                                                      trajectory.reward, discount_t,
                                                      jnp.ones_like(trajectory.value), lambda_t)
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * np.mean((trajectory.value - targets.vs) ** 2),
                               rtol=1e-4)
    np.testing.assert_allclose(metrics["policy_loss"], -np.mean(targets.pg_advantage * trajectory.log_prob),
                               rtol=1e-4)
    # and the update trains the recurrent core
    core_before, core_after = (jax.tree.leaves(p["params"]["core"]) for p in (learner.params, updated.params))
    assert all(np.isfinite(leaf).all() for leaf in core_after)
    assert any(not np.array_equal(a, b) for a, b in zip(core_before, core_after))
