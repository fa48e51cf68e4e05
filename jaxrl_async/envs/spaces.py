"""Spaces beyond gymnax's own, and observation structures as shape pytrees.

- `MultiDiscrete(nvec)`: independent categorical sub-actions, action `[len(nvec)]` int32 with
  `0 <= a_i < nvec[i]` (gymnax has no such space); it has gymnax's space interface
  (`shape`, `dtype`, `sample(key)`, `contains(x)`).
- `observation_shapes(space)`: what the trainer needs of an observation space, its *shape
  structure*: a shape tuple for a plain space (exactly `space.shape`, as always), and for a
  gymnax `Dict` / `Tuple` a dict / tuple of the same (nested as the space is). Observations are
  then pytrees of the same structure, leaves `[..., *shape]`. `map_shapes` maps over it.
- `from_gymnasium(space)`: a gymnasium 1.x space as ours (for host envs), without importing
  gymnasium.

This module sits below `networks` and `envs` (both use it), so it imports neither.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

SUPPORTED_OBSERVATIONS = "a Box (or any space with a shape), or a Dict / Tuple of them, nested"
SUPPORTED_ACTIONS = "Discrete, MultiDiscrete (jaxrl_async.MultiDiscrete) or a flat Box [D]"


class MultiDiscrete(spaces.Space):
    """A vector of independent discrete choices: action `[len(nvec)]`, `0 <= a_i < nvec[i]`."""

    def __init__(self, nvec, dtype: Any = jnp.int32):
        nvec = tuple(int(n) for n in np.asarray(nvec).reshape(-1))
        if not nvec or min(nvec) < 1:
            raise ValueError(f"MultiDiscrete nvec={nvec} must be a non-empty list of sizes >= 1")
        self.nvec = nvec
        self.shape = (len(nvec),)
        self.dtype = jnp.dtype(dtype)

    def __repr__(self) -> str:
        return f"MultiDiscrete({list(self.nvec)})"

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.randint(key, self.shape, 0, jnp.asarray(self.nvec), dtype=self.dtype)

    def contains(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x)
        return jnp.all((x >= 0) & (x < jnp.asarray(self.nvec)))


def is_shape(x: Any) -> bool:
    """A shape tuple (the leaves of a shape structure), not a tuple of shapes."""
    return isinstance(x, tuple) and all(isinstance(d, (int, np.integer)) for d in x)


def is_nested(obs_shape: Any) -> bool:
    return not is_shape(obs_shape)


def map_shapes(fn: Callable, obs_shape: Any, *trees: Any) -> Any:
    """`fn(shape, *leaves)` over a shape structure and trees of its structure (observations)."""
    return jax.tree.map(fn, obs_shape, *trees, is_leaf=is_shape)


def shape_leaves(obs_shape: Any) -> list[tuple[jax.tree_util.KeyPath, tuple[int, ...]]]:
    """[(path, shape)] in the structure's flattening order (a plain shape: one leaf, path ())."""
    return jax.tree_util.tree_flatten_with_path(obs_shape, is_leaf=is_shape)[0]


def observation_shapes(space: Any, _path: str = "observation space") -> Any:
    """The shape structure of an observation space (see the module docstring)."""
    if isinstance(space, spaces.Dict):
        if not space.spaces:
            raise ValueError(f"{_path} is an empty Dict: it needs at least one entry")
        return {str(k): observation_shapes(s, f"{_path}[{k!r}]") for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        if not len(space.spaces):
            raise ValueError(f"{_path} is an empty Tuple: it needs at least one entry")
        return tuple(observation_shapes(s, f"{_path}[{i}]") for i, s in enumerate(space.spaces))
    shape = getattr(space, "shape", None)
    if shape is None:
        raise ValueError(f"{_path} is {space!r}, which is not supported: use {SUPPORTED_OBSERVATIONS}")
    return tuple(int(d) for d in shape)


def as_observation(obs_shape: Any, obs: Any, xp: Any = jnp) -> Any:
    """`obs` as a float32 pytree of exactly the shape structure's containers (an env's
    OrderedDict becomes a dict, a list a tuple), so it maps alongside its statistics. `xp`:
    `jnp` (arrays on the device) or `np` (a host env's observations, kept on the host)."""
    if is_shape(obs_shape):
        return xp.asarray(obs, dtype=xp.float32)
    if isinstance(obs_shape, dict):
        return {k: as_observation(s, obs[k], xp) for k, s in obs_shape.items()}
    return tuple(as_observation(s, obs[i], xp) for i, s in enumerate(obs_shape))


def zeros_observation(obs_shape: Any, batch_shape: tuple[int, ...] = ()) -> Any:
    return map_shapes(lambda s: jnp.zeros(tuple(batch_shape) + s, jnp.float32), obs_shape)


def from_gymnasium(space: Any) -> spaces.Space:
    """A gymnasium space (Box, Discrete, MultiDiscrete, Dict, Tuple, nested) as ours.

    Raises ValueError naming any other space (Text, Graph, Sequence, OneOf, ...).
    """
    kind = type(space).__name__
    if kind == "Box":
        return spaces.Box(np.asarray(space.low), np.asarray(space.high), tuple(space.shape), space.dtype)
    if kind == "Discrete":
        if int(space.start) != 0:
            raise ValueError(f"{space!r} starts at {int(space.start)}: only Discrete spaces starting at 0 "
                             "are supported")
        return spaces.Discrete(int(space.n))
    if kind == "MultiDiscrete":
        if np.any(np.asarray(space.start) != 0) or np.ndim(space.nvec) != 1:
            raise ValueError(f"{space!r}: only a flat MultiDiscrete starting at 0 is supported")
        return MultiDiscrete(space.nvec)
    if kind == "Dict":
        return spaces.Dict({k: from_gymnasium(s) for k, s in space.spaces.items()})
    if kind == "Tuple":
        return spaces.Tuple(tuple(from_gymnasium(s) for s in space.spaces))
    raise ValueError(f"gymnasium space {space!r} ({kind}) is not supported: use Box, Discrete, MultiDiscrete, "
                     "or a Dict / Tuple of them")
