"""Pytree structure checks: one rule, used wherever a tree must match another (published
params, a restored checkpoint)."""

from __future__ import annotations

from typing import Any

import jax
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
