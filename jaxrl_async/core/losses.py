"""Pure loss terms, each on a flat batch `[N]` and returning a scalar (to minimise)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def normalize(x: jax.Array, eps: float = 1e-8) -> jax.Array:
    """Zero-mean, unit-std over the batch (per-minibatch advantage normalisation)."""
    return (x - x.mean()) / (x.std() + eps)


def ppo_clip_loss(log_ratio: jax.Array, advantage: jax.Array, clip_eps) -> jax.Array:
    """PPO clipped surrogate (Schulman et al. 2017, eq. 7), negated.

    L = -mean(min(r * A, clip(r, 1 - eps, 1 + eps) * A)),  r = pi(a|s) / mu(a|s).
    """
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantage
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantage
    return -jnp.mean(jnp.minimum(unclipped, clipped))


def policy_gradient_loss(log_prob: jax.Array, advantage: jax.Array, weight: jax.Array | float = 1.0) -> jax.Array:
    """-mean(w * A * log pi(a|s)): REINFORCE / A2C / V-trace policy gradient, negated.

    `advantage` and `weight` are treated as constants (the caller stops their gradients).
    """
    return -jnp.mean(weight * advantage * log_prob)


def value_loss(value: jax.Array, target: jax.Array, old_value: jax.Array | None = None,
               clip_eps=None) -> jax.Array:
    """0.5 * mean squared error; clipped around `old_value` when `clip_eps` is given.

    The clipped form takes the worse of the raw and the clipped prediction, so the
    value function cannot move more than `clip_eps` from the behaviour value for free.
    """
    error = jnp.square(value - target)
    if clip_eps is not None:
        clipped_value = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
        error = jnp.maximum(error, jnp.square(clipped_value - target))
    return 0.5 * jnp.mean(error)


def approx_kl(log_ratio: jax.Array) -> jax.Array:
    """Low-variance estimator of KL(mu || pi): mean((r - 1) - log r) (Schulman 2020)."""
    return jnp.mean(jnp.expm1(log_ratio) - log_ratio)


def clip_fraction(log_ratio: jax.Array, clip_eps) -> jax.Array:
    """Fraction of samples whose ratio lies outside [1 - eps, 1 + eps]."""
    return jnp.mean((jnp.abs(jnp.exp(log_ratio) - 1.0) > clip_eps).astype(jnp.float32))


def explained_variance(value: jax.Array, target: jax.Array) -> jax.Array:
    """1 - Var(target - value) / Var(target); 1 is perfect, <= 0 is no better than a constant."""
    var_target = jnp.var(target)
    return jnp.where(var_target > 0, 1.0 - jnp.var(target - value) / jnp.maximum(var_target, 1e-12),
                     jnp.nan)
