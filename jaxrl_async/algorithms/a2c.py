"""Advantage actor-critic (A2C, the synchronous form of Mnih et al. 2016).

The policy gradient uses the rollout's GAE advantages (n-step returns with
`--gae-lambda 1`), the critic regresses on the GAE value targets, and an entropy
bonus keeps the policy exploring. With `importance_weights` each term is weighted
by the truncated ratio min(1, pi/mu) against the behaviour policy, so the update
stays sound on the slightly stale data of the async pipeline (`--lag 1`).
One pass over the whole rollout (`--update-epochs 1 --num-minibatches 1`) is
classic A2C; more passes reuse the data as PPO does, without its clipping.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxrl_async.core import losses
from jaxrl_async.algorithms.sgd import (actor_critic, LearnerHyperparams, make_learner, replay, replay_batch,
                                           truncated_importance_weight)
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.speed import SpeedSettings
from jaxrl_async.types import Algorithm, Learner, Trajectory

_FIELDS = ("obs", "action", "log_prob", "advantage", "target")


def policy_gradient_terms(cfg, policy: Policy, params, batch: dict, advantage, target,
                          hp: LearnerHyperparams) -> tuple:
    """The loss shared by A2C and REINFORCE: weighted policy gradient + value regression - entropy."""
    dist, value, _ = replay(policy, params, batch)
    log_prob = dist.log_prob(batch["action"])
    weight = truncated_importance_weight(log_prob, batch["log_prob"]) if cfg.importance_weights else 1.0
    if cfg.normalize_advantages:
        advantage = losses.normalize(advantage)
    policy_loss = losses.policy_gradient_loss(log_prob, advantage, weight)
    value_loss = losses.value_loss(value, target)
    entropy = jnp.mean(dist.entropy())
    loss = policy_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy
    log_ratio = log_prob - batch["log_prob"]
    return loss, dict(loss=loss, policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                      approx_kl=losses.approx_kl(log_ratio), importance_weight=jnp.mean(weight))


def make_a2c(cfg, policy: Policy, *, num_updates: int, unroll: int = 1) -> Algorithm:
    def loss_fn(params, batch, hp):
        return policy_gradient_terms(cfg, policy, params, batch, batch["advantage"], batch["target"], hp)

    def batch_fn(trajectory: Trajectory):
        batch, size = replay_batch(trajectory, _FIELDS, policy.replay_length)
        return batch, size, {"explained_variance": losses.explained_variance(trajectory.value, trajectory.target)}

    return make_learner(cfg, policy, loss_fn, batch_fn, num_updates=num_updates, unroll=unroll)


def _make(cfg, policy, nets, speed: SpeedSettings) -> Algorithm:
    return make_a2c(cfg.learner, policy, num_updates=cfg.num_updates, unroll=speed.update_unroll)


LEARNER = Learner(networks=actor_critic, make=_make)
