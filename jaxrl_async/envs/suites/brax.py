"""Brax's envs as `--env brax:ID`: every env in `brax.envs`'s registry (`ant`, `inverted_pendulum`, ...).

    make("inverted_pendulum", backend="mjx", episode_length=1000)

- `backend`: Brax's physics pipeline, one of `mjx`, `generalized`, `positional`, `spring`
  (default: the env's own, `generalized` for most);
- `episode_length`: the time limit in env steps (default 1000, as Brax's trainers use): a
  truncation, bootstrapped from the final observation;
- `auto_reset`: `full` (a fresh `reset` starts every episode) or `cached` (each env restarts
  from its first reset's state, as Brax's `AutoResetWrapper` does): `functional.SuiteEnv`;
- any other keyword goes to the env's constructor (e.g. `obs_mode=dict_state` for `fast`).

Actions are a Box in [-1, 1]; `state.done` is termination (`brax_api.BraxApiEnv`). Frames are drawn
by MuJoCo's renderer from the joint positions Brax's own `render` reads (`brax_api.mujoco_draw`).
"""

from __future__ import annotations

import inspect
from typing import Any

import brax.envs
import brax.fluid
import jax.numpy as jnp

from jaxrl_async.envs.suites.brax_api import BraxApiEnv, MujocoFrames

BACKENDS = ("mjx", "generalized", "positional", "spring")
EPISODE_LENGTH = 1000


def _frame_fields(state: Any) -> dict:
    """What Brax's `render` (`brax.io.image.render_array`) copies from a state into MuJoCo's data."""
    pipeline = state.pipeline_state
    fields = {"qpos": pipeline.q, "qvel": pipeline.qd}
    fields.update({name: getattr(pipeline, name) for name in ("mocap_pos", "mocap_quat") if hasattr(pipeline, name)})
    return fields


FRAMES = MujocoFrames(select=_frame_fields, model=lambda env: env.sys.mj_model)


def env_ids() -> list[str]:
    """The ids in Brax's own registry (`brax.envs.register_environment` adds to it)."""
    return sorted(brax.envs._envs)  # brax keeps its registry in this dict and offers no listing


def _fluid_broken() -> bool:
    """Brax 0.14.2's fluid model (which `swimmer` uses) calls `jnp.clip(a_min=...)`, removed in jax 0.10."""
    if "a_min=" not in inspect.getsource(brax.fluid):
        return False
    try:
        jnp.clip(0.0, a_min=0.0)
    except TypeError:
        return True
    return False


def make(env_id: str, backend: str | None = None, episode_length: int = EPISODE_LENGTH, auto_reset: str = "full",
         **env_kwargs: Any) -> BraxApiEnv:
    """Brax's env `env_id`, adapted: see the module docstring."""
    if env_id == "swimmer" and _fluid_broken():
        raise ValueError("brax:swimmer cannot step with this jax: Brax's fluid model (brax/fluid.py, which swimmer "
                         "uses) calls jnp.clip(a_min=...), which jax 0.10 removed; every other Brax env works")
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not one of Brax's backends: choose one of {', '.join(BACKENDS)} "
                             "(e.g. --env-kwargs backend=mjx)")
        env_kwargs["backend"] = backend
    try:
        env = brax.envs.get_environment(env_id, **env_kwargs)
    except TypeError as error:
        raise ValueError(f"brax:{env_id} does not take the keyword arguments {sorted(env_kwargs)}: {error} "
                         "(--env-kwargs reach the env's constructor; this adapter's own are backend, "
                         "episode_length and auto_reset)") from error
    return BraxApiEnv(env, f"brax:{env_id}", episode_length, auto_reset, FRAMES)
