"""The learners' optimiser: global-norm clipping then Adam's scaling; the caller applies the step.

The step size is applied by `sgd_step` rather than inside optax, so it can be annealed
and swept (vmapped) as an array. (Running the optimiser on the params raveled into one
vector was measured slower end to end on the CPU, so it runs leaf by leaf.)

The global norm of a small tree is one reduction over the leaves laid end to end
(`global_norm`), where optax's is one reduction per leaf and a sum of them: the same norm to
float rounding, in one kernel rather than two per leaf, which a learner pays at every gradient
step. Laying the leaves end to end copies every gradient, so above `CONCATENATE_AT_MOST` entries
(the 256-wide networks of the flagship presets) each leaf is reduced on its own: there the one
kernel saves nothing, and XLA:CPU's concatenation of that size ran up to ten times slower in some
processes than in others (both measured in docs/benchmarks.md, "The gradient norm's
concatenation"). The learners report the same norm as their `grad_norm` metric, which XLA then
computes once.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax


# where the one kernel stops paying: the two ways cost the same at a 128-wide MLP's gradients
CONCATENATE_AT_MOST = 1 << 15


def norm_laid_end_to_end(tree: Any) -> jax.Array:
    """sqrt(sum of every leaf's squared entries), the leaves reduced as one vector."""
    return jnp.sqrt(jnp.sum(jnp.square(jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(tree)]))))


def norm_leaf_by_leaf(tree: Any) -> jax.Array:
    """sqrt(sum of every leaf's squared entries), each leaf reduced on its own and the sums added."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(tree)))


def global_norm(tree: Any) -> jax.Array:
    """The tree's norm: `norm_laid_end_to_end` up to `CONCATENATE_AT_MOST` entries,
    `norm_leaf_by_leaf` above it."""
    small = sum(leaf.size for leaf in jax.tree.leaves(tree)) <= CONCATENATE_AT_MOST
    return norm_laid_end_to_end(tree) if small else norm_leaf_by_leaf(tree)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """optax.clip_by_global_norm's rule (leave the updates where their global norm is below
    `max_norm`, else scale them to it) with `global_norm`."""

    def update(updates, state, params=None):
        del params
        norm = global_norm(updates)
        scale = max_norm / norm
        return jax.tree.map(lambda t: jax.lax.select(norm < max_norm, t, t * scale.astype(t.dtype)), updates), state

    return optax.GradientTransformation(optax.init_empty_state, update)


def make_optimizer(max_grad_norm: float) -> optax.GradientTransformation:
    """Clip by global norm, then scale by Adam (eps 1e-5)."""
    return optax.chain(clip_by_global_norm(max_grad_norm), optax.scale_by_adam(eps=1e-5))


def sgd_step(params: Any, updates: Any, learning_rate: jax.Array) -> Any:
    """params - learning_rate * updates."""
    return jax.tree.map(lambda p, u: p - learning_rate * u, params, updates)
