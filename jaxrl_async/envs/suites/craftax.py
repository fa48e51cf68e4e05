"""Craftax (Matthews et al. 2024) as `--env craftax:ID`: `craftax:Craftax-Classic-Symbolic-v1`, ...

The ids are those Craftax's own `make_craftax_env_from_name` builds without its auto-reset: the
Classic game (Crafter rewritten in JAX) and the full game, each with symbolic observations (a
flat float vector) or pixels (an [H, W, 3] float image in [0, 1]); 17 actions in Classic, 43 in
the full game.

Craftax's `done` is its `is_terminal`, which reads `timestep >= params.max_timesteps | in lava |
dead` (Classic) or `timestep >= params.max_timesteps | dead | beaten the boss` (full game): the
first is a time limit, the rest the task's end. The adapter splits it with the suite's own
`is_terminal`, asked once more with the time limit lifted: that is `terminated`; `truncated` is
`timestep >= max_timesteps` (a step that is both is a termination, `SuiteEnv`). The env is built
without Craftax's auto-reset, so the observation the step returns is the episode's last one,
which `SuiteEnv` keeps as `info["final_observation"]` before resetting (only the envs whose
episode ended: a Craftax reset generates a world, about forty steps' cost).

`env_kwargs` set the fields of Craftax's `EnvParams` (`max_timesteps`, `day_length`, ...; fixed
for the run) and of its `StaticEnvParams` (`map_size`, mob counts, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from craftax import craftax_env
from jaxrl_async.envs.render import GRID_FPS, Renderer, on_cpu
from jaxrl_async.envs.suites.functional import SuiteEnv, SuiteParams

# Craftax's state counts steps in int32; a limit it never reaches
_NO_TIME_LIMIT = int(jnp.iinfo(jnp.int32).max)


def env_ids() -> list[str]:
    """The ids `make_craftax_env_from_name(id, auto_reset=False)` builds.

    Craftax keeps no list of its ids: its registry is that function, whose string constants are
    its ids; those naming an auto-reset variant build nothing without it.
    """
    names = craftax_env.make_craftax_env_from_name.__code__.co_consts
    return sorted(name for name in names if isinstance(name, str) and name.startswith("Craftax-")
                  and name.endswith("-v1") and "AutoReset" not in name)


def make(env_id: str, **env_kwargs: Any) -> "CraftaxEnv":
    return CraftaxEnv(env_id, **env_kwargs)


def _as_static(value: Any) -> Any:
    # JSON gives lists where StaticEnvParams holds tuples (it must hash: jit treats it as static)
    return tuple(_as_static(v) for v in value) if isinstance(value, list) else value


class CraftaxEnv(SuiteEnv):
    """One Craftax env without its auto-reset; `SuiteEnv` adds ours (see the module docstring)."""

    steps_on_past_end = True  # a discrete world: see `SuiteEnv`

    def __init__(self, env_id: str, **env_kwargs: Any):
        self.name = f"craftax:{env_id}"
        suite_env = craftax_env.make_craftax_env_from_name(env_id, auto_reset=False)
        params_fields = {f.name for f in dataclasses.fields(suite_env.default_params)}
        static_fields = {f.name for f in dataclasses.fields(suite_env.default_static_params())}
        unknown = sorted(set(env_kwargs) - params_fields - static_fields)
        if unknown:
            raise ValueError(f"craftax:{env_id} has no setting {unknown}: env_kwargs may set its EnvParams "
                             f"{sorted(params_fields)} or its StaticEnvParams {sorted(static_fields)}")
        static = {k: _as_static(v) for k, v in env_kwargs.items() if k in static_fields}
        if static:
            suite_env = type(suite_env)(suite_env.default_static_params().replace(**static))
        self._env = suite_env
        self.craftax_params = suite_env.default_params.replace(
            **{k: v for k, v in env_kwargs.items() if k in params_fields})
        if int(self.craftax_params.max_timesteps) < 1:
            raise ValueError(f"max_timesteps={self.craftax_params.max_timesteps} must be >= 1")
        self._no_time_limit = self.craftax_params.replace(max_timesteps=_NO_TIME_LIMIT)
        # Craftax truncates by itself (`step_env`); SuiteEnv's limit, set to the same count of steps,
        # changes nothing there and tells the evaluator how long an episode can last
        super().__init__(max_steps_in_episode=int(self.craftax_params.max_timesteps))

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[jax.Array, Any]:
        return self._env.reset_env(key, self.craftax_params)

    def own_truncation_interval(self) -> int:
        return int(self.craftax_params.max_timesteps)  # its clock, restarted by each reset

    def step_env(self, key: jax.Array, inner: Any, action: jax.Array, params: SuiteParams) -> tuple:
        obs, inner, reward, done, _ = self._env.step_env(key, inner, action, self.craftax_params)
        # the suite's own terminal test without its time limit: lava, death, the boss beaten
        terminated = self._env.is_terminal(inner, self._no_time_limit)
        truncated = inner.timestep >= self.craftax_params.max_timesteps
        return obs, inner, reward, terminated, truncated

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(int(self._env.action_space(self.craftax_params).n))

    def observation_space(self, params: Any = None) -> spaces.Box:
        space = self._env.observation_space(self.craftax_params)
        return spaces.Box(space.low, space.high, tuple(space.shape), jnp.float32)

    def renderer(self) -> Renderer:
        """Craftax's pixel renderer (the Classic game's or the full game's, whichever this env is),
        its image-observation block size, on the host's CPU: the player's view and inventory."""
        if type(self._env).__module__.startswith("craftax.craftax_classic"):
            from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_IMG
            from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
        else:
            from craftax.craftax.constants import BLOCK_PIXEL_SIZE_IMG
            from craftax.craftax.renderer import make_craftax_pixel_renderer
        return Renderer(select=lambda inner: inner, draw=on_cpu(make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_IMG)),
                        fps=GRID_FPS)
