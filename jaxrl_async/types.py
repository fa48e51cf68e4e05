"""The state and data pytrees that flow between rollout, learner and host.

Shapes: `T` rollout length (num_steps), `B` parallel envs (num_envs); a seed axis
`S` is added in front by vmap when several seeds train together.
"""

from __future__ import annotations

import dataclasses
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
      obs: `[T, B, *obs_shape]` observation the policy acted on (normalised if enabled, but see
        `obs_stats`); a dict / tuple of such leaves for a nested observation space.
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
      obs_stats: an empty tuple, where `obs` and `next_obs` are what the policy saw; or, for a
        replay learner with `--normalize-obs`, the rollout's `RunningMeanStd` after the fragment,
        and then `obs` and `next_obs` are the env's own, unnormalised: the buffer stores them
        and the learner normalises each sampled batch by the statistics of its update
        (`replay.learner.normalized_batch`), as Brax's SAC does, so no stored observation is
        normalised by statistics gone stale. Where the trajectory carries them, the values and
        the advantages (and, from a host env, the log-probabilities) are those of the recorded
        observations normalised by these statistics, not by the ones each step acted with: no
        replay learner reads them.
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
    obs_stats: Any = ()


# What a collector records at each step of a fragment; the finishing step adds the rest
# (`rollout.collector.finish`).
FINISHED_FIELDS = ("bootstrap_value", "advantage", "target", "initial_carry", "obs_stats")
RECORDED_FIELDS = tuple(field.name for field in dataclasses.fields(Trajectory) if field.name not in FINISHED_FIELDS)


@struct.dataclass
class LearnerState:
    """What every learner carries: params, optimiser state, its own key, the update count, its
    hyperparameters, and in `extra` whatever else a learner keeps (a replay learner's buffer and
    target networks, `algorithms/replay/learner.py`; an empty tuple for the others).

    `hparams` holds the shape-free hyperparameters as arrays, so that training can be
    vmapped over them (a sweep inside one jit).
    """

    params: Any
    opt_state: Any
    key: jax.Array
    update_count: jax.Array  # [] int32, updates applied so far
    hparams: Any
    extra: Any = ()


@struct.dataclass
class TrainState:
    """Everything that changes during training (the fused mode's scan carry)."""

    learner: LearnerState
    rollout: RolloutState


def _as_is(learner: LearnerState) -> tuple[LearnerState, dict]:
    return learner, {}


def _restore_all(template: "TrainState", saved: dict, restore: Callable) -> tuple["TrainState", dict, str | None]:
    return restore(template, saved["state"]), {}, None


def _no_figures(sums: dict, samples: int, seconds: float, final: LearnerState | None = None) -> dict:
    return {}


class HostHooks(NamedTuple):
    """What the host side asks of a learner about the state it keeps beyond params and optimiser
    (a replay learner's buffer: `algorithms/replay/learner.py`). The defaults treat that state like
    any other, so the loops and the checkpoints never ask which learner they run.

    for_checkpoint(learner) -> (learner as a checkpoint keeps it, fields for the checkpoint's extra)
    restore(template, saved, restore_state) -> (TrainState, summary fields, a note for the console or
        None): the checkpoint `saved` (`checkpoint.load`) in `template`'s structure, where
        `restore_state(template, state_dict)` fills a template from a saved state dict.
    donated: (split, join) or None: `split(learner) -> (rest, part)` names the part of the state
        the async learner's update may overwrite in place (donated to its jit), `join` undoes it.
    figures(sums, samples, seconds, final=None) -> dict: the learner's own rates over a stretch of
        training (metric `sums` over all seeds' `samples` env steps in `seconds`), for a metrics
        line; with the `final` learner state, for summary.json.
    """

    for_checkpoint: Callable[[LearnerState], tuple[LearnerState, dict]] = _as_is
    restore: Callable[..., tuple["TrainState", dict, str | None]] = _restore_all
    donated: tuple[Callable, Callable] | None = None
    figures: Callable[..., dict] = _no_figures


class Algorithm(NamedTuple):
    """A learner as a pair of pure functions, shaped like an optax transformation.

    init(key, hparams) -> LearnerState
    update(LearnerState, Trajectory) -> (LearnerState, dict of scalar metrics)
    behaviour(params, env_steps) -> params   (optional)
    host: `HostHooks`, how the host side treats its state (default: like any other)

    `behaviour`, where a learner has one, gives the params the rollout acts with after
    `env_steps` env steps per seed (`[]` float32) from params published earlier: the parts of the
    behaviour policy that follow the env steps taken (DQN's epsilon, SAC's random warm-up), so
    an async actor whose params are a version behind acts as the fused mode would. It keeps
    the params' shapes (any leading seed axis included).
    """

    init: Callable[..., LearnerState]
    update: Callable[[LearnerState, Trajectory], tuple[LearnerState, dict]]
    behaviour: Callable[[Any, Any], Any] | None = None
    host: HostHooks = HostHooks()


class Learner(NamedTuple):
    """A learner as the registry holds it (`algorithms/__init__.py`): its networks and its algorithm.

    networks(cfg, obs_shape, action_space) -> (Policy, the learner's own networks or None): the
        policy the rollout acts with and what else the learner trains (DQN's Q-function, SAC's
        actor and critics), at `cfg.matmul_precision`.
    make(cfg, policy, nets, speed) -> Algorithm: the learner for this config's rollout
        (`speed`: the run's resolved `speed.SpeedSettings`: the minibatch loop's unroll factor,
        the form of a return's recursion; how the programs are laid out, not what they compute).
    """

    networks: Callable[..., tuple[Any, Any]]
    make: Callable[..., Algorithm]
