"""Proximal Policy Optimisation (Schulman et al. 2017) as an `Algorithm(init, update)`.

    ppo = make_ppo(cfg.ppo, policy, num_updates=..., batch_size=...)
    learner = ppo.init(key)
    learner, metrics = ppo.update(learner, trajectory)

`update` runs `update_epochs x num_minibatches` gradient steps as two nested
`lax.scan`s over shuffled minibatches of the `[T, B]` trajectory.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_async import losses
from jaxrl_async.config import PPOConfig
from jaxrl_async.networks import Policy
from jaxrl_async.optimizer import make_optimizer, sgd_step
from jaxrl_async.types import Algorithm, LearnerState, Trajectory

# The trajectory fields the learner reads, flattened to [T * B, ...].
_BATCH_FIELDS = ("obs", "action", "log_prob", "value", "advantage", "target")


@struct.dataclass
class PPOHyperparams:
    """Shape-free hyperparameters as arrays: training can be vmapped over them."""

    learning_rate: jax.Array
    ent_coef: jax.Array
    vf_coef: jax.Array
    clip_eps: jax.Array

    @classmethod
    def from_config(cls, cfg: PPOConfig) -> "PPOHyperparams":
        return cls(*(jnp.asarray(getattr(cfg, f), jnp.float32)
                     for f in ("learning_rate", "ent_coef", "vf_coef", "clip_eps")))


def make_ppo(cfg: PPOConfig, policy: Policy, *, num_updates: int, batch_size: int) -> Algorithm:
    """Build PPO for a policy and a rollout of `batch_size = T * B` transitions.

    Args:
      cfg: PPO hyperparameters.
      policy: the actor-critic's pure functions.
      num_updates: iterations in the run (for linear learning-rate annealing).
      batch_size: transitions per trajectory; `cfg.num_minibatches` must divide it.
    """
    if batch_size % cfg.num_minibatches:
        raise ValueError(f"num_minibatches={cfg.num_minibatches} must divide the rollout's "
                         f"batch of {batch_size} transitions")
    optimizer = make_optimizer(cfg.max_grad_norm)

    def init(key: jax.Array, hparams: PPOHyperparams | None = None) -> LearnerState:
        key, init_key = jax.random.split(key)
        params = policy.init(init_key)
        return LearnerState(params=params, opt_state=optimizer.init(params), key=key,
                            update_count=jnp.zeros((), jnp.int32),
                            hparams=PPOHyperparams.from_config(cfg) if hparams is None else hparams)

    def loss_fn(params, batch, hp: PPOHyperparams):
        dist, value = policy.apply(params, batch["obs"])
        log_ratio = dist.log_prob(batch["action"]) - batch["log_prob"]
        advantage = batch["advantage"]
        if cfg.normalize_advantages:
            advantage = losses.normalize(advantage)
        policy_loss = losses.ppo_clip_loss(log_ratio, advantage, hp.clip_eps)
        value_loss = losses.value_loss(value, batch["target"], batch["value"],
                                       hp.clip_eps if cfg.clip_value_loss else None)
        entropy = jnp.mean(dist.entropy())
        loss = policy_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy
        return loss, dict(loss=loss, policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                          approx_kl=losses.approx_kl(log_ratio),
                          clip_fraction=losses.clip_fraction(log_ratio, hp.clip_eps))

    def update(learner: LearnerState, trajectory: Trajectory) -> tuple[LearnerState, dict]:
        hp = learner.hparams
        learning_rate = hp.learning_rate
        if cfg.anneal_lr:
            learning_rate = learning_rate * (1.0 - learner.update_count.astype(jnp.float32) / num_updates)
        batch = {f: getattr(trajectory, f) for f in _BATCH_FIELDS}
        batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)

        def minibatch_step(carry, minibatch):
            params, opt_state = carry
            grads, metrics = jax.grad(loss_fn, has_aux=True)(params, minibatch, hp)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = sgd_step(params, updates, learning_rate)
            return (params, opt_state), {**metrics, "grad_norm": optax.tree.norm(grads)}

        def epoch(carry, _):
            params, opt_state, key = carry
            key, perm_key = jax.random.split(key)
            order = jax.random.permutation(perm_key, batch_size)
            minibatches = jax.tree.map(
                lambda x: jnp.take(x, order, axis=0).reshape((cfg.num_minibatches, -1) + x.shape[1:]),
                batch)
            (params, opt_state), metrics = jax.lax.scan(minibatch_step, (params, opt_state), minibatches)
            return (params, opt_state, key), metrics

        (params, opt_state, key), metrics = jax.lax.scan(
            epoch, (learner.params, learner.opt_state, learner.key), None, length=cfg.update_epochs)
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics["explained_variance"] = losses.explained_variance(trajectory.value, trajectory.target)
        metrics["learning_rate"] = learning_rate
        learner = learner.replace(params=params, opt_state=opt_state, key=key,
                                  update_count=learner.update_count + 1)
        return learner, metrics

    return Algorithm(init, update)
