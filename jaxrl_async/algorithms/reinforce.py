"""REINFORCE (Williams 1992) with Monte-Carlo returns, optionally with a learned baseline.

The return of each step, `G_t = r_t + discount_t * G_{t+1}`, stops at a
termination, and bootstraps from the critic where the rollout cannot see the rest
of the episode: at the fragment's end and at a time-limit truncation (from
V(final observation)) — `lambda_returns` with lambda = 1 - truncated. The critic is
always trained on G (it supplies those bootstraps); `reinforce_baseline` decides
whether it is also subtracted from G to reduce the gradient's variance. Truncated
importance weights min(1, pi/mu) as in A2C.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_async.core import losses
from jaxrl_async.core.advantages import batched_lambda_returns, gae_inputs
from jaxrl_async.algorithms.a2c import policy_gradient_terms
from jaxrl_async.algorithms.sgd import actor_critic, make_learner, replay_batch
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.speed import SpeedSettings
from jaxrl_async.types import Algorithm, Learner, Trajectory


def monte_carlo_returns(trajectory: Trajectory, gamma: float, scan: str = "sequential") -> jax.Array:
    """[T, B] returns that respect episode ends and bootstrap at truncations and the fragment end
    (`scan`: the recursion's form, speed only)."""
    discount_t, lambda_t = gae_inputs(trajectory.reward, trajectory.terminated, trajectory.truncated, gamma, 1.0)
    return batched_lambda_returns(trajectory.reward, discount_t, trajectory.bootstrap_value, lambda_t, scan)


def make_reinforce(cfg, policy: Policy, *, num_updates: int, unroll: int = 1, scan: str = "sequential") -> Algorithm:
    def loss_fn(params, batch, hp):
        returns = batch["returns"]
        advantage = returns - batch["value"] if cfg.reinforce_baseline else returns
        return policy_gradient_terms(cfg, policy, params, batch, advantage, returns, hp)

    def batch_fn(trajectory: Trajectory):
        returns = monte_carlo_returns(trajectory, cfg.gamma, scan)
        batch, size = replay_batch(trajectory, ("obs", "action", "log_prob", "value"), policy.replay_length,
                                   {"returns": returns})
        return batch, size, {"explained_variance": losses.explained_variance(trajectory.value, returns),
                             "return_mean": jnp.mean(returns)}

    return make_learner(cfg, policy, loss_fn, batch_fn, num_updates=num_updates, unroll=unroll)


def _make(cfg, policy, nets, speed: SpeedSettings) -> Algorithm:
    return make_reinforce(cfg.learner, policy, num_updates=cfg.num_updates, unroll=speed.update_unroll,
                          scan=speed.gae_scan)


LEARNER = Learner(networks=actor_critic, make=_make)
