"""The learners' optimiser (core/optimizer.py): the global norm against NumPy, the clip against optax's."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl_async.core.optimizer import CONCATENATE_AT_MOST, clip_by_global_norm, global_norm, make_optimizer


def grads(scale: float, seed: int = 0) -> dict:
    """A params-shaped tree: kernels and biases of two layers, and a scalar."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 5)
    shapes = {"dense_0": {"kernel": (4, 8), "bias": (8,)}, "dense_1": {"kernel": (8, 2), "bias": (2,)}, "log_std": ()}
    leaves, tree = jax.tree.flatten(shapes, is_leaf=lambda x: isinstance(x, tuple))
    return jax.tree.unflatten(tree, [scale * jax.random.normal(key, shape) for key, shape in zip(keys, leaves)])


def numpy_norm(tree) -> float:
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(x, np.float64))) for x in jax.tree.leaves(tree))))


def test_global_norm_is_the_norm_of_every_leaf_together():
    tree = grads(1.0)
    np.testing.assert_allclose(jax.jit(global_norm)(tree), numpy_norm(tree), rtol=1e-6)
    one = jnp.array([3.0, 4.0])
    assert float(global_norm(one)) == 5.0  # a single leaf, and a tree with one leaf
    assert float(global_norm({"only": one})) == 5.0


def primitives(fn, *args) -> set[str]:
    return {eqn.primitive.name for eqn in jax.make_jaxpr(fn)(*args).eqns}


def test_a_large_tree_is_reduced_leaf_by_leaf_to_the_same_norm():
    """Above CONCATENATE_AT_MOST entries the leaves are not laid end to end (that copies every
    gradient at each step); a small tree's are, in one reduction. The norm is NumPy's either way."""
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    large = {"kernel": jax.random.normal(keys[0], (256, 256)), "bias": jax.random.normal(keys[1], (256,))}
    assert sum(leaf.size for leaf in jax.tree.leaves(large)) > CONCATENATE_AT_MOST
    np.testing.assert_allclose(jax.jit(global_norm)(large), numpy_norm(large), rtol=1e-6)
    assert "concatenate" not in primitives(global_norm, large)
    assert "concatenate" in primitives(global_norm, grads(1.0))


def test_below_the_bound_updates_pass_unchanged():
    tree = grads(0.01)
    assert numpy_norm(tree) < 1.0
    clipped, _ = jax.jit(clip_by_global_norm(1.0).update)(tree, optax.EmptyState())
    jax.tree.map(np.testing.assert_array_equal, clipped, tree)


@pytest.mark.parametrize("max_norm", [0.5, 3.0])
def test_above_the_bound_updates_are_scaled_to_it_as_optax_scales_them(max_norm):
    tree = grads(2.0)
    assert numpy_norm(tree) > max_norm
    clipped, _ = jax.jit(clip_by_global_norm(max_norm).update)(tree, optax.EmptyState())
    np.testing.assert_allclose(numpy_norm(clipped), max_norm, rtol=1e-6)
    ratio = numpy_norm(tree) / max_norm  # one scale for every leaf: the direction is kept
    jax.tree.map(lambda c, g: np.testing.assert_allclose(c, np.asarray(g) / ratio, rtol=1e-5, atol=1e-7), clipped, tree)
    reference, _ = optax.clip_by_global_norm(max_norm).update(tree, optax.EmptyState())
    jax.tree.map(lambda c, r: np.testing.assert_allclose(c, r, rtol=1e-5, atol=1e-7), clipped, reference)


def test_make_optimizer_is_the_clip_then_adams_scaling():
    """Four steps against Adam written out in NumPy (beta1 0.9, beta2 0.999, eps 1e-5, after the
    clip): one step alone cannot tell the betas apart, its bias-corrected update is g / (|g| + eps)."""
    params, ours = grads(1.0), make_optimizer(0.5)
    state, update = ours.init(params), jax.jit(ours.update)
    moments = [jax.tree.map(lambda p: np.zeros(np.shape(p)), params) for _ in range(2)]
    for step, scale in enumerate([0.01, 2.0, 0.002, 0.03], start=1):  # the second one clipped, the rest not
        g = grads(scale, seed=step)
        updates, state = update(g, state, params)
        clip = min(1.0, 0.5 / numpy_norm(g))
        moments[0] = jax.tree.map(lambda m, x: 0.9 * m + 0.1 * clip * np.asarray(x, np.float64), moments[0], g)
        moments[1] = jax.tree.map(lambda v, x: 0.999 * v + 0.001 * (clip * np.asarray(x, np.float64)) ** 2,
                                  moments[1], g)
        expected = jax.tree.map(lambda m, v, step=step: (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-5),
                                moments[0], moments[1])
        jax.tree.map(lambda u, e: np.testing.assert_allclose(u, e, rtol=1e-4, atol=1e-6), updates, expected)
