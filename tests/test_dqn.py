"""DQN: the loss against hand-computed targets, the epsilon-greedy policy, the probes (every seed
of a vmapped run finds the exact answer: `learning_checks.py`), determinism, exact resume with
the buffer and the refill without it, config errors, and CartPole (slow)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cli_checks import assert_train_refuses  # tests/cli_checks.py
from jaxrl_async.algorithms.dqn import epsilon_schedule, q_learning_loss
from jaxrl_async.algorithms.sgd import env_steps_of
from jaxrl_async.cli.main import parse_train
from jaxrl_async.trainer.build import build
from jaxrl_async.algorithms.dqn_config import DQNConfig
from jaxrl_async import TrainConfig
from jaxrl_async.core.distributions import EpsilonGreedy
from jaxrl_async.trainer.training import train
from learning_checks import (CARTPOLE_SEEDS, PROBE_SEEDS, assert_cartpole_solved, assert_every_seed_close,
                             values)

TOLERANCE = 0.1


# -- the maths -----------------------------------------------------------------
def table_q(network, obs):
    """A tabular 'network': Q(s, a) = network[s, a] for integer observations."""
    return network[obs.astype(jnp.int32)]


@pytest.mark.parametrize("double_q, expected_next", [(True, 3.0), (False, 5.0)])
def test_loss_uses_the_double_q_target(double_q, expected_next):
    online = jnp.array([[1.0, 2.0], [4.0, 0.0]])  # online picks action 0 at state 1
    target = jnp.array([[0.0, 0.0], [3.0, 5.0]])  # target values it 3 (max would be 5)
    batch = dict(obs=jnp.array([0]), action=jnp.array([1]), bootstrap_obs=jnp.array([1]),
                 n_step_return=jnp.array([0.5]), discount=jnp.array([0.81]))
    loss, metrics = q_learning_loss(table_q, online, target, batch, double_q)
    td = 0.5 + 0.81 * expected_next - 2.0  # y - Q(0, 1)
    huber = 0.5 * td ** 2 if abs(td) <= 1 else abs(td) - 0.5
    np.testing.assert_allclose(loss, huber, rtol=1e-6)
    np.testing.assert_allclose(metrics["td_abs_mean"], abs(td), rtol=1e-6)
    # the target is held fixed: the gradient flows into Q(0, 1) alone
    grad = jax.grad(lambda p: q_learning_loss(table_q, p, target, batch, double_q)[0])(online)
    np.testing.assert_allclose(grad, [[0.0, -np.clip(td, -1, 1)], [0.0, 0.0]], rtol=1e-6)


def test_loss_ignores_the_bootstrap_after_a_termination():
    online, target = jnp.array([[1.0, 2.0], [40.0, 0.0]]), jnp.array([[0.0, 0.0], [30.0, 50.0]])
    batch = dict(obs=jnp.array([0]), action=jnp.array([0]), bootstrap_obs=jnp.array([1]),
                 n_step_return=jnp.array([1.5]), discount=jnp.array([0.0]))
    np.testing.assert_allclose(q_learning_loss(table_q, online, target, batch, True)[0], 0.125, rtol=1e-6)


def test_epsilon_decays_linearly_then_stays():
    epsilon = epsilon_schedule(DQNConfig(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_fraction=0.5), 1000)
    np.testing.assert_allclose([epsilon(jnp.int32(s)) for s in (0, 250, 500, 900)], [1.0, 0.55, 0.1, 0.1],
                               rtol=1e-6)


def test_epsilon_follows_its_schedule_past_two_to_the_31_env_steps():
    """A long run (PQN on Atari, billions of steps per seed) counts its env steps in float32: the
    int32 product of updates and batch wrapped negative past 2**31, and epsilon rose past its start."""
    epsilon = epsilon_schedule(DQNConfig(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_fraction=0.5), 8 * 10**9)
    updates = jnp.int32(2**31 // 1024 + 1)  # of 1024 env steps each: just past 2**31 steps
    assert int(updates * 1024) < 0  # what the int32 product gave
    np.testing.assert_allclose(float(env_steps_of(updates, 1024)), 2**31 + 1024, rtol=1e-7)
    np.testing.assert_allclose(float(epsilon(env_steps_of(updates, 1024))), 1.0 - 0.9 * (2**31 + 1024) / 4e9,
                               rtol=1e-6)
    np.testing.assert_allclose(float(epsilon(env_steps_of(jnp.int32(6 * 10**6), 1024))), 0.1, rtol=1e-6)  # 6e9
    # below 2**31 the exact count rounded once, as before: float32(u) * 24 would round twice past 2**24 updates
    for u in range(2**24 + 1, 2**24 + 64):
        assert float(env_steps_of(jnp.int32(u), 24)) == float(np.float32(u * 24)), u


def test_epsilon_greedy_acts_and_scores_as_stated():
    dist = EpsilonGreedy(q_values=jnp.tile(jnp.array([0.0, 3.0, 1.0, 2.0]), (40_000, 1)), epsilon=jnp.float32(0.2))
    actions = np.asarray(dist.sample(jax.random.PRNGKey(0)))
    expected = np.array([0.05, 0.85, 0.05, 0.05])  # epsilon / 4 each, plus 1 - epsilon on the greedy one
    np.testing.assert_allclose(np.bincount(actions, minlength=4) / actions.size, expected, atol=0.01)
    assert np.all(np.asarray(dist.mode()) == 1)
    one = EpsilonGreedy(q_values=jnp.tile(jnp.array([0.0, 3.0, 1.0, 2.0]), (4, 1)), epsilon=jnp.float32(0.2))
    np.testing.assert_allclose(np.exp(one.log_prob(jnp.arange(4))), expected, rtol=1e-5)
    np.testing.assert_allclose(one.entropy(), -np.sum(expected * np.log(expected)), rtol=1e-5)


# -- probes ----------------------------------------------------------------------
def dqn_config(tiny_config, env_id, *, gamma=0.99, total_timesteps=64 * 60, **dqn) -> TrainConfig:
    """About 3.8k steps per seed (unless told), 4 seeds vmapped, a 16-unit Q-network."""
    fields = dict(replay_capacity=2048, learning_starts=256, replay_ratio=4, replay_batch_size=64,
                  target_update_period=20, epsilon_decay_fraction=0.3)
    fields.update(dqn)
    cfg = tiny_config(env=env_id, algo="dqn", num_envs=8, num_steps=8, total_timesteps=total_timesteps,
                      num_seeds=PROBE_SEEDS, devices=1, iterations_per_call="all", eval_episodes=8,
                      learner=dict(learning_rate=3e-3, gamma=gamma, max_grad_norm=10.0))
    return cfg.with_fields(**fields)


def learn(tiny_config, env_id, **kwargs):
    cfg = dqn_config(tiny_config, env_id, **kwargs)
    result = train(cfg, console=False)
    return build(cfg).policy, result.state.learner.params, result.summary


def q_table(policy, params, observations):
    """[S, N, A]: every seed's Q-values at the N scalar observations."""
    obs = jnp.asarray(observations, jnp.float32)[:, None]
    return np.asarray(jax.vmap(lambda p: policy.step(p, obs, ())[0].q_values)(params))


def test_two_step_value_is_discounted_once(tiny_config):
    gamma = 0.5
    policy, params, _ = learn(tiny_config, "Probe-TwoStep", gamma=gamma, n_step=1)
    assert_every_seed_close(values(policy, params, [0.0, 1.0]), [gamma, 1.0], atol=TOLERANCE)


def test_obs_action_reward_greedy_action_matches_the_sign(tiny_config):
    policy, params, summary = learn(tiny_config, "Probe-ObsActionReward")
    q = q_table(policy, params, [1.0, -1.0])
    # Q(+1, 1) = Q(-1, 0) = 1, the wrong actions 0
    assert_every_seed_close(q, [[0.0, 1.0], [1.0, 0.0]], atol=TOLERANCE)
    assert summary["final_eval_return"] == [1.0] * PROBE_SEEDS


def test_truncation_is_not_termination(tiny_config):
    """Q = 1 / (1 - gamma) = 2 in every state, the last one before the time limit included; a
    learner that stops the bootstrap at the time limit gets 1.0, 1.5, 1.75, ... from the end.
    (15k steps: at 3.8k the values were still rising towards 2 from the start of the episode;
    at 15k every seed was within 0.06 of 2.)"""
    gamma = 0.5
    policy, params, _ = learn(tiny_config, "Probe-Truncation", gamma=gamma, n_step=1, total_timesteps=64 * 240)
    observations = np.arange(10) / 10  # the states acted in: time / max_steps, 10 steps
    assert_every_seed_close(values(policy, params, observations), 1.0 / (1.0 - gamma), atol=TOLERANCE)


# -- a run's life: determinism, resume with and without the buffer, eval, errors ---------------------
def small_cartpole(tiny_config, **overrides) -> TrainConfig:
    """40 iterations of 4 envs x 8 steps, learning from the 9th, a host sync every 10."""
    dqn = dict(replay_capacity=2048, learning_starts=256, replay_ratio=2, replay_batch_size=32, n_step=3,
               target_update_period=8)
    dqn.update(overrides.pop("dqn", {}))
    cfg = tiny_config(algo="dqn", total_timesteps=32 * 40, iterations_per_call=10, checkpoint_interval=10,
                      eval_interval=20, **overrides)
    return cfg.with_fields(**dqn)


@pytest.fixture(scope="module")
def straight_run(tiny_config):
    """The reference: 40 updates without a stop (buffer checkpointed)."""
    return train(small_cartpole(tiny_config, dqn=dict(checkpoint_replay=True)), console=False)


def test_same_seed_gives_identical_params(tiny_config, straight_run):
    again = train(small_cartpole(tiny_config, dqn=dict(checkpoint_replay=True)), console=False)
    assert again.summary["params_digest"] == straight_run.summary["params_digest"]
    other_seed = train(small_cartpole(tiny_config, seed=1, dqn=dict(checkpoint_replay=True)), console=False)
    assert other_seed.summary["params_digest"] != straight_run.summary["params_digest"]


def test_resume_with_the_buffer_is_bit_identical(tiny_config, straight_run):
    cfg = small_cartpole(tiny_config, dqn=dict(checkpoint_replay=True))
    stopped = train(cfg, console=False, stop_after_updates=20)
    assert not stopped.completed and stopped.summary["updates_done"] == 20
    resumed = train(cfg, console=False, resume=True)
    assert resumed.summary["params_digest"] == straight_run.summary["params_digest"]
    assert "replay_refilled" not in resumed.summary
    np.testing.assert_array_equal(resumed.state.learner.extra.buffer.storage["obs"],
                                  straight_run.state.learner.extra.buffer.storage["obs"])


def test_resume_without_the_buffer_refills_and_says_so(tiny_config, straight_run, capsys):
    from jaxrl_async.trainer import checkpoint as ckpt

    cfg = small_cartpole(tiny_config)  # checkpoint_replay off (the default)
    train(cfg, console=False, stop_after_updates=20)
    saved = ckpt.load(ckpt.latest_checkpoint(cfg.run_dir))
    assert saved["state"]["learner"]["extra"]["buffer"]["storage"] == {} and saved["extra"]["replay_saved"] is False
    resumed = train(cfg, console=True, resume=True)
    assert "holds no replay buffer" in capsys.readouterr().out
    assert resumed.summary["replay_refilled"] is True
    # the refilled buffer holds only the 20 resumed iterations' rows (the ring has 512), so learning differs
    assert int(resumed.state.learner.extra.buffer.size[0]) == 20 * cfg.num_steps
    assert int(straight_run.state.learner.extra.buffer.size[0]) == 40 * cfg.num_steps
    assert resumed.summary["params_digest"] != straight_run.summary["params_digest"]


def test_eval_command_reads_a_checkpoint_without_the_buffer(tiny_config):
    from jaxrl_async.trainer.evaluate_run import evaluate_run

    cfg = small_cartpole(tiny_config)
    train(cfg, console=False)
    report = evaluate_run(cfg.run_dir, checkpoint="latest", episodes=2)
    assert "CartPole-v1 dqn" in report and "seed 0: return" in report


@pytest.mark.parametrize("flags, must_mention", [
    (["--sync-interval", "2"], ["sync_interval=2", "--mode async"]),
    (["--env", "Pendulum-v1"], ["Discrete", "--algo ppo"]),
    (["--replay-capacity", "16"], ["replay_capacity=16", "num_envs*num_steps=256"]),  # its preset: 8 x 32
    (["--target-update-tau", "0"], ["target_update_tau=0.0", "(0, 1]"]),
    (["--epsilon-end", "1.5"], ["epsilon_end=1.5", "[0, 1]"]),
], ids=["sync-interval-fused", "box-actions", "capacity-below-a-rollout", "tau", "epsilon"])
def test_bad_dqn_input_exits_2_naming_the_field(flags, must_mention, capsys, tmp_path):
    assert_train_refuses(["--algo", "dqn", *flags], must_mention, capsys, tmp_path / "run")


@pytest.mark.slow
def test_algo_dqn_alone_solves_cartpole(tmp_path):
    """`jaxrl-async train --env CartPole-v1 --algo dqn`'s config (its preset CartPole-v1:dqn, which
    is experiments/dqn_cartpole.py's: test_presets.py): at least 3 of 4 seeds reach 475, the rule
    of the other learners (learning_checks.py).

    The preset's margin, measured with the command on a Zen 4 EPYC: 23 seeds of 24 at 500 and one
    at 497.2 (`--num-seeds 8`, `--seed 0`, 8 and 16). Its gamma was 0.99 before, whose seeds swung
    more: two of 8 ended at 322.9 and 442.9, and this test asked 6 of 8."""
    cfg = dataclasses.replace(parse_train(["--env", "CartPole-v1", "--algo", "dqn"]).config,
                              run_dir=str(tmp_path / "dqn"), num_seeds=CARTPOLE_SEEDS, devices=1)
    assert cfg.preset == "CartPole-v1:dqn"
    assert_cartpole_solved(train(cfg, console=False).summary)
