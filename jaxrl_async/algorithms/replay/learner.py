"""What the off-policy learners (dqn, sac, td3) share: the replay state beside their own networks,
the update's steps around their gradient steps, the target networks' step (`polyak`), and the
host-side hooks for their buffer.

    extra = ReplayState(nets=target_network, buffer=new_buffer(...), gradient_steps=0)
    start = begin_update(learner, trajectory, ...)       # add the fragment, split the key
    carry, metrics, ready = learn_once_ready(gradient_step, carry, start, ...)
    metrics = {**metrics, **replay_metrics(buffer, ready, ...)}
    Algorithm(init, update, behaviour, host=host_hooks(replay_cfg))

The buffer lives in the learner state, so the fused loop's donation of the train state donates
it too: no update copies it. The async learner donates the buffer alone (`host_hooks`): the rest
of the learner state holds the published params, which are never donated.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl_async.algorithms.replay import buffer as replay
from jaxrl_async.algorithms.replay import priority
from jaxrl_async.algorithms.sgd import annealed_learning_rate
from jaxrl_async.config import host_env_kind
from jaxrl_async.envs.spaces import zeros_observation
from jaxrl_async.types import HostHooks, LearnerState, TrainState, Trajectory

REPLAY_SAVED = "replay_saved"  # a checkpoint's extra: whether it holds the replay buffer


@struct.dataclass
class ReplayState:
    """`LearnerState.extra` of a replay learner.

    Attributes:
      nets: the learner's own networks beside the params (DQN: the target network; SAC: the
        critics, their targets and the temperature).
      buffer: `buffer.ReplayBuffer`, leaves `[C, B, ...]`.
      gradient_steps: `[]` int32 gradient steps taken.
    """

    nets: Any
    buffer: replay.ReplayBuffer
    gradient_steps: jax.Array


def new_buffer(replay_cfg, obs_shape, action_shape, action_dtype, *, num_envs: int,
               num_steps: int) -> replay.ReplayBuffer:
    """An empty buffer of `replay_capacity // num_envs` rows of `num_envs` transitions (`obs_shape`:
    a shape, or a nested observation's shape structure)."""
    capacity_rows = replay_cfg.replay_capacity // num_envs
    if capacity_rows < num_steps:
        raise ValueError(f"replay_capacity={replay_cfg.replay_capacity} must hold at least one rollout, "
                         f"num_envs*num_steps={num_envs * num_steps}")
    example = dict(
        obs=zeros_observation(obs_shape, (num_envs,)), action=jnp.zeros((num_envs, *action_shape), action_dtype),
        reward=jnp.zeros((num_envs,), jnp.float32), terminated=jnp.zeros((num_envs,), bool),
        truncated=jnp.zeros((num_envs,), bool), next_obs=zeros_observation(obs_shape, (num_envs,)))
    return replay.init(example, capacity_rows, prioritised=replay_cfg.prioritised)


class UpdateStart(NamedTuple):
    """What an update computes before its gradient steps."""

    learning_rate: jax.Array
    buffer: replay.ReplayBuffer  # with the fragment added
    key: jax.Array  # the learner's next key
    learn_key: jax.Array  # the gradient steps' keys come from it
    weight_exponent: jax.Array  # prioritised replay's beta at this update
    obs_stats: Any = ()  # the fragment's observation statistics, `()` where it records none (`normalized_batch`)


def begin_update(learner: LearnerState, trajectory: Trajectory, learner_cfg, replay_cfg, *,
                 num_updates: int) -> UpdateStart:
    """Add the fragment to the buffer; the update's learning rate, keys and importance exponent."""
    learning_rate = annealed_learning_rate(learner.hparams.learning_rate, learner.update_count, num_updates,
                                           learner_cfg.anneal_lr)
    buffer = replay.add(learner.extra.buffer, replay.transitions_of(trajectory))
    key, learn_key = jax.random.split(learner.key)
    weight_exponent = priority.annealed_exponent(replay_cfg.priority_weight_exponent,
                                                 learner.update_count / num_updates)
    return UpdateStart(learning_rate, buffer, key, learn_key, weight_exponent, trajectory.obs_stats)


def normalized_batch(batch: dict, obs_stats: Any) -> dict:
    """A sampled batch (`buffer.sample`) as the networks take it: with `--normalize-obs` the buffer
    holds the env's own observations and the trajectory brings the rollout's statistics
    (`Trajectory.obs_stats`), by which `obs` and `bootstrap_obs` are normalised here, at every
    update by the newest statistics (Brax's SAC does the same); `()`: the batch as it is."""
    if obs_stats == ():
        return batch
    return {**batch, "obs": obs_stats.normalize(batch["obs"]),
            "bootstrap_obs": obs_stats.normalize(batch["bootstrap_obs"])}


def learn_once_ready(gradient_step: Callable, carry: Any, start: UpdateStart, replay_cfg, *,
                     num_envs: int) -> tuple[Any, dict, jax.Array]:
    """`replay_ratio` gradient steps once the buffer holds `learning_starts` transitions, else none
    (`buffer.gradient_steps_once_ready`); returns the carry, the steps' mean metrics and `ready`."""
    ready = start.buffer.size * num_envs >= replay_cfg.learning_starts
    carry, metrics = replay.gradient_steps_once_ready(gradient_step, carry, start.learn_key,
                                                      num_steps=replay_cfg.replay_ratio, ready=ready)
    return carry, metrics, ready


def replay_metrics(buffer: replay.ReplayBuffer, ready: jax.Array, replay_cfg, *, num_envs: int) -> dict:
    """The buffer's fill after the fragment was added, and the gradient steps this update took
    (summed over a window by the host: `host_hooks`' rates)."""
    return {"replay_fill": buffer.size * num_envs / (buffer.capacity_rows * num_envs),
            "gradient_steps": jnp.where(ready, replay_cfg.replay_ratio, 0).astype(jnp.float32)}


# -- the host side -------------------------------------------------------------------------
def replay_rates(gradient_steps: float, samples: int, seconds: float) -> dict:
    """A replay learner's rates over a stretch of training, all seeds together:
    `gradient_steps_per_second` and `samples_per_gradient_step` (env transitions added to the
    buffers per gradient step: num_envs*num_steps / replay_ratio once learning has started;
    None while no gradient step was taken)."""
    return {"gradient_steps_per_second": gradient_steps / seconds if seconds > 0 else None,
            "samples_per_gradient_step": samples / gradient_steps if gradient_steps > 0 else None}


def _figures(sums: dict, samples: int, seconds: float, final: LearnerState | None = None) -> dict:
    gradient_steps = float(np.sum(sums["gradient_steps"])) if "gradient_steps" in sums else 0.0
    figures = replay_rates(gradient_steps, samples, seconds)
    if final is not None:  # summary.json: the count this process took, the final fill (mean over seeds)
        buffer = final.extra.buffer
        capacity_rows = jax.tree.leaves(buffer.storage)[0].shape[1] if jax.tree.leaves(buffer.storage) else 0
        fill = float(np.mean(jax.device_get(buffer.size))) / capacity_rows if capacity_rows else 0.0
        figures.update(gradient_steps=int(round(gradient_steps)), replay_fill=fill)
    return figures


def _without_buffer(learner: LearnerState) -> LearnerState:
    """`learner` with the buffer's storage dropped (position and size zero): what a checkpoint
    saved without `--checkpoint-replay` holds."""
    return learner.replace(extra=replay.strip(learner.extra))


def _flat_layout(state_dict: dict) -> dict:
    """A checkpoint's learner written before `LearnerState.extra` (its replay fields beside the
    params) in today's layout: the extra fields under `extra` (`nets` the DQN target network, or
    SAC's critics and temperature, as they were named)."""
    learner = dict(state_dict["learner"])
    if "extra" in learner or "replay" not in learner:
        return state_dict
    buffer, gradient_steps = learner.pop("replay"), learner.pop("gradient_steps")
    own = [name for name in learner if name not in ("params", "opt_state", "key", "update_count", "hparams")]
    nets = learner.pop(own[0]) if own == ["target_network"] else {name: learner.pop(name) for name in own}
    learner["extra"] = {"nets": nets, "buffer": buffer, "gradient_steps": gradient_steps}
    return {**state_dict, "learner": learner}


def host_hooks(replay_cfg) -> HostHooks:
    """The buffer on the host side: a checkpoint keeps it only with `--checkpoint-replay` (else a
    resume refills it from empty), the async learner's update writes it in place, and the metrics
    lines and the summary carry the replay rates."""

    def for_checkpoint(learner: LearnerState) -> tuple[LearnerState, dict]:
        kept = learner if replay_cfg.checkpoint_replay else _without_buffer(learner)
        return kept, {REPLAY_SAVED: replay_cfg.checkpoint_replay}

    def restore(template: TrainState, saved: dict, restore_state: Callable) -> tuple[TrainState, dict, str | None]:
        state_dict = _flat_layout(saved["state"])
        if saved["extra"].get(REPLAY_SAVED, True):
            restored = restore_state(template, state_dict)
            if host_env_kind(saved["config"]["env"]):  # its envs start new episodes: the saved ones end here
                extra = restored.learner.extra
                restored = restored.replace(learner=restored.learner.replace(
                    extra=extra.replace(buffer=jax.vmap(replay.cut_episodes)(extra.buffer))))
            return restored, {}, None
        restored = restore_state(template.replace(learner=_without_buffer(template.learner)), state_dict)
        learner = restored.learner.replace(extra=replay.graft(restored.learner.extra, template.learner.extra))
        note = (f"the checkpoint holds no replay buffer (saved without --checkpoint-replay); the buffer refills "
                f"from empty and learning waits for {replay_cfg.learning_starts} transitions, so this run will "
                "not match one that never stopped")
        return restored.replace(learner=learner), {"replay_refilled": True}, note

    def split(learner: LearnerState):
        return learner.replace(extra=learner.extra.replace(buffer=None)), learner.extra.buffer

    def join(rest: LearnerState, buffer) -> LearnerState:
        return rest.replace(extra=rest.extra.replace(buffer=buffer))

    return HostHooks(for_checkpoint=for_checkpoint, restore=restore, donated=(split, join), figures=_figures)


def polyak(online: Any, target: Any, tau: float) -> Any:
    """A target network's step, target <- tau online + (1 - tau) target, leaf by leaf (`tau` 1 copies
    the online params): the slowly moving copy a replay learner bootstraps from, so that its
    regression target does not chase the network being fitted (Mnih et al. 2015; Lillicrap et al.
    2016 for the soft update)."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)
