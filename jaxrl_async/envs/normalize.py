"""Running observation normalisation as pure functions over a pytree.

The statistics live in the trainer's rollout state, not in an env wrapper: the
rollout calls `stats.update(obs_batch)` with each batch of observations and
`stats.normalize(obs)` before the network sees them.
"""

from __future__ import annotations

from collections.abc import Sequence

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class RunningMeanStd:
    """Running per-feature mean and variance (population, ddof=0).

    Attributes:
      mean: [*obs_shape] float32.
      var: [*obs_shape] float32.
      count: [] float32, number of observations merged so far.
    """

    mean: jax.Array
    var: jax.Array
    count: jax.Array

    @classmethod
    def create(cls, obs_shape: Sequence[int]) -> "RunningMeanStd":
        """Empty statistics; `normalize` is the identity until the first update."""
        obs_shape = tuple(obs_shape)
        return cls(
            mean=jnp.zeros(obs_shape, jnp.float32),
            var=jnp.ones(obs_shape, jnp.float32),
            # count 0: the first update replaces mean/var with the batch's exactly
            count=jnp.zeros((), jnp.float32),
        )

    def update(self, batch_obs: jax.Array) -> "RunningMeanStd":
        """Merges a batch into the running statistics.

        Chan, Golub & LeVeque (1979) parallel combination of (mean, M2, count):
            delta = mean_b - mean_a,  n = n_a + n_b
            mean  = mean_a + delta * n_b / n
            M2    = M2_a + M2_b + delta^2 * n_a * n_b / n,  var = M2 / n

        Args:
          batch_obs: [N, *obs_shape], batch along axis 0 (N >= 1). Flatten
            [T, B, ...] to [T * B, ...] first.
        """
        chex.assert_shape(batch_obs, (None, *self.mean.shape))
        batch_obs = jnp.asarray(batch_obs, jnp.float32)
        batch_count = jnp.asarray(batch_obs.shape[0], jnp.float32)
        batch_mean = jnp.mean(batch_obs, axis=0)
        batch_var = jnp.var(batch_obs, axis=0)

        total = self.count + batch_count
        delta = batch_mean - self.mean
        mean = self.mean + delta * (batch_count / total)
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + jnp.square(delta) * (self.count * batch_count / total)
        )
        return self.replace(mean=mean, var=m2 / total, count=total)

    def normalize(self, obs: jax.Array, clip: float = 10.0) -> jax.Array:
        """clip((obs - mean) / sqrt(var + 1e-8), -clip, clip); obs: [..., *obs_shape]."""
        obs = jnp.asarray(obs, jnp.float32)
        return jnp.clip((obs - self.mean) / jnp.sqrt(self.var + 1e-8), -clip, clip)
