"""Host environments: `--env gymnasium:<id>`, any registered gymnasium 1.x id, stepped in NumPy.

    spec = make_host_env("gymnasium:CartPole-v1")       # spaces (as gymnax spaces), checked early
    envs = spec.make_vec(num_envs=4)                      # a HostVecEnv
    obs = envs.reset(seeds=[0, 1, 2, 3])
    step = envs.step(actions)                             # a HostStep of [B] / [B, ...] arrays

**Autoreset.** gymnasium 1.x vector envs default to NEXT_STEP autoreset: the step *after* an episode
ends ignores its action and returns the reset observation with a dummy transition (reward 0, not
done). Recording that step would teach the learner a transition that never happened. The vector env
here is built with `autoreset_mode=SAME_STEP` instead: the step that ends an episode returns the
reset observation as `obs` and the pre-reset one in `info["final_obs"]`, so every step is a real
transition; `HostStep.final_obs` is that pre-reset observation (the truncation bootstrap's input),
equal to `obs` wherever the episode went on. gymnasium's native vector entry points (e.g.
CartPoleVectorEnv) support NEXT_STEP only, so they are not used: at 4 envs the sync vector env was
the faster of the two anyway (README, "Host environments").

Spaces map to ours (`spaces.from_gymnasium`): observations may be a `Box`, a `Discrete` or a
`Dict` / `Tuple` of them, nested (each env's observation is then a pytree of float32 `[B, ...]`
arrays, one leaf per entry, and the network encodes each leaf); actions a `Discrete` (start 0), a
`MultiDiscrete` or a flat `Box`. Any other space raises a clear error naming it. gymnasium is
imported only when a host env is asked for.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable

import jax
import numpy as np
from gymnax.environments import spaces

from jaxrl_async.env_ids import ENVPOOL_PREFIX, GYMNASIUM_PREFIX, host_env_kind
from jaxrl_async.spaces import as_observation, from_gymnasium, map_shapes, observation_shapes

ENVPOOL_MISSING = ("env {env_id!r} needs EnvPool, which is not installed (it publishes no wheel for "
                   "every Python; try `pip install envpool`), or use gymnasium:{name}")


def to_gymnax_space(space: Any, what: str) -> Any:
    """A gymnasium space as ours (`spaces.from_gymnasium`); ValueError naming `what` for the others."""
    try:
        return from_gymnasium(space)
    except ValueError as error:
        raise ValueError(f"{what} space: {error}") from None


def set_row(obs_shape: Any, batch: Any, i: int, row: Any) -> None:
    """`batch[i] = row` in place, leaf by leaf: a batched observation pytree and one of its rows."""

    def put(_, leaf: np.ndarray, value: Any) -> None:
        leaf[i] = value

    map_shapes(put, obs_shape, batch, row)


@dataclasses.dataclass(frozen=True)
class HostStep:
    """One vector step, `[B, ...]` NumPy arrays.

    Attributes:
      obs: the observation to act on next (the reset one where an episode ended); a pytree of
        `[B, ...]` arrays for a Dict / Tuple observation space.
      final_obs: the observation the step reached, before any reset (= obs where the episode went on).
      reward: float32 reward.
      terminated, truncated: bool, kept apart (a truncation bootstraps from V(final_obs)).
      episode_return, episode_length: the ended episode's return / length (valid where episode_done).
      episode_done: bool, an episode ended at this step.
    """

    obs: Any
    final_obs: Any
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    episode_done: np.ndarray


class HostVecEnv:
    """`num_envs` gymnasium envs in a SAME_STEP vector env, with episode statistics."""

    def __init__(self, vec_env: Any, observation_space: Any, action_space: Any):
        self._env = vec_env
        self._obs_shape = observation_shapes(observation_space)
        self.num_envs = vec_env.num_envs
        self._box = isinstance(action_space, spaces.Box)
        self._low, self._high = (np.asarray(action_space.low), np.asarray(action_space.high)) if self._box else (0, 0)
        self._returns = np.zeros(self.num_envs, np.float64)
        self._lengths = np.zeros(self.num_envs, np.int32)

    def _observation(self, obs: Any) -> Any:
        """float32 arrays in the observation space's structure (gymnasium batches a Dict / Tuple
        observation leaf by leaf)."""
        return as_observation(self._obs_shape, obs, np)

    def reset(self, seeds: list[int]) -> Any:
        """Reset every env, env i seeded with `seeds[i]`; the observations, float32."""
        obs, _ = self._env.reset(seed=[int(s) for s in seeds])
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return self._observation(obs)

    def step(self, actions: np.ndarray) -> HostStep:
        """Step with `actions` ([B] ints or [B, A] floats, clipped to a Box's bounds here)."""
        actions = np.clip(actions, self._low, self._high) if self._box else np.asarray(actions)
        obs, reward, terminated, truncated, info = self._env.step(actions)
        obs = self._observation(obs)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        done = terminated | truncated
        final_obs = obs
        if done.any():  # the ended envs' pre-reset observations, one env (a pytree) each
            final_obs = jax.tree.map(np.copy, obs)
            for i in np.flatnonzero(info["_final_obs"]):
                set_row(self._obs_shape, final_obs, i, self._observation(info["final_obs"][i]))
        reward = np.asarray(reward, np.float32)
        self._returns += reward
        self._lengths += 1
        step = HostStep(obs=obs, final_obs=final_obs, reward=reward, terminated=terminated, truncated=truncated,
                        episode_return=self._returns.astype(np.float32), episode_length=self._lengths.copy(),
                        episode_done=done)
        self._returns[done] = 0.0
        self._lengths[done] = 0
        return step

    def close(self) -> None:
        self._env.close()


@dataclasses.dataclass(frozen=True)
class HostEnvSpec:
    """A host env id, checked, with its spaces as gymnax spaces.

    Attributes:
      env_id: the full id (`gymnasium:CartPole-v1`).
      observation_space, action_space: gymnax spaces.
      max_episode_steps: the env's time limit (None: none registered).
      make_vec: `make_vec(num_envs) -> HostVecEnv`.
    """

    env_id: str
    observation_space: Any
    action_space: Any
    max_episode_steps: int | None
    make_vec: Callable[[int], HostVecEnv]


def _gymnasium_id(name: str) -> Any:
    import gymnasium as gym

    try:
        return gym.spec(name)
    except gym.error.Error:
        known = sorted(gym.registry)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = "did you mean " + ", ".join(f"'gymnasium:{c}'" for c in close) + "?" if close else "no close matches."
        raise ValueError(f"env={GYMNASIUM_PREFIX + name!r} is unknown: gymnasium has no env {name!r}; {hint} "
                         f"(gymnasium.pprint_registry() lists the {len(known)} registered ids)") from None


def make_host_env(env_id: str, **env_kwargs: Any) -> HostEnvSpec:
    """Check a host env id and read its spaces (one env is built and closed).

    Raises:
      ValueError: an unknown id (with close matches), an unsupported space, a missing optional extra
        (naming the pip command), or an id that is not a host env.
    """
    kind = host_env_kind(env_id)
    name = env_id.split(":", 1)[1] if kind else env_id
    if kind == ENVPOOL_PREFIX:
        raise ValueError(ENVPOOL_MISSING.format(env_id=env_id, name=name))
    if kind != GYMNASIUM_PREFIX or not name:
        raise ValueError(f"env={env_id!r} is not a host env id: write gymnasium:<id>, e.g. gymnasium:CartPole-v1")
    import gymnasium as gym

    spec = _gymnasium_id(name)
    try:
        probe = gym.make(name, disable_env_checker=True, **env_kwargs)
    except gym.error.DependencyNotInstalled as error:
        raise ValueError(f"env={env_id!r} needs an optional dependency: {error} (for MuJoCo envs: "
                         "pip install -e '.[mujoco]')") from None
    try:
        observation_space = to_gymnax_space(probe.observation_space, f"env={env_id!r}: its observation")
        action_space = to_gymnax_space(probe.action_space, f"env={env_id!r}: its action")
    finally:
        probe.close()

    def make_vec(num_envs: int) -> HostVecEnv:
        vec = gym.make_vec(name, num_envs=num_envs, vectorization_mode="sync", disable_env_checker=True,
                           vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}, **env_kwargs)
        return HostVecEnv(vec, observation_space, action_space)

    return HostEnvSpec(env_id, observation_space, action_space, spec.max_episode_steps, make_vec)
