"""`core.trees.pack` / `unpack`: a tree in flat arrays (one per dtype) and back, leaf for leaf the
same, under jit as the host actor's act call takes its params."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.core.trees import pack, unpack


def _tree(scale: float = 1.0):
    rng = np.random.default_rng(0)
    return {"dense": {"kernel": jnp.asarray(rng.normal(size=(3, 4)) * scale, jnp.float32),
                      "bias": jnp.asarray(rng.normal(size=(4,)), jnp.float32)},
            "half": jnp.asarray(rng.normal(size=(2, 2)), jnp.bfloat16),
            "count": jnp.asarray([7, 2**30 + 1], jnp.int32),  # beyond float32's integers: kept apart, exact
            "scalar": jnp.float32(scale)}


def test_unpack_gives_back_each_leaf_bit_for_bit_with_its_dtype_and_shape():
    tree = _tree()
    packed = jax.jit(pack)(tree)
    assert [f.dtype for f in packed.flats] == [jnp.int32, jnp.float32, jnp.bfloat16]  # one flat array per dtype
    back = jax.jit(unpack)(packed)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for ours, theirs in zip(jax.tree.leaves(back), jax.tree.leaves(tree)):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_packs_of_the_same_structure_share_one_compiled_call():
    """The layout is compared by value: two actors packing their own params of one network hit
    the same jitted executable (a new layout would compile again)."""
    traces = []

    @jax.jit
    def total(packed):
        traces.append(None)
        return jnp.sum(unpack(packed)["dense"]["kernel"])

    first, second = pack(_tree(1.0)), pack(_tree(2.0))
    assert first.layout == second.layout and hash(first.layout) == hash(second.layout)
    assert float(total(first)) != float(total(second))
    assert len(traces) == 1
    other = pack({"w": jnp.zeros((4, 3))})  # a different shape: its own layout
    assert other.layout != pack({"w": jnp.zeros((3, 4))}).layout
