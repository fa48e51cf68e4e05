"""SAC: the losses and the squashed Gaussian against NumPy references, the critic target from a
hand-made buffer (termination, truncation), the continuous-action probe (every seed finds the
optimum), determinism, exact resume with the buffer and the refill without it, config errors,
and Pendulum-v1 (slow)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.algorithms.replay import buffer as replay
from jaxrl_async.algorithms.replay.actor_critic import critic_loss
from jaxrl_async.algorithms.sac import actor_loss, critic_loss_on_batch, critic_target, temperature_loss
from jaxrl_async.trainer.build import build
from jaxrl_async import TrainConfig
from jaxrl_async.nets.box_policy import UnitBox
from jaxrl_async.nets.sac import SACNets, SquashedGaussian
from jaxrl_async.trainer.training import train
from learning_checks import PROBE_SEEDS
from cli_checks import assert_train_refuses  # tests/cli_checks.py

LOW, HIGH = jnp.array([-2.0]), jnp.array([2.0])


def np_squashed_log_prob(u, mean, log_std):
    """log N(u; mean, std) - log(1 - tanh(u)^2), summed over the action dimensions (float64)."""
    u, mean, log_std = (np.asarray(x, np.float64) for x in (u, mean, log_std))
    gauss = -0.5 * ((u - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
    return np.sum(gauss - np.log(1.0 - np.tanh(u) ** 2), axis=-1)


# -- the squashed Gaussian -----------------------------------------------------------------------
def test_squashed_log_prob_has_the_tanh_correction():
    mean, log_std = jnp.array([[0.3, -1.0], [1.5, 0.0]]), jnp.array([[-0.5, 0.2], [0.0, -1.0]])
    box = jnp.array([-1.0, 0.0]), jnp.array([3.0, 1.0])  # bounds of their own per dimension
    dist = SquashedGaussian(mean, log_std, UnitBox(*box, jnp.array(False)))
    u = np.array([[0.1, 0.7], [2.0, -0.4]])
    env_action = dist.box.to_env(jnp.tanh(jnp.asarray(u, jnp.float32)))
    np.testing.assert_allclose(np.asarray(env_action), np.array([-1.0, 0.0]) + (np.tanh(u) + 1) / 2 * [4.0, 1.0],
                               rtol=1e-6)
    np.testing.assert_allclose(dist.log_prob(env_action), np_squashed_log_prob(u, mean, log_std), rtol=1e-4)
    # the reparameterised sample's log-prob is the same density at its own action
    key = jax.random.PRNGKey(3)
    unit, log_prob = dist.sample_unit(key)
    noise = np.asarray(jax.random.normal(key, mean.shape))
    u_sampled = np.asarray(mean) + np.exp(np.asarray(log_std)) * noise
    np.testing.assert_allclose(unit, np.tanh(u_sampled), rtol=1e-5)
    np.testing.assert_allclose(log_prob, np_squashed_log_prob(u_sampled, mean, log_std), rtol=1e-4)
    np.testing.assert_allclose(dist.mode(), dist.box.to_env(jnp.tanh(mean)), rtol=1e-6)


def test_squash_correction_stays_finite_far_out():
    mean, log_std = jnp.array([[30.0]]), jnp.array([[-3.0]])
    dist = SquashedGaussian(mean, log_std, UnitBox(LOW, HIGH, jnp.array(False)))
    _, log_prob = dist.sample_unit(jax.random.PRNGKey(0))
    # log(1 - tanh(u)^2) ~ 2 log 2 - 2u for large u: about -58.6, finite where the naive form gives -inf
    assert np.isfinite(log_prob).all() and float(log_prob[0]) > 50


def test_uniform_flag_samples_the_whole_box():
    dist = SquashedGaussian(jnp.zeros((20_000, 1)), jnp.full((20_000, 1), -5.0), UnitBox(LOW, HIGH, jnp.array(True)))
    actions = np.asarray(dist.sample(jax.random.PRNGKey(1)))[:, 0]
    assert actions.min() >= -2.0 and actions.max() <= 2.0
    np.testing.assert_allclose(np.histogram(actions, bins=4, range=(-2, 2))[0] / actions.size, 0.25, atol=0.02)


# -- the losses on hand-made arrays ------------------------------------------------------------
def test_critic_target_takes_the_min_and_the_entropy_term():
    next_q = jnp.array([[1.0, 5.0, -2.0], [3.0, 4.0, 0.0]])
    y = critic_target(jnp.array([0.5, 1.0, 2.0]), jnp.array([0.9, 0.0, 0.81]), next_q,
                      jnp.array([-1.0, 2.0, 0.5]), 0.2)
    np.testing.assert_allclose(y, [0.5 + 0.9 * (1.0 + 0.2), 1.0, 2.0 + 0.81 * (-2.0 - 0.1)], rtol=1e-6)


def test_critic_actor_and_temperature_losses_match_numpy():
    q = np.array([[1.0, 2.0, -1.0], [0.5, 3.0, 0.0]])
    target = np.array([1.5, 1.0, -2.0])
    np.testing.assert_allclose(critic_loss(jnp.asarray(q), jnp.asarray(target)),
                               0.5 * ((q - target) ** 2).mean(axis=1).sum(), rtol=1e-6)
    # the target is held fixed: the gradient flows into q alone
    grad_target = jax.grad(lambda t: critic_loss(jnp.asarray(q), t))(jnp.asarray(target))
    np.testing.assert_array_equal(grad_target, 0.0)
    log_prob = np.array([-0.5, 0.3, -1.2])
    np.testing.assert_allclose(actor_loss(jnp.asarray(q), jnp.asarray(log_prob), 0.3),
                               np.mean(0.3 * log_prob - q.min(axis=0)), rtol=1e-6)
    loss = temperature_loss(jnp.float32(np.log(0.3)), jnp.asarray(log_prob), -1.0)
    np.testing.assert_allclose(loss, -np.log(0.3) * np.mean(log_prob - 1.0), rtol=1e-6)
    # entropy -mean(log pi) = 0.467 is above the target -1: the gradient step lowers alpha
    assert float(jax.grad(temperature_loss)(jnp.float32(0.0), jnp.asarray(log_prob), -1.0)) > 0


def test_critic_loss_on_a_buffer_masks_terminations_and_bootstraps_truncations():
    """One env, four rows (obs = row index): a plain step, a termination (its next_obs is
    garbage and must not count), a truncation (bootstraps from its pre-reset next_obs 7), a
    plain step. Linear 'networks' make the NumPy reference exact."""
    gamma, alpha = 0.9, 0.3
    rows = dict(obs=[0.0, 1.0, 2.0, 3.0], action=[0.5, -1.0, 1.5, 0.0], reward=[1.0, 2.0, 3.0, 4.0],
                terminated=[False, True, False, False], truncated=[False, False, True, False],
                next_obs=[1.0, 99.0, 7.0, 4.0])
    transitions = {k: jnp.asarray(v)[:, None, None] if k in ("obs", "action", "next_obs") else jnp.asarray(v)[:, None]
                   for k, v in rows.items()}
    buffer = replay.add(replay.init(jax.tree.map(lambda x: x[0], transitions), 4), transitions)
    batch = replay.sample(buffer, jax.random.PRNGKey(0), batch_size=32, n_step=1, gamma=gamma)
    actor_params = dict(w=jnp.float32(0.2), s=jnp.float32(-1.0))
    critic_params = dict(a=jnp.array([1.0, 0.5]), b=jnp.array([2.0, -1.0]))
    target_params = dict(a=jnp.array([0.8, 0.6]), b=jnp.array([1.0, 0.5]))
    actor = lambda p, obs: SquashedGaussian(p["w"] * obs, p["s"] + 0 * obs, UnitBox(LOW, HIGH, jnp.array(False)))
    critic = lambda p, obs, a: p["a"][:, None] * obs[None, :, 0] + p["b"][:, None] * a[None, :, 0]
    nets = SACNets(actor, critic, None, 1)
    key = jax.random.PRNGKey(5)
    loss, _ = critic_loss_on_batch(nets, critic_params, target_params, actor_params, batch, alpha, key)

    row = np.asarray(batch["obs"])[:, 0].astype(int)
    assert set(row) == {0, 1, 2, 3}
    r, term, nxt = (np.asarray(rows[k], np.float64)[row] for k in ("reward", "terminated", "next_obs"))
    noise = np.asarray(jax.random.normal(key, (32, 1)))[:, 0]
    u = 0.2 * nxt + np.exp(-1.0) * noise
    log_prob = np_squashed_log_prob(u[:, None], 0.2 * nxt[:, None], np.full((32, 1), -1.0))
    a_next = np.tanh(u)
    q_next = np.minimum(0.8 * nxt + 1.0 * a_next, 0.6 * nxt + 0.5 * a_next)
    with np.errstate(invalid="ignore"):  # the garbage next_obs 99 squashes to tanh = 1 in float64
        y = r + np.where(term, 0.0, gamma * (q_next - alpha * log_prob))
    assert np.allclose(y[row == 1], 2.0)  # the termination: the reward alone
    unit_action = np.asarray(rows["action"])[row] / 2.0
    q = np.stack([1.0 * row + 2.0 * unit_action, 0.5 * row - 1.0 * unit_action])
    np.testing.assert_allclose(loss, 0.5 * ((q - y) ** 2).mean(axis=1).sum(), rtol=1e-4)


# -- learning: the continuous-action probe -------------------------------------------------------
def sac_config(tiny_config, env_id, *, total_timesteps=64 * 60, **replay_fields) -> TrainConfig:
    fields = dict(replay_capacity=4096, learning_starts=256, replay_ratio=8, replay_batch_size=64)
    fields.update(replay_fields)
    cfg = tiny_config(env=env_id, algo="sac", num_envs=8, num_steps=8, total_timesteps=total_timesteps,
                      num_seeds=PROBE_SEEDS, devices=1, iterations_per_call="all", eval_episodes=8,
                      network=dict(hidden_sizes=(32,), activation="relu"),
                      learner=dict(learning_rate=1e-2, anneal_lr=False, max_grad_norm=1000.0))
    return cfg.with_fields(**fields)


def test_continuous_probe_finds_the_optimal_action(tiny_config):
    """Probe-ContinuousAction: one step, reward -(a - 1)^2, a in [-2, 2]; every seed's
    deterministic action is within 0.1 of 1."""
    cfg = sac_config(tiny_config, "Probe-ContinuousAction")
    result = train(cfg, console=False)
    policy = build(cfg).policy
    obs = jnp.zeros((1, 1), jnp.float32)
    modes = np.asarray(jax.vmap(lambda p: policy.step(p, obs, ())[0].mode())(result.state.learner.params))
    np.testing.assert_allclose(modes.reshape(-1), 1.0, atol=0.1)
    assert not bool(np.any(result.state.learner.params.random_actions))


# -- a run's life: determinism, resume with and without the buffer, errors -------------------------
def small_pendulum(tiny_config, **overrides) -> TrainConfig:
    """40 iterations of 2 envs x 8 steps, learning from the 9th, a host sync every 10."""
    dqn = dict(replay_capacity=1024, learning_starts=128, replay_ratio=2, replay_batch_size=32)
    dqn.update(overrides.pop("dqn", {}))
    cfg = tiny_config(env="Pendulum-v1", algo="sac", num_envs=2, total_timesteps=16 * 40, iterations_per_call=10,
                      checkpoint_interval=10, eval_interval=20, **overrides)
    return cfg.with_fields(**dqn, tau=0.05)


@pytest.fixture(scope="module")
def straight_run(tiny_config):
    return train(small_pendulum(tiny_config, dqn=dict(checkpoint_replay=True)), console=False)


def test_same_seed_gives_identical_params(tiny_config, straight_run):
    again = train(small_pendulum(tiny_config, dqn=dict(checkpoint_replay=True)), console=False)
    assert again.summary["params_digest"] == straight_run.summary["params_digest"]
    other_seed = train(small_pendulum(tiny_config, seed=1, dqn=dict(checkpoint_replay=True)), console=False)
    assert other_seed.summary["params_digest"] != straight_run.summary["params_digest"]


def test_resume_with_the_buffer_is_bit_identical(tiny_config, straight_run):
    cfg = small_pendulum(tiny_config, dqn=dict(checkpoint_replay=True))
    stopped = train(cfg, console=False, stop_after_updates=20)
    assert not stopped.completed and stopped.summary["updates_done"] == 20
    resumed = train(cfg, console=False, resume=True)
    assert resumed.summary["params_digest"] == straight_run.summary["params_digest"]
    assert "replay_refilled" not in resumed.summary
    for name in ("critic", "target_critic", "log_temperature"):
        jax.tree.map(np.testing.assert_array_equal, getattr(resumed.state.learner.extra.nets, name),
                     getattr(straight_run.state.learner.extra.nets, name))


def test_resume_without_the_buffer_refills_and_says_so(tiny_config, straight_run):
    cfg = small_pendulum(tiny_config)
    train(cfg, console=False, stop_after_updates=20)
    resumed = train(cfg, console=False, resume=True)
    assert resumed.summary["replay_refilled"] is True
    assert int(resumed.state.learner.extra.buffer.size[0]) == 20 * cfg.num_steps
    assert resumed.summary["params_digest"] != straight_run.summary["params_digest"]


@pytest.mark.parametrize("flags, must_mention", [
    (["--env", "CartPole-v1"], ["Box", "use --algo ppo or a2c or reinforce or impala or dqn or pqn"]),
    (["--env", "Pendulum-v1", "--tau", "0"], ["tau=0.0", "(0, 1]"]),
    (["--env", "Pendulum-v1", "--init-temperature", "-1"], ["init_temperature=-1.0", "> 0"]),
], ids=["discrete-actions", "tau", "temperature"])
def test_bad_sac_input_exits_2_naming_the_field(flags, must_mention, capsys, tmp_path):
    assert_train_refuses(["--algo", "sac", *flags], must_mention, capsys, tmp_path / "run")


def test_algo_sac_starts_from_its_preset():
    from jaxrl_async.cli.main import parse_train

    cfg = parse_train(["--env", "Probe-ContinuousAction", "--algo", "sac", "--replay-ratio", "2"]).config
    assert cfg.preset == "sac" and cfg.network.hidden_sizes == (64, 64) and cfg.replay.replay_batch_size == 256
    assert cfg.replay.replay_ratio == 2  # a flag given overrides the preset


@pytest.mark.slow
def test_sac_learns_pendulum(tmp_path):
    """`--algo sac`'s preset (experiments/sac_pendulum.py's config), 4 seeds in one run at 20k
    steps (the issue's budget is 50k): at least 3 of 4 reach -200. Measured: -172, -133, -104,
    -102 at 20k steps, about 4 minutes on the loaded 2-core CPU (longer than the ~90 s asked
    for: one gradient step per env step of 256 transitions through 64x64 networks, 4 seeds)."""
    from experiments.sac_pendulum import CONFIG

    cfg = dataclasses.replace(CONFIG, run_dir=str(tmp_path / "sac"), total_timesteps=20_000, num_seeds=4, devices=1,
                              eval_interval=0)
    returns = train(cfg, console=False).summary["final_eval_return"]
    assert sum(r >= -200 for r in returns) >= 3, returns
