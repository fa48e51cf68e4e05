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
- `ACTION_MASK`: the observation entry that carries an env's legal actions. An env with action
  masks has a Dict observation space with this key, a Box `[n]` for Discrete(n) or
  `[sum(nvec)]` for MultiDiscrete(nvec) (the sub-actions' masks side by side), 1 legal and 0
  illegal (float32 once `as_observation` has read it). `check_action_mask` validates it against
  the action space, `action_mask(obs)` reads it, `without_action_mask` is what the encoders see.

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
ACTION_MASK = "action_mask"  # the observation entry of the legal actions: 1 legal, 0 illegal


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


def action_mask(obs: Any) -> Any:
    """An observation's action mask `[..., n]` (`ACTION_MASK`), or None where it has none. The
    structure decides, not the values, so under `jit` the answer is static."""
    return obs[ACTION_MASK] if isinstance(obs, dict) and ACTION_MASK in obs else None


def is_action_mask_path(path: jax.tree_util.KeyPath) -> bool:
    """Whether a leaf's path in an observation (or its statistics) is the action mask's."""
    return len(path) == 1 and getattr(path[0], "key", None) == ACTION_MASK


def without_action_mask(obs_shape: Any) -> Any:
    """The shape structure without its action mask: the part of the observation the encoders see
    (the mask acts on the action head, `nets.actor_critic.observed_legal_actions`)."""
    if action_mask(obs_shape) is None:
        return obs_shape
    return {k: s for k, s in obs_shape.items() if k != ACTION_MASK}


def check_action_mask(obs_shape: Any, action_space: Any) -> bool:
    """Whether the observation carries an action mask; raises ValueError if it has one that does
    not fit `action_space` (shape `[n]` for Discrete(n), `[sum(nvec)]` for MultiDiscrete(nvec)),
    a Box action space (no legal set to restrict), or nothing else to encode beside it."""
    mask_shape = action_mask(obs_shape)
    if mask_shape is None:
        return False
    if isinstance(action_space, spaces.Discrete):
        expected, what = (int(action_space.n),), f"Discrete({int(action_space.n)})"
    elif isinstance(action_space, MultiDiscrete):
        expected, what = (sum(action_space.nvec),), f"{action_space!r}: the sub-actions' masks side by side"
    else:
        raise ValueError(f"the observation has an {ACTION_MASK!r} entry, but the action space {action_space!r} "
                         "is not discrete: a mask restricts a Discrete or MultiDiscrete action, and a Box "
                         "has no set of legal actions to restrict; leave the entry out of the observation")
    if tuple(mask_shape) != expected:
        raise ValueError(f"observation[{ACTION_MASK!r}] has shape {tuple(mask_shape)}, but the action space "
                         f"needs {expected} ({what}), one entry per action, 1 legal and 0 illegal")
    if len(obs_shape) == 1:
        raise ValueError(f"the observation Dict holds only {ACTION_MASK!r}: the encoders need at least one other "
                         "entry (the mask restricts the action head and is not encoded)")
    return True


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
