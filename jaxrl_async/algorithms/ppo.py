"""Proximal Policy Optimisation (Schulman et al. 2017) as an `Algorithm(init, update)`.

    ppo = make_ppo(cfg.learner, policy, num_updates=..., batch_size=...)
    learner = ppo.init(key)
    learner, metrics = ppo.update(learner, trajectory)

`update` runs `update_epochs x num_minibatches` gradient steps over shuffled
minibatches of the trajectory's transitions (whole env sequences for a recurrent
policy; `sgd.make_learner`, `sgd.replay_batch`).
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxrl_async.core import losses
from jaxrl_async.algorithms.sgd import actor_critic, LearnerHyperparams, make_learner, replay, replay_batch
from jaxrl_async.config import check_minibatches
from jaxrl_async.speed import SpeedSettings
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.types import Algorithm, Learner, Trajectory

PPOHyperparams = LearnerHyperparams  # the name sweeps of PPO use
_FIELDS = ("obs", "action", "log_prob", "value", "advantage", "target")


def make_ppo(cfg, policy: Policy, *, num_updates: int, batch_size: int, unroll: int = 1) -> Algorithm:
    """PPO for a policy and a rollout of `batch_size = T * B` transitions.

    Args:
      cfg: learner hyperparameters (`LearnerConfig`).
      policy: the actor-critic's pure functions.
      num_updates: iterations in the run (for linear learning-rate annealing).
      batch_size: transitions per trajectory; `cfg.num_minibatches` must divide it (and,
        when the learner shuffles whole env sequences, the number of envs: checked
        when `update` lays the batch out).
    """
    # holds for every layout (a divisor of num_envs divides num_envs*num_steps); `make_learner`
    # checks the count of the sequences it shuffles at the first update
    check_minibatches(cfg.num_minibatches, batch_size)

    def loss_fn(params, batch, hp: LearnerHyperparams):
        dist, value, _ = replay(policy, params, batch)
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

    def batch_fn(trajectory: Trajectory):
        batch, size = replay_batch(trajectory, _FIELDS, policy.replay_length)
        return batch, size, {"explained_variance": losses.explained_variance(trajectory.value, trajectory.target)}

    return make_learner(cfg, policy, loss_fn, batch_fn, num_updates=num_updates, unroll=unroll)


def _make(cfg, policy, nets, speed: SpeedSettings) -> Algorithm:
    return make_ppo(cfg.learner, policy, num_updates=cfg.num_updates, batch_size=cfg.batch_size,
                    unroll=speed.update_unroll)


LEARNER = Learner(networks=actor_critic, make=_make)
