"""The two action distributions the actor-critic emits, as small pytrees.

Each offers `sample(key)`, `log_prob(action)`, `entropy()` and `mode()` (the greedy
action). Batch shapes follow the parameters: logits `[..., A]`, mean `[..., D]`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

_LOG_2PI = math.log(2.0 * math.pi)


@struct.dataclass
class Categorical:
    logits: jax.Array  # [..., A] unnormalised log-probabilities

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.categorical(key, self.logits, axis=-1)

    def log_prob(self, action: jax.Array) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits, axis=-1)
        return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits, axis=-1)
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1)


@struct.dataclass
class DiagGaussian:
    mean: jax.Array  # [..., D]
    log_std: jax.Array  # [..., D] (broadcast from a state-independent [D] parameter)

    def sample(self, key: jax.Array) -> jax.Array:
        noise = jax.random.normal(key, self.mean.shape, self.mean.dtype)
        return self.mean + jnp.exp(self.log_std) * noise

    def log_prob(self, action: jax.Array) -> jax.Array:
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z * z - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(self.log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)

    def mode(self) -> jax.Array:
        return self.mean
