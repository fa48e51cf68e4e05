"""IMPALA's learner (Espeholt et al. 2018): actor-critic with V-trace off-policy correction.

The learner re-values every step with its current params, V(obs_t) and
V(next_obs_t) (the pre-reset observation, so a truncated step bootstraps from
V(final observation)), and forms the importance ratios rho_t = pi(a_t|s_t) /
mu(a_t|s_t) against the behaviour policy the actor used. `vtrace` turns them into
value targets `vs` and policy-gradient advantages, with the same episode-boundary
rules as GAE: discount_t = gamma * (1 - terminated_t), lambda_t = lambda * (1 -
truncated_t) (`--gae-lambda` is V-trace's lambda; the paper uses 1). Its natural
home is the async mode with `--lag latest`, where the data is a version or two
stale; minibatches are whole env sequences, since V-trace runs along time.

Those whole sequences are also what a recurrent policy replays, so IMPALA trains
one as it trains a feedforward one: `unroll` from the fragment's initial carry gives
V(obs_t) and the carry after each step, with which `value_step` gives V(next_obs_t),
as the rollout computes its bootstrap values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_async.core import losses
from jaxrl_async.core.advantages import gae_inputs, vtrace
from jaxrl_async.algorithms.sgd import actor_critic, make_learner, replay, replay_batch
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.speed import SpeedSettings
from jaxrl_async.types import Algorithm, Learner, Trajectory

_FIELDS = ("obs", "next_obs", "action", "log_prob", "reward", "terminated", "truncated")


def make_impala(cfg, policy: Policy, *, num_updates: int, unroll: int = 1, scan: str = "sequential") -> Algorithm:
    # one sequence [T] -> V-trace outputs [T]; vmapped over the minibatch's sequences
    sequence_vtrace = jax.vmap(
        lambda v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_t: vtrace(
            v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_t, clip_rho_threshold=cfg.clip_rho_threshold,
            clip_pg_rho_threshold=cfg.clip_pg_rho_threshold, scan=scan))

    def loss_fn(params, batch, hp):
        dist, v_tm1, carry_after = replay(policy, params, batch)  # [b, T]
        v_t = policy.value_step(params, batch["next_obs"], carry_after)
        log_prob = dist.log_prob(batch["action"])
        log_rho = log_prob - batch["log_prob"]
        discount_t, lambda_t = gae_inputs(batch["reward"], batch["terminated"], batch["truncated"],
                                          cfg.gamma, cfg.gae_lambda)
        targets = sequence_vtrace(v_tm1, v_t, batch["reward"], discount_t,
                                  jax.lax.stop_gradient(jnp.exp(log_rho)), lambda_t)
        policy_loss = losses.policy_gradient_loss(log_prob, targets.pg_advantage)
        value_loss = losses.value_loss(v_tm1, targets.vs)
        entropy = jnp.mean(dist.entropy())
        loss = policy_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy
        return loss, dict(loss=loss, policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                          approx_kl=losses.approx_kl(log_rho), rho_mean=jnp.mean(jnp.exp(log_rho)),
                          explained_variance=losses.explained_variance(v_tm1, targets.vs))

    def batch_fn(trajectory: Trajectory):
        # whole fragments whatever the policy: V-trace runs along time
        batch, num_sequences = replay_batch(trajectory, _FIELDS, None)
        return batch, num_sequences, {}

    return make_learner(cfg, policy, loss_fn, batch_fn, num_updates=num_updates, unroll=unroll)


def _make(cfg, policy, nets, speed: SpeedSettings) -> Algorithm:
    return make_impala(cfg.learner, policy, num_updates=cfg.num_updates, unroll=speed.update_unroll,
                       scan=speed.gae_scan)


LEARNER = Learner(networks=actor_critic, make=_make)
