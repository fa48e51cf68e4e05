"""Frames of an env's recorded states, drawn by the suite's own renderer (the evaluation videos).

    renderer = renderer_for(env, env_params)       # CannotRender(why) where the env has none
    picked = renderer.select(env_state)            # JAX, in the recording program: what a frame needs
    for frame in renderer.draw(stacked_picked):    # host: [H, W, 3] uint8, one per recorded state
        ...

A renderer is two halves. `select` runs on the device, inside the program that records an
episode (`rollout.evaluate.make_recorder`), on one env's state as the wrapped env holds it: it
keeps what the frames need (a Brax body's joint positions, a Craftax world), so the recording
that reaches the host is small. `draw` runs on the host, in the video writer's thread, over the
recorded states (NumPy leaves `[L, ...]`), and yields one frame per state, lazily: a long episode
is never held as frames at once.

Who draws: gymnax's classic-control envs with gymnasium's own renderer (the one gymnax's
visualiser calls, set from the state by gymnax's `vis_gym` helpers; it needs pygame), gymnax envs
whose observation is a grid (MinAtar, Catch, DeepSea, ...) as that grid in gymnax's visualiser's
colours, and the JAX suites' adapters with their suite's renderer (`SuiteEnv.renderer`: Brax and
Playground MuJoCo's, Craftax its pixel renderer, Jumanji its viewer, Navix and XLand-MiniGrid their
RGB renderers). Any other env cannot render (`CannotRender`, one line why).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from typing import Any, Callable, Iterator

import jax
import numpy as np
from gymnax.environments import environment

from jaxrl_async.envs.suites.functional import SuiteEnv
from jaxrl_async.envs.wrappers import Wrapper

# gymnax's classic-control envs, which gymnasium's renderer draws (gymnax.visualize.vis_gym's list)
CLASSIC_CONTROL = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")
GRID_FPS = 10  # a grid env's frames per second: one step is one move
GRID_TILE = 16  # pixels a side of one grid cell


class CannotRender(Exception):
    """The env has no renderer here; the message says why in one line."""


@dataclasses.dataclass(frozen=True)
class Renderer:
    """How one env's recorded states become frames (see the module docstring).

    Attributes:
      select: JAX, one env's state -> the pytree a frame needs (`renderer_for`'s takes the wrapped
        env's state; a suite adapter's, `SuiteEnv.renderer`, its suite's own).
      draw: host, the selected states stacked (NumPy leaves `[L, ...]`) -> L frames `[H, W, 3]` uint8.
      fps: the video's frames per second.
    """

    select: Callable[[Any], Any]
    draw: Callable[[Any], Iterator[np.ndarray]]
    fps: int


def state_at(states: Any, index: int) -> Any:
    """One state of a stack (leaves `[L, ...]` -> `[...]`)."""
    return jax.tree.map(lambda leaf: leaf[index], states)


def num_states(states: Any) -> int:
    """L of a stack of states (leaves `[L, ...]`)."""
    return int(np.shape(jax.tree.leaves(states)[0])[0])


def on_cpu(fn: Callable, chunk: int = 64) -> Callable[[Any], Iterator[np.ndarray]]:
    """`draw` from a JAX function of one state to one frame (a suite's JAX renderer): vmapped and
    jitted for the host's CPU (drawing stays off the accelerator that trains), `chunk` frames a
    call, each cast to uint8."""
    batched = jax.jit(jax.vmap(fn))
    cpu = jax.devices("cpu")[0]

    def draw(states: Any) -> Iterator[np.ndarray]:
        count = num_states(states)
        for start in range(0, count, chunk):
            # every call `chunk` states (the last one's repeated): one compiled program for any episode
            rows = np.minimum(np.arange(start, start + chunk), count - 1)
            frames = np.asarray(batched(jax.device_put(jax.tree.map(lambda leaf: leaf[rows], states), cpu)))
            yield from np.clip(frames[:count - start], 0, 255).astype(np.uint8)

    return draw


def renderer_for(env: Any, env_params: Any) -> Renderer:
    """The renderer of `env` (as `make_env` wraps it), its `select` taking the wrapped env's state.

    Raises:
      CannotRender: the env has no renderer here, or the renderer cannot run (a missing package, no
        OpenGL context), in one line.
    """
    inner = env.unwrapped if isinstance(env, Wrapper) else env
    name = getattr(inner, "name", type(inner).__name__)
    if isinstance(inner, SuiteEnv):
        renderer = inner.renderer()
        if renderer is None:
            raise CannotRender(f"{name} has no renderer in this project")
        suite_select = renderer.select  # it takes the suite's own state, `SuiteState.inner`
        renderer = dataclasses.replace(renderer, select=lambda suite_state: suite_select(suite_state.inner))
    elif name in CLASSIC_CONTROL:
        renderer = _classic_control(name, env_params)
    elif isinstance(inner, environment.Environment):
        renderer = _grid(inner, name, env_params)
    else:
        raise CannotRender(f"{name} has no renderer in this project")
    if isinstance(env, Wrapper):  # the wrappers' state around the inner env's (`Wrapper.inner_state`)
        inner_select = renderer.select
        renderer = dataclasses.replace(renderer, select=lambda state: inner_select(env.inner_state(state)))
    return renderer


def headless_gl() -> None:
    """Let MuJoCo's renderer (Brax's and Playground's frames) draw without a display: EGL, where
    no `$DISPLAY` is set and `$MUJOCO_GL` is not. MuJoCo picks its OpenGL backend when it is
    imported, so this must run before anything imports it (the suites do)."""
    if "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")


# ------------------------------------------------------------------------------------------ gymnax


def _classic_control(name: str, env_params: Any) -> Renderer:
    """gymnasium's renderer of the same env, its state set from gymnax's as gymnax's visualiser
    sets it (`gymnax.visualize.vis_gym`)."""
    if importlib.util.find_spec("pygame") is None:
        raise CannotRender(f"{name}: gymnasium's classic-control renderer needs pygame: "
                           "pip install 'jaxrl_async[video]'")
    import gymnasium
    from gymnax.visualize import vis_gym

    # off-screen drawing: SDL needs no display and no sound device for it
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    params = jax.device_get(env_params)

    def draw(states: Any) -> Iterator[np.ndarray]:
        gym_env = gymnasium.make(name, render_mode="rgb_array")
        try:
            gym_env.reset(seed=0)
            unwrapped = gym_env.unwrapped
            vis_gym.set_gym_params(unwrapped, name, params)
            for index in range(num_states(states)):
                state = state_at(states, index)
                unwrapped.state = vis_gym.get_gym_state(state, name)
                if name == "Pendulum-v1":  # its renderer draws the last torque as an arrow
                    unwrapped.last_u = np.asarray(state.last_u, dtype=np.float64)
                yield np.asarray(gym_env.render(), np.uint8)
        finally:
            gym_env.close()

    return Renderer(select=lambda state: state, draw=draw, fps=int(gymnasium.make(name).metadata["render_fps"]))


def _grid(env: Any, name: str, env_params: Any) -> Renderer:
    """A grid observation (MinAtar's `[10, 10, C]` channels, Catch's `[H, W]` cells) as colours:
    each cell the colour of its highest channel set, in gymnax's visualiser's palette (seaborn's
    cubehelix, black for an empty cell); a single channel in grey."""
    shape = getattr(env.observation_space(env_params), "shape", None)  # a Dict or Tuple space has none
    if shape is None or len(shape) not in (2, 3):
        raise CannotRender(f"{name} has no renderer in this project (gymnax's classic-control envs and its envs "
                           "with grid observations, MinAtar and Catch among them, draw)")
    channels = shape[-1] if len(shape) == 3 else 1
    import seaborn  # gymnax's own dependency, for its visualiser's palette

    palette = np.asarray([(0.0, 0.0, 0.0), *seaborn.color_palette("cubehelix", channels)])
    palette = np.round(255 * palette).astype(np.uint8)

    def select(state: Any) -> jax.Array:
        return env.get_obs(state, env_params)

    def draw(grids: Any) -> Iterator[np.ndarray]:
        for grid in np.asarray(grids, np.float32):
            if grid.ndim == 3:
                # the highest channel set in each cell, 0 where none is (gymnax's vis_minatar)
                cells = palette[np.max((grid > 0) * np.arange(1, channels + 1), axis=-1)]
            else:
                cells = np.repeat(np.round(255 * np.clip(grid, 0.0, 1.0)).astype(np.uint8)[..., None], 3, -1)
            yield np.repeat(np.repeat(cells, GRID_TILE, axis=0), GRID_TILE, axis=1)

    return Renderer(select=select, draw=draw, fps=GRID_FPS)
