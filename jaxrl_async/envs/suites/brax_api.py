"""`BraxApiEnv`: `SuiteEnv` over an env with Brax's API, which Brax's envs and MuJoCo Playground's share.

Brax's API is `reset(key) -> State` and `step(State, action) -> State`, where `State` carries
`obs`, `reward`, `done` and the simulator's state, and `step` neither resets nor counts time
(Brax's `EpisodeWrapper` / `AutoResetWrapper` and Playground's `wrap_for_brax_training` add
those for their trainers; we use none of them). So:

- `done` is termination (a fall, a NaN), never a time limit: `terminated = done != 0`;
- truncation is `SuiteEnv`'s time limit alone (`max_steps_in_episode`, Brax's `episode_length`);
- the inner state is the suite's whole `State` as the tuple of its leaves (`suite_state` rebuilds
  it): the checkpoints serialise plain arrays, not Brax's or MJX's state classes (msgpack cannot
  serialise `State`); the leaves are cast to the dtypes `reset` gave them, since some envs return
  Python floats from `step` (Brax's `inverted_pendulum` sets `reward=1.0`) and a `lax.scan`
  carry must keep its types;
- the observation is the suite's as it is: an array, or a dict of arrays (a `spaces.Dict`).

Both suites draw with MuJoCo's renderer (`renderer`, for the evaluation videos): each frame is the
model posed by the `MjData` fields the suite's own `render` copies from a state (`MujocoFrames`),
on the suite's `MjModel`. It needs an OpenGL context: EGL or OSMesa without a display
(`$MUJOCO_GL`, read when MuJoCo is imported; `envs.render.headless_gl`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxrl_async.envs.render import CannotRender, Renderer, num_states, state_at
from jaxrl_async.envs.suites.functional import SuiteEnv, SuiteParams

FRAME_SIZE = (240, 320)  # height, width: Brax's and Playground's `render` defaults


@dataclasses.dataclass(frozen=True)
class MujocoFrames:
    """What a suite's own `render` copies from one of its states into MuJoCo's `MjData` before
    drawing it: `select`, the suite's `State` -> {MjData field name: array}, and `model`, the suite
    env -> its `MjModel`."""

    select: Callable[[Any], dict]
    model: Callable[[Any], Any]


def mujoco_draw(name: str, model: Any, fps: int, select: Callable[[Any], dict]) -> Renderer:
    """A renderer drawing with MuJoCo's `Renderer` (the one the suites' `render` makes), from the
    default free camera, `FRAME_SIZE`, without shadows and reflections; a `CannotRender` where it
    finds no OpenGL context."""
    import mujoco

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GLFW's warning before MuJoCo's own error, without a display
            mujoco.Renderer(model, 8, 8).close()
    except Exception as error:  # mujoco.FatalError, or an ImportError of its GL backend
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CannotRender(f"{name}: MuJoCo's renderer found no OpenGL context ({reason}); set MUJOCO_GL=egl "
                           "(or osmesa) before the run starts") from None

    def draw(states: dict) -> Iterator[np.ndarray]:
        renderer = mujoco.Renderer(model, *FRAME_SIZE)
        data = mujoco.MjData(model)
        try:
            for index in range(num_states(states)):
                for field, value in state_at(states, index).items():
                    setattr(data, field, value)
                mujoco.mj_forward(model, data)
                renderer.update_scene(data, camera=-1)
                # no shadows or reflections: on a CPU's software OpenGL (Mesa) they cost five times the
                # rest of a frame
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
                yield renderer.render().copy()
        finally:
            renderer.close()

    return Renderer(select=select, draw=draw, fps=fps)


def observation_space_of(obs: Any, where: str) -> Any:
    """A gymnax space for an abstract observation (a `ShapeDtypeStruct` or a dict / tuple of them)."""
    if isinstance(obs, dict):
        return spaces.Dict({str(k): observation_space_of(v, f"{where}[{k!r}]") for k, v in obs.items()})
    if isinstance(obs, (tuple, list)):
        return spaces.Tuple([observation_space_of(v, f"{where}[{i}]") for i, v in enumerate(obs)])
    if not hasattr(obs, "shape"):
        raise ValueError(f"{where} is {obs!r}: only arrays and dicts / tuples of arrays are supported")
    return spaces.Box(-jnp.inf, jnp.inf, tuple(obs.shape), jnp.float32)


class BraxApiEnv(SuiteEnv):
    """One env with Brax's API, adapted (see the module docstring).

    Args:
      env: the suite's env (`reset(key) -> State`, `step(State, action) -> State`, `action_size`).
      name: our id for it, `SUITE:ID`, for messages.
      max_steps_in_episode: the time limit, >= 1.
      auto_reset: 'full' or 'cached' (`SuiteEnv`).
      frames: what the suite's `render` reads of a state (`renderer`); None: the env cannot render.
    """

    def __init__(self, env: Any, name: str, max_steps_in_episode: int, auto_reset: str,
                 frames: MujocoFrames | None = None):
        if isinstance(max_steps_in_episode, bool) or not isinstance(max_steps_in_episode, (int, np.integer)) \
                or max_steps_in_episode < 1:
            raise ValueError(f"episode_length={max_steps_in_episode!r} for {name} must be an int >= 1 (the time limit "
                             "in env steps; Brax's trainers use 1000)")
        super().__init__(int(max_steps_in_episode), auto_reset)
        self._env = env
        self.name = name
        self._frames = frames
        self._abstract_state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
        self._treedef = jax.tree.structure(self._abstract_state)
        self._observation_space = observation_space_of(self._abstract_state.obs, f"{name}'s observation")
        self._action_space = spaces.Box(-1.0, 1.0, (int(env.action_size),), jnp.float32)

    @property
    def unwrapped_suite_env(self) -> Any:
        """The suite's own env, for stepping it by hand."""
        return self._env

    def action_space(self, params: Any = None) -> spaces.Box:
        """Box [-1, 1]^action_size, the suites' convention: an env whose actuators' range is not
        [-1, 1] scales the action to it, the others take it as it is (the physics clips it)."""
        return self._action_space

    def observation_space(self, params: Any = None) -> Any:
        return self._observation_space

    def renderer(self) -> Renderer | None:
        """MuJoCo's renderer over the suite's model (`mujoco_draw`); None for an env without a MuJoCo
        model (Brax's `fast`)."""
        frames = self._frames
        try:
            model = frames.model(self._env) if frames is not None else None
            jax.eval_shape(frames.select, self._abstract_state)
        except AttributeError:
            return None
        if model is None:
            return None
        return mujoco_draw(self.name, model, max(1, round(1 / float(self._env.dt))),
                           lambda inner: frames.select(self.suite_state(inner)))

    def suite_state(self, inner: tuple) -> Any:
        """The suite's own `State` of an inner state (the tuple of its leaves)."""
        return jax.tree.unflatten(self._treedef, list(inner))

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[Any, tuple]:
        state = self._env.reset(key)
        return state.obs, self._leaves_like_reset(state)

    def own_truncation_interval(self) -> float:
        return math.inf  # the suites' step ends an episode only by its task: the time limit is ours

    def step_env(self, key: jax.Array, inner: tuple, action: jax.Array, params: SuiteParams) -> tuple:
        # the suites' step takes no key: what randomness a step needs lives in its state
        state = self._env.step(self.suite_state(inner), action)
        leaves = self._leaves_like_reset(state)
        return state.obs, leaves, state.reward, state.done != 0, jnp.zeros((), jnp.bool_)

    def restart_state(self, first: tuple, stepped: tuple) -> tuple:
        """The first reset's state with the step's `info["rng"]`, where the env keeps one (Playground's
        locomotion envs draw commands and pushes from it as they step): restored with the rest, it
        would replay one random stream every episode, where Brax's and Playground's cached
        auto-resets restore the physics and the observation and let the stream go on."""
        first_state = self.suite_state(first)
        info = getattr(first_state, "info", None)
        if not isinstance(info, dict) or "rng" not in info:
            return first
        rng = self.suite_state(stepped).info["rng"]
        return self._leaves_like_reset(first_state.replace(info={**info, "rng": rng}))

    def _leaves_like_reset(self, state: Any) -> tuple:
        """`state`'s leaves, each an array of the shape and dtype `reset` gives it."""
        leaves, treedef = jax.tree.flatten(state)
        reference, reference_def = jax.tree.flatten(self._abstract_state)
        if treedef != reference_def:
            raise ValueError(f"{self.name}'s step returned a state whose structure differs from its reset's "
                             f"({treedef} vs {reference_def}): its state must keep one structure to be carried")
        typed = [jnp.asarray(leaf, ref.dtype) for leaf, ref in zip(leaves, reference)]
        changed = [(i, leaf.shape, ref.shape) for i, (leaf, ref) in enumerate(zip(typed, reference))
                   if leaf.shape != ref.shape]
        if changed:
            raise ValueError(f"{self.name}'s step changed the shapes of its state's leaves (index, step's, "
                             f"reset's): {changed}; its state must keep one structure to be carried")
        return tuple(typed)
