"""Prioritised replay in the learners: DQN with it learns the probes as the uniform one does,
SAC with it finds the continuous probe's optimum, a resume with the buffer keeps the priorities
(bit-identical), the priority flags do nothing at alpha = 0, and bad flags exit 2."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.trainer.build import build
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.training import train
from learning_checks import PROBE_SEEDS, assert_every_seed_close, values
from cli_checks import assert_train_refuses  # tests/cli_checks.py

PER = dict(priority_exponent=0.6, priority_weight_exponent=0.4)
TOLERANCE = 0.1


def probe_config(tiny_config, env_id, *, gamma=0.99, **dqn) -> TrainConfig:
    """tests/test_dqn.py's probe config (about 3.8k steps per seed, 4 seeds vmapped), with PER."""
    fields = dict(replay_capacity=2048, learning_starts=256, replay_ratio=4, replay_batch_size=64,
                  target_update_period=20, epsilon_decay_fraction=0.3, **PER)
    fields.update(dqn)
    cfg = tiny_config(env=env_id, algo="dqn", num_envs=8, num_steps=8, total_timesteps=64 * 60,
                      num_seeds=PROBE_SEEDS, devices=1, iterations_per_call="all", eval_episodes=8,
                      learner=dict(learning_rate=3e-3, gamma=gamma, max_grad_norm=10.0))
    return cfg.with_fields(**fields)


def test_dqn_with_per_learns_the_action_probe(tiny_config):
    """Probe-ObsActionReward: Q(+1, 1) = Q(-1, 0) = 1, the wrong actions 0, on every seed (the
    uniform learner's test in test_dqn.py, same config and tolerance), with the priorities moved
    off their initial value by the TD errors."""
    cfg = probe_config(tiny_config, "Probe-ObsActionReward")
    result = train(cfg, console=False)
    policy, params = build(cfg).policy, result.state.learner.params
    obs = jnp.asarray([[1.0], [-1.0]])
    q = np.asarray(jax.vmap(lambda p: policy.step(p, obs, ())[0].q_values)(params))
    assert_every_seed_close(q, [[0.0, 1.0], [1.0, 0.0]], atol=TOLERANCE)
    assert result.summary["final_eval_return"] == [1.0] * PROBE_SEEDS
    priorities = np.asarray(result.state.learner.extra.buffer.priorities)  # [S, C, B], ring full
    assert priorities.shape == (PROBE_SEEDS, 2048 // 8, 8) and np.all(priorities > 0)
    assert np.ptp(priorities) > 0.1  # learned cells differ from the newest rows' max priority


def test_dqn_with_per_bootstraps_the_two_step_probe_with_n_step_targets(tiny_config):
    """Probe-TwoStep with gamma 0.5 and 2-step returns: V(0) = 0.5, V(1) = 1 on every seed."""
    cfg = probe_config(tiny_config, "Probe-TwoStep", gamma=0.5, n_step=2)
    result = train(cfg, console=False)
    assert_every_seed_close(values(build(cfg).policy, result.state.learner.params, [0.0, 1.0]), [0.5, 1.0],
                            atol=TOLERANCE)


def test_sac_with_per_finds_the_continuous_probe_optimum(tiny_config):
    """Probe-ContinuousAction (reward -(a - 1)^2): every seed's deterministic action within 0.1
    of 1, as test_sac.py asks of uniform SAC with the same config."""
    cfg = tiny_config(env="Probe-ContinuousAction", algo="sac", num_envs=8, num_steps=8, total_timesteps=64 * 60,
                      num_seeds=PROBE_SEEDS, devices=1, iterations_per_call="all", eval_episodes=8,
                      network=dict(hidden_sizes=(32,), activation="relu"),
                      learner=dict(learning_rate=1e-2, anneal_lr=False, max_grad_norm=1000.0))
    cfg = cfg.with_fields(replay_capacity=4096, learning_starts=256, replay_ratio=8,
                          replay_batch_size=64, **PER)
    result = train(cfg, console=False)
    obs = jnp.zeros((1, 1), jnp.float32)
    policy = build(cfg).policy
    modes = np.asarray(jax.vmap(lambda p: policy.step(p, obs, ())[0].mode())(result.state.learner.params))
    np.testing.assert_allclose(modes.reshape(-1), 1.0, atol=0.1)
    priorities = np.asarray(result.state.learner.extra.buffer.priorities)  # [S, C, B]: 480 of 512 rows written
    assert priorities.shape == (PROBE_SEEDS, 4096 // 8, 8)
    written = priorities[:, :64 * 60 // 8]  # the unwritten rows' 0 would make any range pass
    assert np.all(written > 0) and np.ptp(written) > 0.1  # learned cells differ from the newest rows' max priority


# -- a run's life --------------------------------------------------------------------------------
def small_cartpole(tiny_config, **dqn) -> TrainConfig:
    """40 iterations of 4 envs x 8 steps, learning from the 9th, 3-step returns, a sync every 10."""
    fields = dict(replay_capacity=2048, learning_starts=256, replay_ratio=2, replay_batch_size=32, n_step=3,
                  target_update_period=8)
    fields.update(dqn)
    cfg = tiny_config(algo="dqn", total_timesteps=32 * 40, iterations_per_call=10, checkpoint_interval=10,
                      eval_interval=20)
    return cfg.with_fields(**fields)


def test_resume_with_the_buffer_keeps_the_priorities(tiny_config):
    cfg = small_cartpole(tiny_config, checkpoint_replay=True, **PER)
    straight = train(cfg, console=False)
    cfg = small_cartpole(tiny_config, checkpoint_replay=True, **PER)  # a run directory of its own
    stopped = train(cfg, console=False, stop_after_updates=20)
    assert stopped.summary["updates_done"] == 20
    resumed = train(cfg, console=False, resume=True)
    assert resumed.summary["params_digest"] == straight.summary["params_digest"]
    for name in ("priorities", "max_priority"):
        np.testing.assert_array_equal(getattr(resumed.state.learner.extra.buffer, name),
                                      getattr(straight.state.learner.extra.buffer, name))
    assert float(np.ptp(np.asarray(straight.state.learner.extra.buffer.priorities[0, :40]))) > 0  # learned


def test_priority_flags_do_nothing_at_alpha_zero(tiny_config):
    """alpha = 0 is the uniform ring (no priorities in the state); beta and epsilon then change
    nothing, down to the params' bits."""
    default = train(small_cartpole(tiny_config), console=False)
    assert default.state.learner.extra.buffer.priorities is None
    other = train(small_cartpole(tiny_config, priority_exponent=0.0, priority_weight_exponent=0.9,
                                 priority_epsilon=0.5), console=False)
    assert other.summary["params_digest"] == default.summary["params_digest"]


@pytest.mark.parametrize("flags, must_mention", [
    (["--priority-exponent", "-0.5"], ["priority_exponent=-0.5", ">= 0"]),
    (["--priority-weight-exponent", "1.5"], ["priority_weight_exponent=1.5", "[0, 1]"]),
    (["--priority-epsilon", "0"], ["priority_epsilon=0.0", "> 0"]),
], ids=["alpha", "beta", "epsilon"])
def test_bad_priority_flags_exit_2_naming_the_field(flags, must_mention, capsys, tmp_path):
    assert_train_refuses(["--algo", "dqn", *flags], must_mention, capsys, tmp_path / "run")
