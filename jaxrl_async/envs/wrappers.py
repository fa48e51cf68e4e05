"""Pure, jit/vmap-safe wrappers over gymnax-1.x environments.

Every wrapper keeps the gymnax-1.x functional API:

    reset(key, params) -> (obs, state)
    step(key, state, action, params)
        -> (obs, state, reward, terminated, truncated, info)

and delegates any attribute it does not define to the wrapped env. The wrapper
objects hold no state; all state lives in the pytree they return.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl_async.envs.suites.functional import SuiteEnv


class Wrapper:
    """Delegating base: forwards reset/step, spaces and unknown attributes."""

    def __init__(self, env: Any):
        self._env = env

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes missing on the wrapper itself. Guard `_env`
        # so copy/pickle (which probe before __init__ runs) cannot recurse forever.
        if name == "_env":
            raise AttributeError(name)
        return getattr(self._env, name)

    @property
    def unwrapped(self) -> Any:
        """The innermost (gymnax) environment."""
        env = self._env
        while isinstance(env, Wrapper):
            env = env._env
        return env

    @property
    def default_params(self) -> Any:
        return self._env.default_params

    def inner_state(self, state: Any) -> Any:
        """The innermost env's state within this wrapper's `state` (`EpisodeStatistics` is the one
        wrapper here that keeps a state of its own)."""
        return self._env.inner_state(state) if isinstance(self._env, Wrapper) else state

    @property
    def name(self) -> str:
        return self._env.name

    @property
    def num_actions(self) -> int:
        return self._env.num_actions

    def action_space(self, params: Any = None) -> Any:
        return self._env.action_space(self.default_params if params is None else params)

    def observation_space(self, params: Any = None) -> Any:
        return self._env.observation_space(
            self.default_params if params is None else params
        )

    def reset(self, key: jax.Array, params: Any = None) -> tuple[Any, Any]:
        return self._env.reset(key, self.default_params if params is None else params)

    def step(
        self, key: jax.Array, state: Any, action: Any, params: Any = None
    ) -> tuple[Any, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        params = self.default_params if params is None else params
        return self._env.step(key, state, action, params)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._env!r})"


@struct.dataclass
class EpisodeStatsState:
    """State of `EpisodeStatistics`.

    Attributes:
      env_state: the wrapped env's state.
      episode_return: [] float32, undiscounted return of the running episode.
      episode_length: [] int32, steps taken in the running episode.
    """

    env_state: Any
    episode_return: jax.Array
    episode_length: jax.Array


def _strong_typed(tree: Any) -> Any:
    """Drops JAX weak types (keeps dtypes) so state types are identical every step.

    Some gymnax envs return weakly-typed leaves from reset but strong ones from
    step (Pendulum's `last_u`), which retraces a jitted step once and can make a
    `lax.scan` carry's input and output types differ.
    """
    return jax.tree.map(lambda leaf: jax.lax.convert_element_type(leaf, jnp.result_type(leaf)), tree)


class EpisodeStatistics(Wrapper):
    """Tracks undiscounted episode return and length across auto-resets.

    `step`'s info gains three keys (all scalars per env):
      episode_return: float32, the finished episode's return on the step where
        it ended (terminated or truncated), else 0.0.
      episode_length: int32, likewise its length in steps, else 0.
      episode_done: bool, terminated | truncated. This is the validity mask:
        average `episode_return` / `episode_length` only where it is True.
    Inner info keys (`terminated`, `truncated`, `final_observation`, ...) are kept.
    The env state's leaves are made strongly typed, so reset and step return
    states of identical types (no retrace, stable `lax.scan` carries).
    """

    def inner_state(self, state: EpisodeStatsState) -> Any:
        return super().inner_state(state.env_state)

    def reset(self, key: jax.Array, params: Any = None) -> tuple[Any, EpisodeStatsState]:
        obs, env_state = super().reset(key, params)
        state = EpisodeStatsState(
            env_state=_strong_typed(env_state),
            episode_return=jnp.zeros((), jnp.float32),
            episode_length=jnp.zeros((), jnp.int32),
        )
        return obs, state

    def step(
        self,
        key: jax.Array,
        state: EpisodeStatsState,
        action: Any,
        params: Any = None,
    ) -> tuple[Any, EpisodeStatsState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        obs, env_state, reward, terminated, truncated, info = super().step(
            key, state.env_state, action, params
        )
        episode_done = jnp.logical_or(terminated, truncated).astype(jnp.bool_)
        new_return = state.episode_return + jnp.asarray(reward, jnp.float32)
        new_length = state.episode_length + jnp.ones((), jnp.int32)
        info = {
            **info,
            "episode_return": jnp.where(episode_done, new_return, 0.0).astype(jnp.float32),
            "episode_length": jnp.where(episode_done, new_length, 0).astype(jnp.int32),
            "episode_done": episode_done,
        }
        state = EpisodeStatsState(
            env_state=_strong_typed(env_state),
            # the inner env has auto-reset, so the counters start the next episode
            episode_return=jnp.where(episode_done, 0.0, new_return).astype(jnp.float32),
            episode_length=jnp.where(episode_done, 0, new_length).astype(jnp.int32),
        )
        return obs, state, reward, terminated, truncated, info


class ClipAction(Wrapper):
    """Clips continuous actions to the action `Box`'s [low, high] before stepping.

    Only the env sees the clipped action. The learner must keep the unclipped
    sample: the policy's log-prob is defined for what the Gaussian drew, and
    clipping it would bias the likelihood ratio (mass piles up at the bounds).
    """

    def __init__(self, env: Any):
        super().__init__(env)
        space = env.action_space(env.default_params)
        if not isinstance(space, spaces.Box):
            raise TypeError(
                f"ClipAction needs a continuous Box action space, but {env.name} "
                f"has {space!r}; wrap only continuous-action envs."
            )

    def step(
        self, key: jax.Array, state: Any, action: jax.Array, params: Any = None
    ) -> tuple[Any, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        params = self.default_params if params is None else params
        space = self._env.action_space(params)
        # bounds may depend on params (traced under jit); jnp.clip handles both
        action = jnp.clip(action, space.low, space.high)
        return self._env.step(key, state, action, params)


class SquashAction(Wrapper):
    """Maps an unsquashed continuous action u onto the action `Box` by tanh, low + (tanh(u) + 1)
    (high - low) / 2, before stepping: the env side of `core.distributions.TanhGaussian`.

    As with `ClipAction`, only the env sees the mapped action: the learner keeps u, whose density
    the policy's log-prob is (the squashed action's, by the change of variables).
    """

    def __init__(self, env: Any):
        super().__init__(env)
        space = env.action_space(env.default_params)
        if not isinstance(space, spaces.Box):
            raise TypeError(f"SquashAction needs a continuous Box action space, but {env.name} has {space!r}; "
                            "a tanh-squashed Gaussian acts only on Box actions.")

    def step(
        self, key: jax.Array, state: Any, action: jax.Array, params: Any = None
    ) -> tuple[Any, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        params = self.default_params if params is None else params
        space = self._env.action_space(params)
        action = space.low + (jnp.tanh(action) + 1.0) * 0.5 * (space.high - space.low)
        return self._env.step(key, state, action, params)


class ObservationWrapper(Wrapper, abc.ABC):
    """Maps every observation the env gives (`_observe`): `reset`'s, `step`'s and its
    `info["final_observation"]` alike, so truncation bootstrapping sees what the policy sees."""

    @abc.abstractmethod
    def _observe(self, obs: Any) -> Any:
        """The observation as the policy sees it."""

    def reset(self, key: jax.Array, params: Any = None) -> tuple[Any, Any]:
        obs, state = super().reset(key, params)
        return self._observe(obs), state

    def step(
        self, key: jax.Array, state: Any, action: Any, params: Any = None
    ) -> tuple[Any, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        obs, state, reward, terminated, truncated, info = super().step(key, state, action, params)
        info = {**info, "final_observation": self._observe(info["final_observation"])}
        return self._observe(obs), state, reward, terminated, truncated, info


class ObservationSubset(ObservationWrapper):
    """Shows the agent only some entries of a flat observation: a partially observable task.

    Hiding CartPole's velocities, say, leaves an env a feed-forward policy cannot solve
    well but a recurrent one can (it infers velocity from successive positions). The
    entries are removed from the observation `reset` and `step` return and from
    `info["final_observation"]` alike, so truncation bootstrapping sees what the policy sees.
    """

    def __init__(self, env: Any, keep: tuple[int, ...]):
        super().__init__(env)
        shape = env.observation_space(env.default_params).shape
        if len(shape) != 1:
            raise ValueError(f"ObservationSubset needs flat observations; {env.name} has shape {shape}")
        keep = tuple(int(i) for i in keep)
        if not keep or len(set(keep)) != len(keep) or not all(0 <= i < shape[0] for i in keep):
            raise ValueError(f"keep={keep} must be distinct indices into {env.name}'s {shape[0]} "
                             "observation entries")
        self.keep = keep
        self._index = np.asarray(keep)  # a host constant: indexing with it traces to one gather

    def _observe(self, obs: jax.Array) -> jax.Array:
        return obs[..., self._index]

    def observation_space(self, params: Any = None) -> Any:
        space = super().observation_space(params)
        low = jnp.broadcast_to(jnp.asarray(space.low), space.shape)
        high = jnp.broadcast_to(jnp.asarray(space.high), space.shape)
        return spaces.Box(self._observe(low), self._observe(high), (len(self.keep),), space.dtype)


class OneHotObservation(ObservationWrapper):
    """Gives a `Discrete(n)` observation (gymnax's FrozenLake-misc: the agent's cell) one-hot,
    `[n]` float32: as one number its size would mean something to the network, which it does
    not. Host envs do the same on the host (`envs.host.observations`)."""

    def __init__(self, env: Any):
        super().__init__(env)
        space = env.observation_space(env.default_params)
        if not isinstance(space, spaces.Discrete):
            raise TypeError(f"OneHotObservation needs a Discrete observation space, but {env.name} has {space!r}")
        self._n = int(space.n)

    def _observe(self, obs: jax.Array) -> jax.Array:
        return jax.nn.one_hot(obs, self._n, dtype=jnp.float32)

    def observation_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self._n,), jnp.float32)


# wrappers that step the env they wrap exactly once per step, so they keep its time limit's spacing
_ONE_STEP_WRAPPERS = (EpisodeStatistics, ClipAction, SquashAction, ObservationSubset, OneHotObservation)


def max_truncations(env: Any, params: Any, num_steps: int) -> int:
    """The most times one env can be truncated in `num_steps` consecutive steps.

    Under gymnax's time limit (`Environment.is_truncated`: `state.time >= max_steps_in_episode`,
    the step count restarting at each reset) two truncations of one env are at least
    L = `max_steps_in_episode` steps apart, so T steps hold at most floor((T - 1) / L) + 1.
    That holds where the env is a gymnax `Environment` stepped by gymnax's own `step` under that
    rule, and where it is a suite's adapter that knows its truncations' spacing
    (`SuiteEnv.truncation_interval`), wrapped only by this module's wrappers; for any other env
    every step may be one (T).
    """
    inner = env
    while type(inner) in _ONE_STEP_WRAPPERS:
        inner = inner._env
    if isinstance(inner, SuiteEnv):
        interval = inner.truncation_interval(params)
    else:
        limit = getattr(params, "max_steps_in_episode", None)
        gymnax_rule = (isinstance(inner, environment.Environment) and type(inner).step is environment.Environment.step
                       and type(inner).is_truncated is environment.Environment.is_truncated)
        interval = int(limit) if gymnax_rule and isinstance(limit, (int, np.integer)) and limit >= 1 else None
    if interval is None:
        return num_steps
    return min(num_steps, (num_steps - 1) // interval + 1) if interval < math.inf else 1
