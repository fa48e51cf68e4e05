"""What every host env backend shares: one batched step (`HostStep`), the vector env's base
(`HostVecEnv`), and a checked env id with its spaces (`HostEnvSpec`).

**Autoreset (SAME_STEP).** The step that ends an episode returns the reset observation as `obs`
and the observation it reached as `final_obs` (the truncation bootstrap's input; equal to `obs`
wherever the episode went on), so every recorded step is a real transition and the next step acts
on the reset observation. gymnasium 1.x and EnvPool both default to NEXT_STEP autoreset instead
(the step *after* an episode ends ignores its action and returns a dummy transition, reward 0, not
done); each backend turns that into SAME_STEP (`gymnasium.py`, `envpool.py`).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, NamedTuple

import numpy as np
from gymnax.environments import spaces

from jaxrl_async.envs.host.observations import policy_input, policy_space
from jaxrl_async.envs.spaces import as_observation, from_gymnasium, is_shape, map_shapes, observation_shapes


def to_gymnax_space(space: Any, what: str) -> Any:
    """A gymnasium space as ours (`spaces.from_gymnasium`); ValueError naming `what` for the others."""
    try:
        return from_gymnasium(space)
    except ValueError as error:
        raise ValueError(f"{what} space: {error}") from None


def observation_space_of(space: Any, env_id: str) -> Any:
    """A host env's gymnasium observation space as its policy sees it (`observations.policy_space`);
    a ValueError naming the env for a space we do not take."""
    return policy_space(to_gymnax_space(space, f"env={env_id!r}: its observation"))


def set_row(obs_shape: Any, batch: Any, i: Any, row: Any) -> None:
    """`batch[i] = row` in place, leaf by leaf: a batched observation pytree and one of its rows
    (or, with `i` an index array, as many rows)."""

    if is_shape(obs_shape):  # a plain array: no tree walk (this runs at every step)
        batch[i] = row
        return

    def put(_, leaf: np.ndarray, value: Any) -> None:
        leaf[i] = value

    map_shapes(put, obs_shape, batch, row)


class HostStep(NamedTuple):
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


class HostVecEnv(abc.ABC):
    """`num_envs` host envs stepped as one batch, with episode statistics.

    The base keeps what every backend shares (action clipping, float32 observations in the
    space's structure, episode returns and lengths); a backend (`gymnasium.GymnasiumVecEnv`,
    `envpool.EnvPoolVecEnv`) gives `_reset(seeds)`, `_step(actions) -> (obs, final_obs,
    reward, terminated, truncated)` with SAME_STEP semantics (module docstring) and `close()`, and
    where its envs step off the calling thread, `_send(actions)` and `_receive()`, the two halves of
    `_step` (`step_async`, `step_wait`).
    """

    def __init__(self, num_envs: int, observation_space: Any, action_space: Any):
        self._obs_shape = observation_shapes(observation_space)
        self._convert = policy_input(observation_space)  # None: the env's values as they are
        self.num_envs = num_envs
        self._box = isinstance(action_space, spaces.Box)
        self._low, self._high = (np.asarray(action_space.low), np.asarray(action_space.high)) if self._box else (0, 0)
        self._returns = np.zeros(self.num_envs, np.float64)
        self._lengths = np.zeros(self.num_envs, np.int32)

    def _observation(self, obs: Any) -> Any:
        """float32 arrays in the observation space's structure (gymnasium batches a Dict / Tuple
        observation leaf by leaf), as the policy sees them (`observations.policy_space`: images in
        [0, 1], channels last; ids one-hot)."""
        obs = as_observation(self._obs_shape, obs, np)
        return obs if self._convert is None else self._convert(obs)

    def reset(self, seeds: list[int]) -> Any:
        """Reset every env, env i seeded with `seeds[i]`; the observations, float32."""
        obs = self._reset([int(s) for s in seeds])
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return obs

    def step(self, actions: np.ndarray) -> HostStep:
        """Step with `actions` ([B] ints or [B, A] floats, clipped to a Box's bounds here)."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Start a step with `actions` (`step_wait` returns it). A backend that steps its envs off
        the calling thread (EnvPool's C++ threads) returns at once, so the caller can act for other
        envs meanwhile (the actor's env groups); the others step in `step_wait`."""
        self._send(np.clip(actions, self._low, self._high) if self._box else np.asarray(actions))

    def step_wait(self) -> HostStep:
        """The step `step_async` started."""
        obs, final_obs, reward, terminated, truncated = self.receive()
        done = terminated | truncated
        episode_return, episode_length = self.tally(reward[None], done[None])
        return HostStep(obs, final_obs, reward, terminated, truncated, episode_return[0], episode_length[0], done)

    def receive(self) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
        """The step `step_async` started, without its episode statistics: (obs, final_obs, reward,
        terminated, truncated). A caller that records many steps (a host actor's fragment) takes
        them for all its steps at once afterwards (`tally`), off the loop where every step's
        Python and NumPy work slows the env's step and the act call."""
        return self._receive()

    def tally(self, reward: np.ndarray, done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each of `[T, B]` steps' episode return so far (float32) and length, in step order from
        the steps `receive`d before; an episode ending at a step starts the next from zero. The
        running returns are summed in float64, one step at a time (the same sums `step_wait` gives)."""
        returns, lengths = np.empty(reward.shape, np.float64), np.empty(reward.shape, np.int32)
        start = 0
        # a run of steps at a time, each ending at a step where some episode ended (or at the last
        # step): within a run every env adds up, in step order (accumulate is sequential), from its
        # running sums; after it the ended envs' sums restart
        for stop in [*(np.flatnonzero(done.any(axis=1)) + 1).tolist(), len(reward)]:
            if stop == start:
                continue
            run = slice(start, stop)
            returns[run] = np.add.accumulate(np.concatenate([self._returns[None], reward[run]]), axis=0)[1:]
            lengths[run] = self._lengths + np.arange(1, stop - start + 1, dtype=np.int32)[:, None]
            ended = done[stop - 1]
            self._returns = np.where(ended, 0.0, returns[stop - 1])
            self._lengths = np.where(ended, 0, lengths[stop - 1]).astype(np.int32)
            start = stop
        return returns.astype(np.float32), lengths

    @abc.abstractmethod
    def _reset(self, seeds: list[int]) -> Any:
        """Reset every env, env i seeded with `seeds[i]`; the observations, as `_observation` gives them."""

    @abc.abstractmethod
    def _step(self, actions: np.ndarray) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
        """One SAME_STEP step: (obs, final_obs, reward float32, terminated, truncated)."""

    def _send(self, actions: np.ndarray) -> None:
        """Start a step (default: keep the actions; `_receive` steps)."""
        self._sent = actions

    def _receive(self) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
        """The started step's `_step` result (default: step now)."""
        return self._step(self._sent)

    @abc.abstractmethod
    def close(self) -> None:
        """Release the envs."""


@dataclasses.dataclass(frozen=True)
class HostEnvSpec:
    """A host env id, checked, with its spaces as gymnax spaces.

    Attributes:
      env_id: the full id (`gymnasium:CartPole-v1`).
      observation_space, action_space: gymnax spaces.
      max_episode_steps: the env's time limit (None: none registered).
      make_vec: `make_vec(num_envs) -> HostVecEnv`.
      double_buffers: whether the actor's two env groups pay (`--env-groups auto`): the envs step off
        the actor's thread (`HostVecEnv.step_async` returns at once) and a step costs more than the
        hand-over to the threads that make it.
      shares_actor_core: whether the envs' own threads should run on the actor's core: they step
        off the actor's thread, in less time than it takes to wake another core for them (EnvPool's
        classic control), so a one-group actor runs on one core with them (`envs.host.cores`).
    """

    env_id: str
    observation_space: Any
    action_space: Any
    max_episode_steps: int | None
    make_vec: Callable[[int], HostVecEnv]
    double_buffers: bool = False
    shares_actor_core: bool = False
