"""Tests for jaxrl_async.core.losses (hand-computed arrays) and the PPO update."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl_async.core import losses
from jaxrl_async.algorithms.ppo import make_ppo
from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async.envs import make_env
from jaxrl_async.nets.actor_critic import make_policy
from jaxrl_async.rollout.device import make_rollout

# losses and steps against references computed here: full float32 matmuls on any backend (conftest.py)
pytestmark = pytest.mark.float32_matmuls

# ----------------------------------------------------------------- loss terms

# ratio, advantage, and the surrogate min(r A, clip(r, 0.8, 1.2) A) by hand
SURROGATE_CASES = [
    (0.5, 1.0, 0.5),     # below the range, A > 0: the unclipped term is smaller
    (0.5, -1.0, -0.8),   # below the range, A < 0: clipped (pessimistic) term
    (1.0, -2.0, -2.0),   # inside the range: r A
    (1.1, -1.0, -1.1),   # inside the range
    (1.5, 1.0, 1.2),     # above the range, A > 0: clipped at 1.2
    (1.5, -1.0, -1.5),   # above the range, A < 0: unclipped
]


@pytest.mark.parametrize("jit", [True, False])
def test_ppo_clip_loss_by_hand(jit):
    ratio, advantage, surrogate = (np.array(c, np.float32) for c in zip(*SURROGATE_CASES))
    loss_fn = jax.jit(losses.ppo_clip_loss) if jit else losses.ppo_clip_loss
    loss = loss_fn(jnp.log(ratio), advantage, 0.2)
    np.testing.assert_allclose(loss, -surrogate.mean(), rtol=1e-6)


def test_ppo_clip_loss_has_no_gradient_where_clipped():
    ratio, advantage, _ = (np.array(c, np.float32) for c in zip(*SURROGATE_CASES))
    grad = jax.grad(losses.ppo_clip_loss)(jnp.log(ratio), advantage, 0.2)
    # d/dlogr of -(r A)/N is -r A / N where unclipped; zero where the clip binds
    clipped = np.array([False, True, False, False, True, False])
    expected = np.where(clipped, 0.0, -ratio * advantage / len(ratio))
    np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-7)


def test_value_loss_by_hand():
    value = jnp.array([0.5, 0.1, -0.5])
    target = jnp.array([1.0, 1.0, 0.0])
    np.testing.assert_allclose(losses.value_loss(value, target), 0.5 * (0.25 + 0.81 + 0.25) / 3, rtol=1e-6)
    # clipped around old value 0 by 0.2: predictions [0.2, 0.1, -0.2]; squared errors
    # [0.64, 0.81, 0.04]; the worse of raw and clipped: [0.64, 0.81, 0.25]
    clipped = losses.value_loss(value, target, jnp.zeros(3), 0.2)
    np.testing.assert_allclose(clipped, 0.5 * (0.64 + 0.81 + 0.25) / 3, rtol=1e-6)


def test_approx_kl_by_hand():
    np.testing.assert_allclose(losses.approx_kl(jnp.array([math.log(2.0), 0.0])),
                               ((2.0 - 1.0) - math.log(2.0)) / 2, rtol=1e-6)
    assert float(losses.approx_kl(jnp.zeros(5))) == 0.0
    # (r - 1) - log r >= 0 for every r: the estimator is never negative
    assert float(losses.approx_kl(jnp.log(jnp.array([0.3, 0.9, 1.7])))) > 0.0


def test_clip_fraction_by_hand():
    ratio = jnp.array([0.5, 1.0, 1.19, 1.21, 0.79])
    np.testing.assert_allclose(losses.clip_fraction(jnp.log(ratio), 0.2), 3 / 5)
    assert float(losses.clip_fraction(jnp.zeros(4), 0.2)) == 0.0


def test_explained_variance_by_hand():
    target = jnp.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(losses.explained_variance(target, target), 1.0)
    np.testing.assert_allclose(losses.explained_variance(jnp.full(4, 2.5), target), 0.0, atol=1e-7)
    # residual variance 0.25 against target variance 1.25
    noisy = target + jnp.array([0.5, -0.5, 0.5, -0.5])
    np.testing.assert_allclose(losses.explained_variance(noisy, target), 1.0 - 0.25 / 1.25, rtol=1e-6)
    assert np.isnan(losses.explained_variance(target, jnp.ones(4)))


def test_normalize():
    x = jnp.array([1.0, 2.0, 3.0, 10.0])
    normalized = losses.normalize(x)
    np.testing.assert_allclose(normalized.mean(), 0.0, atol=1e-6)
    np.testing.assert_allclose(normalized.std(), 1.0, rtol=1e-6)


# ----------------------------------------------------------------- the update

NUM_ENVS, NUM_STEPS, NUM_UPDATES = 4, 16, 4
BATCH = NUM_ENVS * NUM_STEPS
METRIC_KEYS = {"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
               "explained_variance", "grad_norm", "learning_rate"}


@pytest.fixture(scope="module")
def setup():
    """CartPole, a 16-unit policy, one behaviour trajectory collected with the learner's params."""
    env, env_params = make_env("CartPole-v1")
    policy = make_policy(NetworkConfig(hidden_sizes=(16,)), env.observation_space(env_params).shape,
                         env.action_space(env_params))
    rollout = make_rollout(env, env_params, policy, num_envs=NUM_ENVS, num_steps=NUM_STEPS,
                           gamma=0.99, gae_lambda=0.95)
    collect = jax.jit(rollout.collect)
    ppo = make_ppo(LearnerConfig(update_epochs=1, num_minibatches=1), policy,
                   num_updates=NUM_UPDATES, batch_size=BATCH)
    learner = ppo.init(jax.random.PRNGKey(0))
    rollout_state, traj = collect(learner.params, rollout.init(jax.random.PRNGKey(1)))
    return dict(policy=policy, collect=collect, rollout_state=rollout_state, traj=traj,
                learner=learner)


def _update(setup, cfg, learner=None):
    ppo = make_ppo(cfg, setup["policy"], num_updates=NUM_UPDATES, batch_size=BATCH)
    learner = ppo.init(jax.random.PRNGKey(0)) if learner is None else learner
    return jax.jit(ppo.update)(learner, setup["traj"])


def test_update_metrics_are_named_finite_scalars(setup):
    _, metrics = _update(setup, LearnerConfig(update_epochs=2, num_minibatches=4))
    assert set(metrics) == METRIC_KEYS
    for name, value in metrics.items():
        assert jnp.shape(value) == (), name
        assert np.isfinite(value), name


def test_first_minibatch_at_behaviour_params(setup):
    """One epoch, one minibatch: the metrics are the loss at the behaviour params.

    There the ratio is exactly 1, so approx_kl and clip_fraction are 0, the value
    clip does not bind, and every term has a closed form from the trajectory.
    """
    traj, policy, params = setup["traj"], setup["policy"], setup["learner"].params
    cfg = LearnerConfig(update_epochs=1, num_minibatches=1, normalize_advantages=False)
    _, metrics = _update(setup, cfg)
    advantage = np.asarray(traj.advantage, np.float64)
    assert abs(float(metrics["approx_kl"])) < 1e-6
    assert float(metrics["clip_fraction"]) == 0.0
    # ratio 1: the surrogate is the mean advantage itself
    assert abs(advantage.mean()) > 1e-2  # so a sign error would show
    np.testing.assert_allclose(metrics["policy_loss"], -advantage.mean(), rtol=1e-5)
    # value = old value, target = advantage + value
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * np.mean(advantage**2), rtol=1e-5)
    dist, _, _ = policy.step(params, traj.obs, policy.initial_carry(traj.reward.shape))  # a feedforward policy
    np.testing.assert_allclose(metrics["entropy"], np.mean(dist.entropy()), rtol=1e-5)
    expected_loss = (metrics["policy_loss"] + cfg.vf_coef * metrics["value_loss"]
                     - cfg.ent_coef * metrics["entropy"])
    np.testing.assert_allclose(metrics["loss"], expected_loss, rtol=1e-5)

    # with normalisation the surrogate at ratio 1 is -mean(normalised A) = 0
    _, normalized = _update(setup, LearnerConfig(update_epochs=1, num_minibatches=1))
    assert abs(float(normalized["policy_loss"])) < 1e-6
    assert abs(float(normalized["approx_kl"])) < 1e-6


@pytest.mark.parametrize("clip_value_loss", [True, False])
def test_away_from_the_behaviour_params_both_clips_bind_as_written_in_numpy(setup, clip_value_loss):
    """The loss at params moved off the behaviour policy's, where the ratio is not 1 (at the
    behaviour params no clip binds): the surrogate and the value loss against NumPy, with the
    config's clip range (0.1, not the default), so the loss must read it from the hyperparameters."""
    traj, policy = setup["traj"], setup["policy"]
    cfg = LearnerConfig(update_epochs=1, num_minibatches=1, clip_eps=0.1, clip_value_loss=clip_value_loss)
    # params a few large steps of descent away: the critic moved towards the targets, past the clip
    moved = _update(setup, LearnerConfig(update_epochs=8, num_minibatches=2, learning_rate=3e-2))[0].params
    learner = make_ppo(cfg, policy, num_updates=NUM_UPDATES, batch_size=BATCH).init(jax.random.PRNGKey(0))
    _, metrics = _update(setup, cfg, learner.replace(params=moved))

    dist, value, _ = policy.step(moved, traj.obs, policy.initial_carry(traj.reward.shape))
    ratio = np.exp(np.asarray(dist.log_prob(traj.action), np.float64) - np.asarray(traj.log_prob, np.float64))
    advantage = np.asarray(traj.advantage, np.float64)
    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    surrogate = -np.mean(np.minimum(ratio * advantage, np.clip(ratio, 0.9, 1.1) * advantage))
    outside = np.mean(np.abs(ratio - 1.0) > 0.1)
    assert 0.2 < outside < 0.9 and abs(surrogate + np.mean(ratio * advantage)) > 1e-3  # the clip binds
    np.testing.assert_allclose(metrics["clip_fraction"], outside, rtol=1e-6)
    np.testing.assert_allclose(metrics["policy_loss"], surrogate, rtol=1e-4)

    value, old_value, target = (np.asarray(x, np.float64) for x in (value, traj.value, traj.target))
    plain = 0.5 * np.mean((value - target) ** 2)
    clipped = 0.5 * np.mean(np.maximum((value - target) ** 2,
                                       (old_value + np.clip(value - old_value, -0.1, 0.1) - target) ** 2))
    assert abs(clipped - plain) > 1e-2 * plain  # the two forms differ here
    np.testing.assert_allclose(metrics["value_loss"], clipped if clip_value_loss else plain, rtol=1e-4)


def _reference_step(policy, params, traj, cfg, learning_rate):
    """One clipped-Adam gradient step on the whole batch, written with optax's own adam."""
    batch = jax.tree.map(lambda x: x.reshape((BATCH,) + x.shape[2:]), traj)

    def loss_fn(params):
        dist, value, _ = policy.step(params, batch.obs, policy.initial_carry((BATCH,)))
        log_ratio = dist.log_prob(batch.action) - batch.log_prob
        policy_loss = losses.ppo_clip_loss(log_ratio, losses.normalize(batch.advantage), cfg.clip_eps)
        value_loss = losses.value_loss(value, batch.target, batch.value, cfg.clip_eps)
        return policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * jnp.mean(dist.entropy())

    grads = jax.grad(loss_fn)(params)
    optimizer = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                            optax.adam(learning_rate, eps=1e-5))
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    return optax.apply_updates(params, updates), optax.tree.norm(grads)


def test_one_step_matches_clipped_adam_descent(setup):
    cfg = LearnerConfig(update_epochs=1, num_minibatches=1, learning_rate=1e-3)
    learner, metrics = _update(setup, cfg)
    reference = jax.jit(functools.partial(_reference_step, setup["policy"], cfg=cfg,
                                          learning_rate=cfg.learning_rate))
    params, grad_norm = reference(setup["learner"].params, setup["traj"])
    np.testing.assert_allclose(metrics["grad_norm"], grad_norm, rtol=1e-4)
    chex.assert_trees_all_close(learner.params, params, rtol=1e-4, atol=1e-6)
    assert int(learner.update_count) == 1


def test_learning_rate_anneals_linearly_to_zero(setup):
    cfg = LearnerConfig(update_epochs=1, num_minibatches=2, learning_rate=1e-3)
    ppo = make_ppo(cfg, setup["policy"], num_updates=NUM_UPDATES, batch_size=BATCH)
    update = jax.jit(ppo.update)
    learner = ppo.init(jax.random.PRNGKey(0))
    rates = []
    for _ in range(NUM_UPDATES):
        learner, metrics = update(learner, setup["traj"])
        rates.append(float(metrics["learning_rate"]))
    np.testing.assert_allclose(rates, [1e-3, 0.75e-3, 0.5e-3, 0.25e-3], rtol=1e-6)

    # past the end the step size is 0: the params must not move at all
    finished = learner.replace(update_count=jnp.asarray(NUM_UPDATES, jnp.int32))
    after, metrics = update(finished, setup["traj"])
    assert float(metrics["learning_rate"]) == 0.0
    chex.assert_trees_all_equal(after.params, finished.params)

    constant = make_ppo(LearnerConfig(update_epochs=1, num_minibatches=2, learning_rate=1e-3, anneal_lr=False),
                        setup["policy"], num_updates=NUM_UPDATES, batch_size=BATCH)
    _, metrics = jax.jit(constant.update)(finished, setup["traj"])
    np.testing.assert_allclose(metrics["learning_rate"], 1e-3)


def test_update_traces_once_over_iterations(setup):
    ppo = make_ppo(LearnerConfig(update_epochs=2, num_minibatches=2), setup["policy"],
                   num_updates=NUM_UPDATES, batch_size=BATCH)
    update = jax.jit(chex.assert_max_traces(ppo.update, n=1))
    learner, rollout_state = ppo.init(jax.random.PRNGKey(0)), setup["rollout_state"]
    digests = []
    for _ in range(3):
        rollout_state, traj = setup["collect"](learner.params, rollout_state)
        learner, _ = update(learner, traj)
        digests.append(np.asarray(jax.tree.leaves(learner.params)[0]).copy())
    assert int(learner.update_count) == 3
    assert not np.array_equal(digests[0], digests[-1])


def test_update_is_deterministic(setup):
    cfg = LearnerConfig(update_epochs=2, num_minibatches=4)
    first, _ = _update(setup, cfg)
    second, _ = _update(setup, cfg)
    chex.assert_trees_all_equal(first.params, second.params)
    assert not np.array_equal(first.key, setup["learner"].key)  # the shuffling key advances


def test_minibatches_must_divide_the_batch(setup):
    with pytest.raises(ValueError, match="num_minibatches=3"):
        make_ppo(LearnerConfig(num_minibatches=3), setup["policy"], num_updates=1, batch_size=BATCH)
