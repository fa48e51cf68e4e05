"""Navix (`--env navix:Navix-Empty-5x5-v0`): MiniGrid's tasks in JAX, from navix's own registry.

Navix's `Environment.step(timestep, action)` resets lazily: stepping from a timestep whose
`step_type` is done returns the next episode's first timestep. The done timestep itself still
holds the episode's last observation, but the reset happens one call late (the step after the
end is spent on it, and the action given to it is dropped). So this adapter steps navix's
non-resetting transition `Environment._step` and lets `SuiteEnv` reset in the same step, as the
rollout expects. The inner state is navix's `Timestep` (it carries the state, the step count
`t` its time limit reads, and the running return navix keeps in `info`).

Navix's state carries a rendering cache, the grid's background as RGB tiles (5 KB an env on
a 5x5 grid, 49 KB on 16x16), which only its 'rgb' observations read. For the others the adapter
keeps an empty one: rendering it at every reset, and selecting it at every step for the
auto-reset, cost navix's Empty-5x5 most of its speed here.

Termination vs truncation: navix's step type, 2 (TERMINATION: the goal reached, lava) and 1
(TRUNCATION: `t >= max_steps`); navix gives termination precedence when both happen at once.

env_kwargs:
  max_steps: navix's time limit (default 100, as `navix.make` has it; MiniGrid's own is 4*H*W).
  observation: which of navix's observation functions: 'symbolic' (default: the full grid,
    [H, W, 3] uint8 of (object, colour, state)), 'symbolic_first_person' ([7, 7, 3]),
    'categorical' ([H, W] object ids), 'categorical_first_person', 'rgb', 'rgb_first_person'.
    The RGB images reach the policy as float32 in [0, 1] (navix's uint8 / 255), as pixels are
    fed to a network: at 0-255 the first layer's inputs are two orders of magnitude above the
    scale its initialisation expects.
  max_steps_in_episode: a time limit of ours on top (0: navix's alone).
  any other keyword: passed to navix's constructor (e.g. gamma, penality_coeff).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import navix
import numpy as np
from gymnax.environments import spaces
from navix import observations
from navix.rendering.cache import RenderingCache

from jaxrl_async.envs.render import GRID_FPS, Renderer, on_cpu
from jaxrl_async.envs.suites.functional import SuiteEnv, SuiteParams

OBSERVATIONS = ("symbolic", "symbolic_first_person", "categorical", "categorical_first_person", "rgb",
                "rgb_first_person")
_TRUNCATION, _TERMINATION = 1, 2  # navix's StepType


def env_ids() -> list[str]:
    return list(navix.registry())


class NavixEnv(SuiteEnv):
    """A navix env over its non-resetting step; see the module docstring."""

    steps_on_past_end = True  # a discrete world: see `SuiteEnv`

    def __init__(self, env_id: str, env: Any, rendered: bool, max_steps_in_episode: int = 0):
        super().__init__(max_steps_in_episode)
        self.name = f"navix:{env_id}"
        self._env = env
        # None: navix renders the grid's background at each reset (the rgb observations read it)
        self._cache = None if rendered else RenderingCache(patches=jnp.zeros((0, 1, 1, 3), jnp.uint8))
        self._rgb = rendered
        reset = jax.eval_shape(self.reset_env, jax.random.PRNGKey(0), self.default_params)[0]
        self._obs_shape, self._obs_dtype = reset.shape, reset.dtype
        self._num_actions = len(env.action_set)

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[jax.Array, Any]:
        timestep = self._env.reset(key, self._cache)
        return self._observation(timestep), timestep

    def _observation(self, timestep: Any) -> jax.Array:
        # RGB pixels scaled to [0, 1] (the module docstring says why); navix's ids kept as they are
        return jnp.asarray(timestep.observation, jnp.float32) / 255.0 if self._rgb else timestep.observation

    def own_truncation_interval(self) -> int:
        return int(self._env.max_steps)  # navix truncates at `t >= max_steps`, t restarted by each reset

    def step_env(self, key: jax.Array, timestep: Any, action: jax.Array, params: SuiteParams) -> tuple:
        # `_step`, not `step`: navix's `step` would reset one call after the end (module docstring)
        timestep = self._env._step(timestep, jnp.asarray(action, jnp.int32))
        return (self._observation(timestep), timestep, timestep.reward, timestep.step_type == _TERMINATION,
                timestep.step_type == _TRUNCATION)

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(self._num_actions)

    def renderer(self) -> Renderer:
        """Navix's RGB renderer (`observations.rgb`: the whole grid, its sprites) on the host's CPU,
        over the grid's background drawn there: the recording keeps the state without its rendering
        cache (empty here unless the observations are RGB)."""
        empty = RenderingCache(patches=jnp.zeros((0, 1, 1, 3), jnp.uint8))

        def draw_one(state: Any) -> jax.Array:
            return observations.rgb(state.replace(cache=RenderingCache.init(state.grid)))

        return Renderer(select=lambda timestep: timestep.state.replace(cache=empty), draw=on_cpu(draw_one),
                        fps=GRID_FPS)

    def observation_space(self, params: Any = None) -> spaces.Box:
        if self._rgb:
            return spaces.Box(0.0, 1.0, self._obs_shape, jnp.float32)
        # the dtype's range, not navix's declared one: its symbolic space says at most 8, but the
        # player's object id is 10
        info = np.iinfo(self._obs_dtype)
        return spaces.Box(info.min, info.max, self._obs_shape, self._obs_dtype)


def make(env_id: str, max_steps: int = 100, observation: str = "symbolic", max_steps_in_episode: int = 0,
         **navix_kwargs: Any) -> NavixEnv:
    if observation not in OBSERVATIONS:
        raise ValueError(f"observation={observation!r} is not one of navix's observations: choose one of "
                         f"{', '.join(OBSERVATIONS)} (--env-kwargs observation=symbolic_first_person)")
    if int(max_steps) < 1:
        raise ValueError(f"max_steps={max_steps} must be >= 1: it is navix's time limit in steps")
    env = navix.make(env_id, max_steps=int(max_steps), observation_fn=getattr(observations, observation),
                     **navix_kwargs)
    return NavixEnv(env_id, env, observation.startswith("rgb"), max_steps_in_episode)
