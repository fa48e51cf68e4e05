"""Pytree structure checks: one rule, used wherever a tree must match another (published
params, a restored checkpoint); and a tree packed into flat arrays for a call made often."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _describe(path) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def leaf_spec(leaf) -> tuple[tuple[int, ...], np.dtype]:
    return tuple(np.shape(leaf)), np.dtype(getattr(leaf, "dtype", None) or np.result_type(leaf))


def check_same_tree(reference: Any, candidate: Any, what: str = "params",
                    reference_name: str = "the first published tree",
                    fix: str = "publish a tree of the same structure, shapes and dtypes (the same network config)"
                    ) -> None:
    """Raise ValueError naming the first leaf whose structure, shape or dtype differs."""
    ref_leaves, ref_def = jax.tree_util.tree_flatten_with_path(reference)
    new_leaves, new_def = jax.tree_util.tree_flatten_with_path(candidate)
    if ref_def != new_def:
        ref_paths = [_describe(p) for p, _ in ref_leaves]
        new_paths = [_describe(p) for p, _ in new_leaves]
        missing = next((p for p in ref_paths if p not in new_paths), None)
        extra = next((p for p in new_paths if p not in ref_paths), None)
        detail = f"missing leaf {missing}" if missing else f"unexpected leaf {extra}" if extra else \
            f"tree structure {new_def} != {ref_def}"
        raise ValueError(f"{what} and {reference_name} differ: {detail}; {fix}")
    for (path, ref), (_, new) in zip(ref_leaves, new_leaves):
        if leaf_spec(ref) != leaf_spec(new):
            raise ValueError(
                f"{what} leaf {_describe(path)} has shape {np.shape(new)} dtype {leaf_spec(new)[1]}, "
                f"but {reference_name} has shape {np.shape(ref)} dtype {leaf_spec(ref)[1]}; {fix}")


class _Layout:
    """Where each leaf of a packed tree lies: its structure, and per leaf (which flat array,
    offset, shape). Compared by value, with its hash computed once: a jitted call hashes its
    arguments' structure at every call."""

    def __init__(self, treedef, places: tuple):
        self.treedef, self.places = treedef, places
        self._hash = hash((treedef, places))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _Layout) and (self.treedef, self.places) == (other.treedef, other.places)


@jax.tree_util.register_pytree_node_class
class Packed:
    """A pytree's leaves in one flat array per dtype (`pack`), rebuilt by `unpack` inside a jitted
    function. A jitted call pays its dispatch per argument leaf, so a call made at every step
    (a host actor's act) takes a network's params packed: one array crosses instead of one per
    kernel and bias. Exact: unpacking slices and reshapes, it computes nothing."""

    def __init__(self, flats: tuple, layout: _Layout):
        self.flats, self.layout = flats, layout

    def tree_flatten(self):
        return self.flats, self.layout

    @classmethod
    def tree_unflatten(cls, layout: _Layout, flats) -> "Packed":
        return cls(tuple(flats), layout)


def pack(tree: Any) -> Packed:
    """`tree`'s leaves as `Packed` (jit the call: it concatenates)."""
    leaves, treedef = jax.tree.flatten(tree)
    dtypes: list = []
    parts: list[list] = []
    places, offsets = [], []
    for leaf in leaves:
        dtype = np.dtype(leaf.dtype)
        if dtype not in dtypes:
            dtypes.append(dtype)
            parts.append([])
            offsets.append(0)
        i = dtypes.index(dtype)
        places.append((i, offsets[i], tuple(leaf.shape)))
        offsets[i] += int(np.prod(leaf.shape, dtype=np.int64))
        parts[i].append(jnp.ravel(leaf))
    flats = tuple(jnp.concatenate(p) for p in parts)
    return Packed(flats, _Layout(treedef, tuple(places)))


def unpack(packed: Packed) -> Any:
    """The tree `pack` packed, leaf for leaf the same."""
    leaves = [jax.lax.slice_in_dim(packed.flats[i], start, start + int(np.prod(shape, dtype=np.int64))).reshape(shape)
              for i, start, shape in packed.layout.places]
    return packed.layout.treedef.unflatten(leaves)
