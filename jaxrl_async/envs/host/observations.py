"""What a host env's policy sees of its observations: images in [0, 1], channels last; ids one-hot.

    space = policy_space(from_gymnasium(env.observation_space))  # the space the network is built for
    convert = policy_input(space)                                # None where nothing needs converting
    obs = convert(as_observation(observation_shapes(space), raw_batch, np))

Two kinds of gymnasium observation reach a network badly as they are:
- **images**, uint8 in [0, 255] (gymnasium's image spaces, EnvPool's Atari frames): at that scale
  a first layer takes inputs two orders of magnitude above the scale its initialisation expects,
  and EnvPool and gymnasium's Atari stack their frames channels first (`[4, 84, 84]`), which the
  convolutions would read as 4 rows of 84 channels. A `PixelBox` is the image as float32 in
  [0, 1], channels last. An image is what Stable-Baselines3's `is_image_space` reads as one: rank
  3, uint8, bounds exactly 0 and 255; its channels are first where the first axis is the shortest.
- **ids**, a `Discrete(n)` observation (FrozenLake's and Taxi's state, Blackjack's cards): one
  number whose size means nothing, which an MLP reads as a quantity. A `OneHotBox` is it one-hot,
  `[n]` float32.

Other spaces (one grayscale channel, floats, a uint8 grid of ids declared below 255) keep their
values; ids declared as 0-255 (MiniGrid's `ImgObsWrapper`) are read as an image, as SB3 reads them.
The host vector env converts each batch once, on the host, where it already casts to float32.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxrl_async.envs.spaces import map_shapes, observation_shapes


class PixelBox(spaces.Box):
    """An image observation as the policy sees it: float32 in [0, 1], `[H, W, C]`;
    `channels_first` says the env's own layout is `[C, H, W]`."""

    def __init__(self, hwc_shape: tuple[int, int, int], channels_first: bool):
        super().__init__(0.0, 1.0, hwc_shape, jnp.float32)
        self.channels_first = channels_first


class OneHotBox(spaces.Box):
    """A `Discrete(n)` observation as the policy sees it: `[n]` float32, one-hot."""

    def __init__(self, n: int):
        super().__init__(0.0, 1.0, (n,), jnp.float32)
        self.n = n


def _is_image(space: spaces.Box) -> bool:
    return (len(space.shape) == 3 and np.dtype(space.dtype) == np.uint8 and bool(np.all(np.asarray(space.low) == 0))
            and bool(np.all(np.asarray(space.high) == 255)))


def policy_space(space: Any) -> Any:
    """A host env's observation space (ours, `spaces.from_gymnasium`) as the policy sees it: each
    image leaf a `PixelBox`, each Discrete leaf a `OneHotBox`, the rest as they are."""
    if isinstance(space, spaces.Dict):
        return spaces.Dict({k: policy_space(s) for k, s in space.spaces.items()})
    if isinstance(space, spaces.Tuple):
        return spaces.Tuple(tuple(policy_space(s) for s in space.spaces))
    if isinstance(space, spaces.Discrete):
        return OneHotBox(int(space.n))
    if isinstance(space, spaces.Box) and _is_image(space):
        shape = tuple(int(d) for d in space.shape)
        channels_first = shape[0] < min(shape[1:])
        return PixelBox(shape[1:] + shape[:1] if channels_first else shape, channels_first)
    return space


def _leaf_conversion(space: Any) -> str:
    if isinstance(space, PixelBox):
        return "chw" if space.channels_first else "hwc"
    return "one_hot" if isinstance(space, OneHotBox) else ""


def _convert(shape: tuple[int, ...], x: np.ndarray, how: str) -> np.ndarray:
    if how == "one_hot":  # written in place: an identity matrix to index would cost n^2 (Taxi's n is 500)
        one_hot = np.zeros(x.shape + shape, np.float32)
        np.put_along_axis(one_hot, x.astype(np.int64)[..., None], 1.0, axis=-1)
        return one_hot
    if how == "chw":
        x = np.ascontiguousarray(np.moveaxis(x, -3, -1))
    return x * np.float32(1 / 255) if how else x


def policy_input(space: Any) -> Callable[[Any], Any] | None:
    """`obs -> obs` for a `policy_space`: a batch of the env's float32 observations (`as_observation`
    of the env's own layout) as the space says the policy sees them; None where no leaf needs it."""
    def conversions(s: Any) -> Any:
        if isinstance(s, spaces.Dict):
            return {str(k): conversions(v) for k, v in s.spaces.items()}
        if isinstance(s, spaces.Tuple):
            return tuple(conversions(v) for v in s.spaces)
        return _leaf_conversion(s)

    how = conversions(space)
    if not any(jax.tree.leaves(how)):
        return None
    obs_shape = observation_shapes(space)
    return lambda obs: map_shapes(_convert, obs_shape, obs, how)
