"""Running observation normalisation as pure functions over a pytree.

The statistics live in the trainer's rollout state, not in an env wrapper: the
rollout calls `stats.update(obs_batch)` with each batch of observations and
`stats.normalize(obs)` before the network sees them.

An observation's action mask (`spaces.ACTION_MASK`) is never normalised: its 0s and 1s say which
actions are legal, and the policy reads them as they are. Its statistics stay at mean 0, var 1
(unused), so the statistics keep the observation's structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.envs.spaces import is_action_mask_path, map_shapes


class _Merged:
    """One leaf's merged statistics: a plain object, so a tree of them keeps the leaves' structure."""

    def __init__(self, mean: jax.Array, var: jax.Array):
        self.mean, self.var = mean, var


@struct.dataclass
class RunningMeanStd:
    """Running per-feature mean and variance (population, ddof=0).

    For a nested observation (a dict / tuple of leaves) `mean` and `var` are trees of the
    same structure: every leaf, images included, is normalised on its own features, and
    one count serves all (every observation has every leaf).

    Attributes:
      mean: [*obs_shape] float32 (or a tree of them).
      var: [*obs_shape] float32 (or a tree of them).
      count: [] float32, number of observations merged so far.
    """

    mean: jax.Array
    var: jax.Array
    count: jax.Array

    @classmethod
    def create(cls, obs_shape: Sequence[int] | Any) -> "RunningMeanStd":
        """Empty statistics; `normalize` is the identity until the first update. `obs_shape`:
        a shape, or a dict / tuple of shapes (`spaces.observation_shapes`)."""
        return cls(
            mean=map_shapes(lambda s: jnp.zeros(s, jnp.float32), obs_shape),
            var=map_shapes(lambda s: jnp.ones(s, jnp.float32), obs_shape),
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
          batch_obs: [N, *obs_shape], batch along axis 0 (N >= 1), or a tree of such
            leaves. Flatten [T, B, ...] to [T * B, ...] first.
        """
        batch_count = jnp.asarray(jax.tree.leaves(batch_obs)[0].shape[0], jnp.float32)
        total = self.count + batch_count

        def merge(path, mean, var, batch_obs):
            chex.assert_shape(batch_obs, (None, *mean.shape))
            if is_action_mask_path(path):
                return _Merged(mean, var)
            batch_obs = jnp.asarray(batch_obs, jnp.float32)
            batch_mean = jnp.mean(batch_obs, axis=0)
            batch_var = jnp.var(batch_obs, axis=0)
            delta = batch_mean - mean
            m2 = var * self.count + batch_var * batch_count + jnp.square(delta) * (self.count * batch_count / total)
            return _Merged(mean + delta * (batch_count / total), m2 / total)

        merged = jax.tree.map_with_path(merge, self.mean, self.var, batch_obs)
        return self.replace(mean=jax.tree.map(lambda m: m.mean, merged),
                            var=jax.tree.map(lambda m: m.var, merged), count=total)

    def normalize(self, obs: jax.Array, clip: float = 10.0) -> jax.Array:
        """clip((obs - mean) / sqrt(var + 1e-8), -clip, clip); obs: [..., *obs_shape] (or a tree,
        whose action mask passes as it is)."""
        def normalize(path, mean, var, obs):
            obs = jnp.asarray(obs, jnp.float32)
            if is_action_mask_path(path):
                return obs
            return jnp.clip((obs - mean) / jnp.sqrt(var + 1e-8), -clip, clip)
        return jax.tree.map_with_path(normalize, self.mean, self.var, obs)
