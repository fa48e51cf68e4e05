"""`make_env(env_id)`: gymnax ids, probe ids, partially observable ids, the JAX suites' `SUITE:ID`
ids (`suites/`) and user-registered ids, wrapped."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import gymnax
import jax
from gymnax.environments import spaces

from jaxrl_async.config import refused_env_kwargs
from jaxrl_async.envs.ids import REFUSED_ENV_IDS
from jaxrl_async.envs.partially_observable import PARTIALLY_OBSERVABLE_ENVS
from jaxrl_async.envs.probes import PROBE_ENVS
from jaxrl_async.envs.suites import make_suite_env, split_suite_id, unknown_env_message
from jaxrl_async.envs.wrappers import ClipAction, EpisodeStatistics, OneHotObservation

EnvFactory = Callable[..., Any]

# Filled by `register_env`; user factories shadow nothing (ids must be new).
_USER_FACTORIES: dict[str, EnvFactory] = {}


def _gymnax_ids() -> list[str]:
    # read live: gymnax.register() appends to this list at run time
    return [env_id for env_id in gymnax.registered_envs if env_id not in REFUSED_ENV_IDS]


def builtin_env_ids() -> list[str]:
    """Sorted ids of the built-in envs: gymnax (minus refused), probes, partially observable
    (`ids.BUILTIN_ENV_IDS` holds the same list without importing gymnax)."""
    return sorted({*_gymnax_ids(), *PROBE_ENVS, *PARTIALLY_OBSERVABLE_ENVS})


def registered_env_ids() -> list[str]:
    """Sorted ids `make_env` accepts: the built-in ones and the user-registered ones."""
    return sorted({*builtin_env_ids(), *_USER_FACTORIES})


def register_env(env_id: str, factory: EnvFactory) -> None:
    """Adds a user env under `env_id`.

    Args:
      env_id: a new id (not a gymnax, probe, refused or already-registered id).
      factory: `factory(**env_kwargs) -> env`, where env has the gymnax-1.x
        functional API (`default_params`, `reset`, `step`, `action_space`,
        `observation_space`).
    """
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id={env_id!r} must be a non-empty string")
    if not callable(factory):
        raise ValueError(f"factory={factory!r} for {env_id!r} must be callable")
    if env_id in REFUSED_ENV_IDS or env_id in registered_env_ids() or split_suite_id(env_id) is not None:
        raise ValueError(
            f"env_id={env_id!r} is already registered; pick a new id "
            "(see jaxrl_async.envs.registered_env_ids())"
        )
    _USER_FACTORIES[env_id] = factory


def _construct(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    if env_id in REFUSED_ENV_IDS:
        # refuse before constructing: construction itself is what fails offline
        raise ValueError(REFUSED_ENV_IDS[env_id])
    if env_id in _USER_FACTORIES:
        return _USER_FACTORIES[env_id](**env_kwargs)
    if split_suite_id(env_id) is not None:
        return make_suite_env(env_id, **env_kwargs)
    if env_id in PROBE_ENVS:
        return PROBE_ENVS[env_id](**env_kwargs)
    if env_id in PARTIALLY_OBSERVABLE_ENVS:
        return PARTIALLY_OBSERVABLE_ENVS[env_id](**env_kwargs)
    if env_id in _gymnax_ids():
        env, _ = gymnax.make(env_id, **env_kwargs)
        return env
    raise ValueError(unknown_env_message(env_id, registered_env_ids()))


def make_env(env_id: str, **env_kwargs: Any) -> tuple[Any, Any]:
    """Builds a wrapped env and its default params.

    The env is `EpisodeStatistics(env)`, or `EpisodeStatistics(ClipAction(env))`
    when its action space is a continuous `Box`; a `Discrete` observation is given one-hot
    (`OneHotObservation`). `env_kwargs` go to the env's
    constructor; change `EnvParams` fields with `params.replace(...)`.

    Returns:
      (env, env_params), with env's `step` returning the gymnax-1.x six-tuple
      `(obs, state, reward, terminated, truncated, info)`.

    Raises:
      ValueError: unknown or refused `env_id`.
    """
    try:
        env = _construct(env_id, env_kwargs)
    except TypeError as error:
        if not env_kwargs:
            raise
        raise refused_env_kwargs(env_id, env_kwargs, error) from error
    missing = [
        attribute
        for attribute in ("default_params", "reset", "step", "action_space", "observation_space")
        if not hasattr(env, attribute)
    ]
    if missing:
        raise ValueError(
            f"env built for {env_id!r} lacks {missing}; its factory must return an "
            "env with the gymnax functional API"
        )
    params = env.default_params
    if isinstance(env.action_space(params), spaces.Box):
        env = ClipAction(env)
    if isinstance(env.observation_space(params), spaces.Discrete):
        env = OneHotObservation(env)
    return EpisodeStatistics(env), params


@contextlib.contextmanager
def env_kwargs_blamed(env_id: str, env_kwargs: dict[str, Any]) -> Iterator[None]:
    """Run the block (the build of a run on the env, its initial states); where it fails and
    `env_kwargs` were given, find whether they are to blame, and if so raise the ValueError that
    names them. A value the env's constructor took (`rows=-3`) may fail only where the env is first
    used, as a JAX error deep inside the build that names neither the kwarg nor the env. The env is
    tried alone only on that failure: a run that builds pays nothing."""
    try:
        yield
    except Exception as error:
        blame = _env_kwargs_blame(env_id, env_kwargs) if env_kwargs else None
        if blame is None:
            raise
        raise blame from error


def _env_kwargs_blame(env_id: str, env_kwargs: dict[str, Any]) -> ValueError | None:
    """The error naming `env_kwargs` where the env built with them fails its spaces, reset or first
    step, traced for shapes only (nothing is compiled or run); None where it does not."""
    try:
        env = _construct(env_id, env_kwargs)
        params = env.default_params
    except Exception:  # not the first use's failure: the caller's error stands
        return None

    def first_step(key):
        env.observation_space(params)
        _, state = env.reset(key, params)
        return env.step(key, state, env.action_space(params).sample(key), params)

    try:
        jax.eval_shape(first_step, jax.random.PRNGKey(0))
    except Exception as error:  # whatever the env's own code raises on the value
        first_line = (str(error).strip().splitlines() or [""])[0]
        return ValueError(f"env {env_id!r} does not run with env_kwargs {env_kwargs}: {type(error).__name__}: "
                          f"{first_line} (--env-kwargs KEY=VALUE passes keyword arguments to the env's "
                          "constructor; check the values)")
    return None
