"""What the Box-action replay learners (SAC, TD3) share around their own losses: the twin critics'
regression step, the actor's step on the critics just updated, and the update around the gradient
steps. Each learner brings its critic target, its actor loss and its target networks' schedule.

    def gradient_step_for(start):                      # an update's step, on start.buffer
        def gradient_step(carry: StepCarry, key):
            view, batch = sample_batch(start, carry, key, ...)
            critic, critic_opt, critic_grads, metrics, view = critic_step(optimizer, critic_loss_of, ...)
            actor, actor_opt, loss_pi, aux, actor_grads = actor_step(optimizer, actor_loss_of, ...)
            return carry.after(view, actor=actor, nets=..., opt_state=...), metrics
        return gradient_step

    algorithm = make_replay_actor_critic(cfg, replay_cfg, policy, nets.init_critic, own, gradient_step_for, ...)

The critics regress onto the learner's target y, each transition's error weighted by prioritised
replay's importance weight w (1 with uniform replay; the actor's loss is not weighted), and the
twins' mean |TD error| per transition becomes its new priority:

    critic = 1/2 sum_i mean w (Q_i(s, a) - stop_gradient(y))^2
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_async.algorithms.replay import buffer as replay
from jaxrl_async.algorithms.replay.learner import (ReplayState, UpdateStart, begin_update, learn_once_ready,
                                                   new_buffer, normalized_batch, replay_metrics)
from jaxrl_async.algorithms.sgd import LearnerHyperparams
from jaxrl_async.core.optimizer import sgd_step
from jaxrl_async.nets.actor_critic import Policy, at_matmul_precision
from jaxrl_async.types import Algorithm, HostHooks, LearnerState, Trajectory


# -- the critics' loss, on plain arrays (tests/test_sac.py and tests/test_priority.py check it) ------
def critic_loss(q, target, weight=None):
    """1/2 sum over the twins of the mean squared error; q `[2, N]`, target `[N]` (held fixed);
    `weight` `[N]`: prioritised replay's importance weights on each transition's error."""
    squared = jnp.square(q - jax.lax.stop_gradient(target)[None])
    return 0.5 * jnp.sum(jnp.mean(squared if weight is None else weight[None] * squared, axis=-1))


def twin_critic_loss(q, target, weight=None) -> tuple[jax.Array, dict]:
    """`critic_loss` and its metrics; `td_abs` `[N]`, the twins' mean |TD error| per transition
    (prioritised replay's new priorities), the rest scalars."""
    loss = critic_loss(q, target, weight)
    td_abs = jnp.mean(jnp.abs(q - jax.lax.stop_gradient(target)[None]), axis=0)
    return loss, {"critic_loss": loss, "q_mean": jnp.mean(q), "target_mean": jnp.mean(target), "td_abs": td_abs}


# -- one gradient step's parts ------------------------------------------------------------------
@struct.dataclass
class StepCarry:
    """What the gradient steps carry: the actor's params, the learner's own networks
    (`ReplayState.nets`), the optimiser states, the gradient steps taken before this one, and the
    buffer's priorities (None with uniform replay: the buffer itself stays outside the scan)."""

    actor: Any
    nets: Any
    opt_state: Any
    gradient_steps: jax.Array
    priorities: Any
    max_priority: Any

    def after(self, view: replay.ReplayBuffer, *, actor, nets, opt_state) -> "StepCarry":
        """The carry after one more step, with the priorities it wrote into `view`."""
        return StepCarry(actor=actor, nets=nets, opt_state=opt_state, gradient_steps=self.gradient_steps + 1,
                         priorities=view.priorities, max_priority=view.max_priority)


def sample_batch(start: UpdateStart, carry: StepCarry, key: jax.Array, replay_cfg, *,
                 gamma: float) -> tuple[replay.ReplayBuffer, dict]:
    """(the update's buffer with the carried priorities, a minibatch sampled from it: `replay.sample`,
    its observations as the networks take them: `normalized_batch`)."""
    view = start.buffer.replace(priorities=carry.priorities, max_priority=carry.max_priority)  # None: uniform
    batch = replay.sample(view, key, batch_size=replay_cfg.replay_batch_size, n_step=replay_cfg.n_step, gamma=gamma,
                          weight_exponent=start.weight_exponent)
    return view, normalized_batch(batch, start.obs_stats)


def apply_gradients(optimizer: optax.GradientTransformation, params, grads, opt_state, learning_rate):
    """One optimiser step: (new params, new optimiser state)."""
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return sgd_step(params, updates, learning_rate), opt_state


def critic_step(optimizer: optax.GradientTransformation, loss: Callable, critic, critic_opt, learning_rate,
                view: replay.ReplayBuffer, batch: dict, replay_cfg):
    """The critics' step on `loss(critic) -> twin_critic_loss(...)`, and the sampled transitions'
    new priorities where the replay is prioritised; returns (critic, critic_opt, grads, metrics
    without `td_abs`, view)."""
    grads, metrics = jax.grad(loss, has_aux=True)(critic)
    td_abs = metrics.pop("td_abs")
    if replay_cfg.prioritised:  # prioritised replay weights the critics' loss only, not the actor's
        view = replay.update_priorities(view, batch["row"], batch["env"], td_abs,
                                        exponent=replay_cfg.priority_exponent, epsilon=replay_cfg.priority_epsilon)
    critic, critic_opt = apply_gradients(optimizer, critic, grads, critic_opt, learning_rate)
    return critic, critic_opt, grads, metrics, view


def actor_step(optimizer: optax.GradientTransformation, loss: Callable, actor, actor_opt, learning_rate):
    """The actor's step on `loss(actor) -> (loss, aux)`; returns (actor, actor_opt, loss, aux, grads)."""
    (value, aux), grads = jax.value_and_grad(loss, has_aux=True)(actor)
    actor, actor_opt = apply_gradients(optimizer, actor, grads, actor_opt, learning_rate)
    return actor, actor_opt, value, aux, grads


def grad_norm_metrics(critic_grad_norm, actor_grad_norm) -> dict:
    """The gradients' norms as the learners report them: `grad_norm`, which every learner reports
    (the divergence check reads it), is the critics' and the actor's together, taken from the two
    norms that the optimiser's clipping computes already. A norm over both trees would reduce every
    gradient once more at each gradient step (and, for small networks, copy them end to end)."""
    return {"grad_norm": jnp.sqrt(critic_grad_norm**2 + actor_grad_norm**2),
            "critic_grad_norm": critic_grad_norm, "actor_grad_norm": actor_grad_norm}


# -- the learner around its gradient steps -----------------------------------------------------
def make_replay_actor_critic(cfg, replay_cfg, policy: Policy, init_critic: Callable, own: Callable,
                             gradient_step_for: Callable, *, host: HostHooks, num_updates: int, num_envs: int,
                             num_steps: int) -> Algorithm:
    """The `Algorithm(init, update, behaviour, host)` of a Box-action replay actor-critic, from its
    own parts:

      own(params, critic) -> (nets, opt_state): at init, the learner's networks beside the policy's
        params (`ReplayState.nets`) and its optimiser states;
      gradient_step_for(start: UpdateStart) -> gradient_step(carry: StepCarry, key) -> (carry, metrics):
        an update's gradient step, on the buffer with the fragment added (`start.buffer`).

    `update` adds the fragment and takes `replay_ratio` gradient steps once the buffer holds
    `learning_starts` transitions; the actor acts uniformly at random until the first of them
    (`behaviour`: also while fewer than `learning_starts` env steps were taken, which params a
    version behind do not know yet).

    Args:
      cfg: the learner config (learning_rate, anneal_lr, gamma, max_grad_norm).
      replay_cfg: `config.ReplayConfig`.
      policy, init_critic: the actor policy and the critics' init (`key -> critic params`).
      host: the learner's `HostHooks` (`learner.host_hooks`, or a learner's own built on them).
      num_updates: iterations in the run (for the learning-rate annealing).
      num_envs, num_steps: the rollout's B and T.
    """
    buffer_shape = dict(obs_shape=policy.obs_shape, action_shape=policy.action_shape, action_dtype=jnp.float32,
                        num_envs=num_envs, num_steps=num_steps)
    new_buffer(replay_cfg, **buffer_shape)  # a capacity below one rollout fails here, not at init

    def init(key: jax.Array, hparams: LearnerHyperparams | None = None) -> LearnerState:
        key, actor_key, critic_key = jax.random.split(key, 3)
        params = policy.init(actor_key)
        nets, opt_state = own(params, init_critic(critic_key))
        return LearnerState(params=params, opt_state=opt_state, key=key, update_count=jnp.zeros((), jnp.int32),
                            hparams=LearnerHyperparams.from_config(cfg) if hparams is None else hparams,
                            extra=ReplayState(nets=nets, buffer=new_buffer(replay_cfg, **buffer_shape),
                                              gradient_steps=jnp.zeros((), jnp.int32)))

    def update(state: LearnerState, trajectory: Trajectory) -> tuple[LearnerState, dict]:
        start = begin_update(state, trajectory, cfg, replay_cfg, num_updates=num_updates)
        buffer = start.buffer
        carry = StepCarry(actor=state.params.actor, nets=state.extra.nets, opt_state=state.opt_state,
                          gradient_steps=state.extra.gradient_steps, priorities=buffer.priorities,
                          max_priority=buffer.max_priority)
        carry, metrics, ready = learn_once_ready(gradient_step_for(start), carry, start, replay_cfg,
                                                 num_envs=num_envs)
        buffer = buffer.replace(priorities=carry.priorities, max_priority=carry.max_priority)
        acted_randomly = state.params.random_actions  # how this fragment was collected
        params = state.params.replace(actor=carry.actor, random_actions=carry.gradient_steps == 0)
        state = state.replace(params=params, opt_state=carry.opt_state, key=start.key,
                              update_count=state.update_count + 1,
                              extra=ReplayState(nets=carry.nets, buffer=buffer, gradient_steps=carry.gradient_steps))
        metrics = {**metrics, "learning_rate": start.learning_rate,
                   "random_actions": acted_randomly.astype(jnp.float32),
                   **replay_metrics(buffer, ready, replay_cfg, num_envs=num_envs)}
        return state, metrics

    def behaviour(params, env_steps):
        # the warm-up ends with the first update that finds learning_starts transitions, which
        # params a version behind do not know yet (async lag >= 1)
        return params.replace(random_actions=params.random_actions & (env_steps < replay_cfg.learning_starts))

    return Algorithm(init, update, behaviour, host=host)


def at_precision(nets: Any, precision: str) -> Any:
    """The learner's `nets` (a NamedTuple with `actor` and `critic`) with both traced at the
    `--matmul-precision`."""
    return nets._replace(actor=at_matmul_precision(nets.actor, precision),
                         critic=at_matmul_precision(nets.critic, precision))
