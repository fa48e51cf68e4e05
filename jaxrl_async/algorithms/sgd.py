"""What every learner shares: its hyperparameters as arrays, and the epochs x minibatches SGD loop.

A learner is a loss over a minibatch plus a way to lay the trajectory out as a
batch; `make_learner` turns the two into an `Algorithm(init, update)`.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.config import check_minibatches
from jaxrl_async.nets.actor_critic import Policy, make_policy
from jaxrl_async.core.optimizer import global_norm, make_optimizer, sgd_step
from jaxrl_async.types import Algorithm, LearnerState, Trajectory


@struct.dataclass
class LearnerHyperparams:
    """Shape-free hyperparameters as arrays: training can be vmapped over them (a sweep)."""

    learning_rate: jax.Array
    ent_coef: jax.Array
    vf_coef: jax.Array
    clip_eps: jax.Array

    @classmethod
    def from_config(cls, cfg) -> "LearnerHyperparams":
        return cls(*(jnp.asarray(getattr(cfg, f), jnp.float32)
                     for f in ("learning_rate", "ent_coef", "vf_coef", "clip_eps")))


def annealed_learning_rate(learning_rate, update_count: jax.Array, num_updates: int, anneal: bool):
    """Update `update_count`'s step size: `learning_rate`, decayed linearly towards 0 over
    `num_updates` where `anneal` (every learner's `--anneal-lr`)."""
    if not anneal:
        return learning_rate
    return learning_rate * (1.0 - update_count.astype(jnp.float32) / num_updates)


def env_steps_of(update_count: jax.Array, batch_size: int) -> jax.Array:
    """The env steps per seed that `update_count` updates of `batch_size` steps took, as float32
    (schedules keyed on env steps: DQN's and PQN's epsilon). The int32 product, where it fits,
    rounded once; past 2**31 steps, where it would wrap negative and a schedule start over, the
    product in float32."""
    fits = update_count <= (2**31 - 1) // batch_size
    return jnp.where(fits, (update_count * batch_size).astype(jnp.float32),
                     update_count.astype(jnp.float32) * batch_size)


def sweep_hparams(cfg, seeds_per_point: int, **axes: Sequence[float]) -> tuple[LearnerHyperparams, list[dict]]:
    """Hyperparameters for a sweep vmapped inside one jit: every grid point, `seeds_per_point` seeds each.

        hparams, points = sweep_hparams(cfg.learner, 4, learning_rate=[1e-4, 3e-4, 1e-3, 3e-3])
        train(dataclasses.replace(cfg, num_seeds=len(points) * 4), hparams=hparams)

    Seed index `i` trains grid point `points[i // seeds_per_point]`; every seed still
    has its own key (`fold_in(seed, i)`), so each point's seeds are independent.

    Args:
      cfg: the learner config (`TrainConfig.learner`); it gives every field not swept.
      seeds_per_point: seeds trained at each grid point.
      **axes: field name (`learning_rate`, `ent_coef`, `vf_coef`, `clip_eps`) ->
        its values; several fields sweep their product (the first field varies slowest). Only
        fields the learner reads (`LearnerSpec.hparams_read`) may vary: `train` refuses others.

    Returns:
      hparams: `LearnerHyperparams` with leading axis `[num_points * seeds_per_point]`.
      points: the grid points in order, one dict of field -> value each.
    """
    fields = [f.name for f in dataclasses.fields(LearnerHyperparams)]
    unknown = sorted(set(axes) - set(fields))
    if unknown:
        raise ValueError(f"cannot sweep {unknown}: the vmappable hyperparameters are {fields}; "
                         "the others change array shapes or the program (run them separately)")
    if seeds_per_point < 1 or any(len(values) == 0 for values in axes.values()):
        raise ValueError(f"a sweep needs seeds_per_point >= 1 (got {seeds_per_point}) and at least one "
                         "value per swept field")
    points = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    for point in points:  # each point by the config's own rules, as its flags would be
        try:
            dataclasses.replace(cfg, **{name: float(value) if hasattr(value, "__float__") else value
                                        for name, value in point.items()})  # an array's element too
        except ValueError as error:
            raise ValueError(f"sweep point {point} is invalid: {error}") from error
    base = LearnerHyperparams.from_config(cfg)
    columns = {name: jnp.asarray([point.get(name, getattr(base, name)) for point in points], jnp.float32)
               for name in fields}
    hparams = LearnerHyperparams(**{name: jnp.repeat(column, seeds_per_point) for name, column in columns.items()})
    return hparams, points


def actor_critic(cfg, obs_shape, action_space) -> tuple[Policy, None]:
    """`Learner.networks` of the learners on this module's loop: the actor-critic alone."""
    return make_policy(cfg.network, obs_shape, action_space), None


# loss(params, minibatch, hparams) -> (scalar loss, dict of scalar metrics)
LossFn = Callable[[Any, dict, LearnerHyperparams], tuple[jax.Array, dict]]
# trajectory -> (batch dict with a leading axis to shuffle, its length, metrics of the whole batch)
BatchFn = Callable[[Trajectory], tuple[dict, int, dict]]


def make_learner(cfg, policy: Policy, loss_fn: LossFn, batch_fn: BatchFn, *, num_updates: int,
                 unroll: int = 1) -> Algorithm:
    """`update_epochs` passes over the batch, each in `num_minibatches` shuffled minibatches,
    one Adam step per minibatch (clipped by global norm; learning rate optionally annealed
    linearly to zero over `num_updates`).

    Args:
      cfg: learner hyperparameters (update_epochs, num_minibatches, learning_rate, anneal_lr,
        max_grad_norm, ent_coef, vf_coef, clip_eps).
      policy: the actor-critic.
      loss_fn: the learner's loss on one minibatch.
      batch_fn: lays a trajectory out as the batch to shuffle, sequences along its first
        axis (`replay_batch`: single transitions, or whole env sequences for a recurrent
        policy or a learner that needs the time order).
      num_updates: iterations in the run, for the annealing.
      unroll: unroll factor of the loop over minibatches (speed only).
    """
    optimizer = make_optimizer(cfg.max_grad_norm)

    def init(key: jax.Array, hparams: LearnerHyperparams | None = None) -> LearnerState:
        key, init_key = jax.random.split(key)
        params = policy.init(init_key)
        return LearnerState(params=params, opt_state=optimizer.init(params), key=key,
                            update_count=jnp.zeros((), jnp.int32),
                            hparams=LearnerHyperparams.from_config(cfg) if hparams is None else hparams)

    def update(learner: LearnerState, trajectory: Trajectory) -> tuple[LearnerState, dict]:
        hp = learner.hparams
        learning_rate = annealed_learning_rate(hp.learning_rate, learner.update_count, num_updates, cfg.anneal_lr)
        batch, batch_size, batch_metrics = batch_fn(trajectory)
        num_steps, num_envs = trajectory.reward.shape
        # batch_fn's rows are transitions (T * B) or whole env sequences (B); at T = 1 both rules agree
        check_minibatches(cfg.num_minibatches, batch_size, whole_sequences=batch_size != num_steps * num_envs)

        def minibatch_step(carry, minibatch):
            params, opt_state = carry
            grads, metrics = jax.grad(loss_fn, has_aux=True)(params, minibatch, hp)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = sgd_step(params, updates, learning_rate)
            return (params, opt_state), {**metrics, "grad_norm": global_norm(grads)}

        def epoch(carry, _):
            params, opt_state, key = carry
            key, perm_key = jax.random.split(key)
            order = jax.random.permutation(perm_key, batch_size)
            minibatches = jax.tree.map(
                lambda x: jnp.take(x, order, axis=0).reshape((cfg.num_minibatches, -1) + x.shape[1:]), batch)
            (params, opt_state), metrics = jax.lax.scan(minibatch_step, (params, opt_state), minibatches,
                                                        unroll=min(unroll, cfg.num_minibatches))
            return (params, opt_state, key), metrics

        (params, opt_state, key), metrics = jax.lax.scan(
            epoch, (learner.params, learner.opt_state, learner.key), None, length=cfg.update_epochs)
        metrics = {**jax.tree.map(jnp.mean, metrics), **batch_metrics, "learning_rate": learning_rate}
        learner = learner.replace(params=params, opt_state=opt_state, key=key,
                                  update_count=learner.update_count + 1)
        return learner, metrics

    return Algorithm(init, update)


def replay_batch(trajectory: Trajectory, fields: tuple[str, ...], replay_length: int | None,
                 extra: dict[str, jax.Array] | None = None) -> tuple[dict, int]:
    """The trajectory cut into sequences of `replay_length` steps: the batch the learner shuffles.

    The learner replays each sequence with `policy.unroll` (`replay`) from the carry at
    its start, so a sequence must start where the carry is known. The trajectory stores
    the carry at the fragment's start only, and the policy states the length it needs
    (`Policy.replay_length`): 1 for a feedforward policy, whose carry is empty (every
    transition stands alone and is shuffled on its own), None (the whole fragment) for a
    recurrent one. A learner that needs the time order itself (V-trace) asks for whole
    fragments, which fit every policy. The layout follows from that one number, and the
    same replay serves every policy: no caller asks whether the policy is recurrent.

    The layout is the learner's business, not the rollout's: the rollout records the
    same time-major fragment for every policy and learner, and only the learner knows
    the order its loss needs.

    Sequence `k * B + b` holds steps `[k L, (k + 1) L)` of env `b`: with L = T the env
    sequences `[B, T]`; with L = 1 the time-major transitions `[T * B]`. Single steps
    (`replay_length=1`) carry no time axis: they are exactly the `[T * B, ...]`
    transitions the feedforward learners have always trained on, so their XLA program,
    and its float rounding, is unchanged (a length-1 axis changes the matmul shapes).

    Args:
      trajectory: the rollout, `[T, B, ...]` fields; `initial_carry` leaves `[B, ...]`.
      fields: the trajectory fields to lay out.
      replay_length: L, a divisor of T; None for T (whole fragments).
      extra: more `[T, B, ...]` arrays to lay out alongside (e.g. returns).

    Returns:
      batch: each field `[T * B / L, L, ...]` (`[T * B, ...]` for single steps), with
        `reset` laid out alike and the sequences' `initial_carry`.
      num_sequences: T * B / L, the length of the axis to shuffle.
    """
    num_steps, num_envs = trajectory.reward.shape
    if replay_length is not None and jax.tree.leaves(trajectory.initial_carry):
        raise ValueError(f"replay_length={replay_length}: a policy with a recurrent state must replay whole "
                         "fragments (replay_length=None), since the trajectory stores its carry only at the "
                         "fragment's start")
    length = num_steps if replay_length is None else replay_length
    if length < 1 or num_steps % length:
        raise ValueError(f"replay_length={length} must divide the rollout's num_steps={num_steps}")
    num_chunks = num_steps // length
    time_axis = () if replay_length == 1 else (length,)

    def sequences(x):  # [T, B, ...] -> [T / L * B, L, ...]
        x = jnp.swapaxes(x.reshape((num_chunks, length, num_envs) + x.shape[2:]), 1, 2)
        return x.reshape((num_chunks * num_envs,) + time_axis + x.shape[3:])

    batch = jax.tree.map(sequences, {**{f: getattr(trajectory, f) for f in fields + ("reset",)}, **(extra or {})})
    # whole fragments start at the fragment's start; a cut one has an empty carry (checked above)
    batch["initial_carry"] = trajectory.initial_carry
    return batch, num_chunks * num_envs


def replay(policy: Policy, params, batch: dict):
    """(distribution, value, carry_after) for the batch's sequences (`replay_batch`), laid out
    like them: `policy.unroll` from each sequence's initial carry, reset at its episode starts."""
    return policy.unroll(params, batch["obs"], batch["initial_carry"], batch["reset"])


def truncated_importance_weight(log_prob: jax.Array, behaviour_log_prob: jax.Array) -> jax.Array:
    """min(1, pi/mu), without gradient: keeps a policy-gradient unbiased-ish on slightly stale data."""
    return jax.lax.stop_gradient(jnp.minimum(1.0, jnp.exp(log_prob - behaviour_log_prob)))
