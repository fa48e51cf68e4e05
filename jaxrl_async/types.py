"""The state and data pytrees that flow between rollout, learner and host.

Shapes: `T` rollout length (num_steps), `B` parallel envs (num_envs); a seed axis
`S` is added in front by vmap when several seeds train together.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
from flax import struct



@struct.dataclass
class RolloutState:
    """What the actor carries from one rollout to the next.

    Attributes:
      env_state: batched env state, leaves `[B, ...]`.
      obs: `[B, *obs_shape]` float32, the raw (unnormalised) current observation; for a
        Dict / Tuple observation space a dict / tuple of such leaves (so every `obs` below).
      obs_stats: running observation statistics (unused when normalisation is off).
      key: PRNG key for actions and env steps.
      carry: the policy's recurrent state, leaves `[B, ...]` (an empty tuple if feedforward).
      reset: `[B]` bool, the current observation starts an episode (the carry is reset first).
      noise: `[B, *action_shape]` the previous step's exploration noise where actions are
        temporally correlated (`exploration.py`), else an empty tuple.
    """

    env_state: Any
    obs: jax.Array
    obs_stats: Any  # envs.normalize.RunningMeanStd
    key: jax.Array
    carry: Any
    reset: jax.Array
    noise: Any = ()


@struct.dataclass
class Trajectory:
    """One rollout, time-major, with its advantages.

    Attributes:
      obs: `[T, B, *obs_shape]` observation the policy acted on (normalised if enabled); a
        dict / tuple of such leaves for a nested observation space.
      action: `[T, B, *action_shape]` the sampled (unclipped) action (`[T, B, len(nvec)]` int32
        for a MultiDiscrete space).
      log_prob: `[T, B]` behaviour log-probability of `action`.
      value: `[T, B]` V(obs_t) under the behaviour params (`v_tm1`).
      reward: `[T, B]` reward after acting at t.
      terminated: `[T, B]` bool, the episode reached a terminal state at t.
      truncated: `[T, B]` bool, the episode hit its time limit at t (not terminal).
      next_obs: `[T, B, *obs_shape]` observation after acting at t, *before* any
        auto-reset (gymnax's `final_observation`), normalised like `obs`.
      bootstrap_value: `[T, B]` V(next_obs_t) under the behaviour params (`v_t`), 0 where the
        episode terminated at t (`bootstrap.bootstrap_values`).
      advantage: `[T, B]` GAE advantages.
      target: `[T, B]` value targets, advantage + value.
      episode_return, episode_length: `[T, B]` return/length of an episode that ended at t.
      episode_done: `[T, B]` bool, validity mask for the two above.
      reset: `[T, B]` bool, `obs` starts an episode (a recurrent learner resets its carry there).
      initial_carry: the policy's recurrent state at the fragment's start, leaves `[B, ...]`
        (an empty tuple if feedforward), so the learner can replay the sequence.
    """

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: jax.Array
    bootstrap_value: jax.Array
    advantage: jax.Array
    target: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    episode_done: jax.Array
    reset: jax.Array
    initial_carry: Any


@struct.dataclass
class LearnerState:
    """What the learner carries: params, optimiser state, its own key, counters, hyperparameters.

    `hparams` holds the shape-free hyperparameters as arrays, so that training can be
    vmapped over them (a sweep inside one jit).
    """

    params: Any
    opt_state: Any
    key: jax.Array
    update_count: jax.Array  # [] int32, updates applied so far
    hparams: Any


@struct.dataclass
class TrainState:
    """Everything that changes during training (the fused mode's scan carry)."""

    learner: LearnerState
    rollout: RolloutState


class Algorithm(NamedTuple):
    """A learner as a pair of pure functions, shaped like an optax transformation.

    init(key, hparams) -> LearnerState
    update(LearnerState, Trajectory) -> (LearnerState, dict of scalar metrics)
    behaviour(params, env_steps) -> params   (optional)

    `behaviour`, where a learner has one, gives the params the rollout acts with after
    `env_steps` env steps per seed (`[]` int32) from params published earlier: the parts of the
    behaviour policy that follow the env steps taken (DQN's epsilon, SAC's random warm-up), so
    an async actor whose params are a version behind acts as the fused mode would. It keeps
    the params' shapes (any leading seed axis included).
    """

    init: Callable[..., LearnerState]
    update: Callable[[LearnerState, Trajectory], tuple[LearnerState, dict]]
    behaviour: Callable[[Any, Any], Any] | None = None
