"""Temporally correlated exploration noise for Gaussian policies (`--action-noise-correlation`).

A Gaussian policy acts `mean + std * eps`. With white noise, eps is drawn afresh at every step,
and the actions average out within a few steps: on MountainCarContinuous-v0 the car jitters at
the bottom, never reaches the flag, and the learner settles on standing still (the action costs,
the flag is never seen). Eberhard et al. (ICLR 2023, "Pink Noise Is All You Need") showed that
correlating eps over time explores such tasks; here it is a first-order autoregression per env,

    eps_t = c * eps_{t-1} + sqrt(1 - c^2) * z_t,   z_t ~ N(0, I),   eps_0 = z_0 at an episode's start,

whose every eps_t is still N(0, I) (the policy's density at the action is unchanged, so the
learners' log-probabilities need nothing new) with correlation c^k between steps k apart: a
correlation time of about 1 / (1 - c) steps (c = 0.99: ~100 steps, MountainCarContinuous's
swing). c = 0 is white noise. The state `eps_{t-1}` lives in `RolloutState.noise` (so a
checkpoint resumes it exactly). Evaluation's sampling policy keeps white noise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def check_correlation(correlation: float, discrete: bool) -> bool:
    """Whether the actions are correlated; raises ValueError for a correlation outside [0, 1) or
    on a discrete action space (no Gaussian noise to correlate)."""
    if not 0.0 <= correlation < 1.0:
        raise ValueError(f"action_noise_correlation={correlation!r} must be in [0, 1): 0 is white noise, "
                         "0.99 correlates actions over ~100 steps")
    if correlation > 0.0 and discrete:
        raise ValueError(f"action_noise_correlation={correlation} correlates a Gaussian policy's noise over time, "
                         "but this env's actions are discrete: use --action-noise-correlation 0")
    return correlation > 0.0


def initial_noise(num_envs: int, action_shape: tuple[int, ...]) -> jax.Array:
    """The noise state before the first step (every env starts an episode, so it is redrawn)."""
    return jnp.zeros((num_envs, *action_shape), jnp.float32)


def next_noise(key: jax.Array, previous: jax.Array, episode_start: jax.Array, correlation: float) -> jax.Array:
    """eps_t from eps_{t-1} `[B, ...]`; envs where `episode_start` `[B]` is true draw it afresh."""
    return correlate(fresh_noise(key, previous.shape), previous, episode_start, correlation)


def fresh_noise(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """The step's new standard-normal draw z_t `[B, ...]` (a host actor draws a fragment's at once)."""
    return jax.random.normal(key, shape, jnp.float32)


def correlate(fresh: jax.Array, previous: jax.Array, episode_start: jax.Array, correlation: float) -> jax.Array:
    """eps_t = C eps_{t-1} + sqrt(1 - C^2) z_t for the step's draw z_t = `fresh`; z_t itself where an
    episode starts."""
    correlated = correlation * previous + jnp.sqrt(1.0 - correlation**2) * fresh
    start = episode_start.reshape(episode_start.shape + (1,) * (previous.ndim - episode_start.ndim))
    return jnp.where(start, fresh, correlated)
