"""DQN (Mnih et al. 2015) with Double DQN (van Hasselt et al. 2016), n-step returns and a
target network updated by period or Polyak averaging, as an `Algorithm(init, update)`.

One `update` takes the rollout's `[T, B]` fragment (acted epsilon-greedily by the Q policy,
`q_policy.py`), adds its transitions to the replay buffer it carries, and — once the buffer
holds `learning_starts` transitions — takes `replay_ratio` gradient steps on minibatches
sampled uniformly or, with `priority_exponent` > 0, by priority (`priority.py`: each step's
n-step |TD errors| become the sampled transitions' priorities, and importance weights scale
their losses). The buffer lives in the learner state, so the fused loop's donation of
the train state donates it too: no update copies it.

The loss on a sampled transition with its n-step window (`replay.n_step_target`):

    y = R^(m) + discount * Q_target(s', argmax_a Q_online(s', a))     (double_q; else max_a Q_target)
    loss = huber_delta(Q_online(s, a) - stop_gradient(y))

The Huber loss's quadratic range is a flag (`huber_delta`, default 10): at the Nature DQN's
1.0, made for clipped rewards, the loss is nearly L1 for CartPole's returns of up to 100, the
few terminal transitions no longer outweigh the many bootstrapped ones, and Q diverged
(measured on CartPole, ReLU 64x64, lr 2.5e-4, target period 50: Q ~ 2.5e5 after 160k steps
with 1.0; with the squared loss it stayed below 200 and the return rose).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_async.algorithms.replay import priority
from jaxrl_async.algorithms.replay import buffer as replay
from jaxrl_async.algorithms.sgd import LearnerHyperparams, annealed_learning_rate
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.core.optimizer import make_optimizer, sgd_step
from jaxrl_async.types import Algorithm, Trajectory


@struct.dataclass
class DQNState:
    """The learner state of `LearnerState` (params, opt_state, key, update_count, hparams) plus
    DQN's own: the target network, the buffer and the gradient-step count.

    Attributes:
      params: `QParams` (the online network and the epsilon the next rollout acts with).
      opt_state: Adam's state for `params.network`.
      key: PRNG key for sampling.
      update_count: `[]` int32 iterations (rollouts) consumed.
      hparams: `LearnerHyperparams` (learning_rate is the one DQN uses; a sweep vmaps it).
      target_network: the target network's params.
      replay: `replay.ReplayBuffer`, leaves `[C, B, ...]`.
      gradient_steps: `[]` int32 gradient steps taken (the target period counts these).
    """

    params: Any
    opt_state: Any
    key: jax.Array
    update_count: jax.Array
    hparams: Any
    target_network: Any
    replay: replay.ReplayBuffer
    gradient_steps: jax.Array


def epsilon_schedule(dqn_cfg, total_timesteps: int) -> Callable[[jax.Array], jax.Array]:
    """env steps done -> epsilon: linear from epsilon_start to epsilon_end over the decay, then flat."""
    decay_steps = max(1.0, dqn_cfg.epsilon_decay_fraction * total_timesteps)

    def epsilon(env_steps):
        fraction = jnp.minimum(env_steps.astype(jnp.float32) / decay_steps, 1.0)
        return jnp.float32(dqn_cfg.epsilon_start) + fraction * (dqn_cfg.epsilon_end - dqn_cfg.epsilon_start)

    return epsilon


def q_learning_loss(q_values: Callable, network, target_network, batch: dict, double_q: bool,
                    huber_delta: float = 1.0) -> tuple[jax.Array, dict]:
    """Huber loss of Q(s, a) against the n-step (double) Q-learning target, on a sampled batch
    (weighted by `batch["weight"]` where prioritised replay gives it); metrics' `td_abs` is the
    per-transition `[N]` |TD error|, the rest scalars."""
    q = q_values(network, batch["obs"])  # [N, A]
    q_taken = jnp.take_along_axis(q, batch["action"][:, None].astype(jnp.int32), axis=-1)[:, 0]
    q_next_target = q_values(target_network, batch["bootstrap_obs"])
    if double_q:
        best = jnp.argmax(q_values(network, batch["bootstrap_obs"]), axis=-1)
        q_next = jnp.take_along_axis(q_next_target, best[:, None], axis=-1)[:, 0]
    else:
        q_next = jnp.max(q_next_target, axis=-1)
    target = jax.lax.stop_gradient(batch["n_step_return"] + batch["discount"] * q_next)
    losses = optax.huber_loss(q_taken, target, delta=huber_delta)
    # prioritised replay: each transition's loss times its importance weight
    loss = jnp.mean(losses * batch["weight"] if "weight" in batch else losses)
    td_abs = jnp.abs(target - q_taken)
    return loss, {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(td_abs), "td_abs": td_abs}


def make_dqn(cfg, dqn_cfg, policy: Policy, q_values: Callable, *, num_updates: int, num_envs: int,
             num_steps: int, total_timesteps: int) -> Algorithm:
    """DQN over rollouts of `num_steps` x `num_envs`.

    Args:
      cfg: the learner config (learning_rate, anneal_lr, gamma, max_grad_norm).
      dqn_cfg: `config.DQNConfig`.
      policy, q_values: the Q policy and its network (`q_policy.make_q_policy`).
      num_updates: iterations in the run (for the learning-rate annealing).
      num_envs, num_steps: the rollout's B and T (the buffer's row width; env steps per update).
      total_timesteps: the run's budget per seed (for the epsilon schedule).
    """
    optimizer = make_optimizer(cfg.max_grad_norm)
    epsilon = epsilon_schedule(dqn_cfg, total_timesteps)
    capacity_rows = dqn_cfg.replay_capacity // num_envs
    if capacity_rows < num_steps:
        raise ValueError(f"replay_capacity={dqn_cfg.replay_capacity} must hold at least one rollout, "
                         f"num_envs*num_steps={num_envs * num_steps}")
    example = dict(
        obs=jnp.zeros((num_envs, *policy.obs_shape), jnp.float32), action=jnp.zeros((num_envs,), jnp.int32),
        reward=jnp.zeros((num_envs,), jnp.float32), terminated=jnp.zeros((num_envs,), bool),
        truncated=jnp.zeros((num_envs,), bool), next_obs=jnp.zeros((num_envs, *policy.obs_shape), jnp.float32))

    def init(key: jax.Array, hparams: LearnerHyperparams | None = None) -> DQNState:
        key, init_key = jax.random.split(key)
        params = policy.init(init_key)
        params = params.replace(epsilon=epsilon(jnp.zeros((), jnp.int32)))
        return DQNState(params=params, opt_state=optimizer.init(params.network), key=key,
                        update_count=jnp.zeros((), jnp.int32),
                        hparams=LearnerHyperparams.from_config(cfg) if hparams is None else hparams,
                        target_network=params.network,
                        replay=replay.init(example, capacity_rows, prioritised=dqn_cfg.prioritised),
                        gradient_steps=jnp.zeros((), jnp.int32))

    def update(state: DQNState, trajectory: Trajectory) -> tuple[DQNState, dict]:
        learning_rate = annealed_learning_rate(state.hparams.learning_rate, state.update_count, num_updates,
                                               cfg.anneal_lr)
        buffer = replay.add(state.replay, replay.transitions_of(trajectory))
        key, learn_key = jax.random.split(state.key)
        weight_exponent = priority.annealed_exponent(dqn_cfg.priority_weight_exponent,
                                                     state.update_count / num_updates)

        def gradient_step(carry, step_key):
            network, target_network, opt_state, gradient_steps, (priorities, max_priority) = carry
            # the priorities change every step (None, unchanged, for a uniform ring)
            view = buffer.replace(priorities=priorities, max_priority=max_priority)
            batch = replay.sample(view, step_key, batch_size=dqn_cfg.replay_batch_size,
                                  n_step=dqn_cfg.n_step, gamma=cfg.gamma, weight_exponent=weight_exponent)
            grads, metrics = jax.grad(lambda p: q_learning_loss(q_values, p, target_network, batch,
                                                                dqn_cfg.double_q, dqn_cfg.huber_delta),
                                   has_aux=True)(network)
            td_abs = metrics.pop("td_abs")
            if dqn_cfg.prioritised:  # the n-step TD errors of the transitions just learned from
                view = replay.update_priorities(view, batch["row"], batch["env"], td_abs,
                                                exponent=dqn_cfg.priority_exponent, epsilon=dqn_cfg.priority_epsilon)
            updates, opt_state = optimizer.update(grads, opt_state, network)
            network = sgd_step(network, updates, learning_rate)
            gradient_steps = gradient_steps + 1
            due = gradient_steps % dqn_cfg.target_update_period == 0
            target_network = jax.tree.map(
                lambda online, target: jnp.where(due, dqn_cfg.target_update_tau * online
                                                 + (1.0 - dqn_cfg.target_update_tau) * target, target),
                network, target_network)
            carry = (network, target_network, opt_state, gradient_steps, (view.priorities, view.max_priority))
            return carry, {**metrics, "grad_norm": optax.tree.norm(grads)}

        fill = buffer.size * num_envs
        ready = fill >= dqn_cfg.learning_starts
        carry = (state.params.network, state.target_network, state.opt_state, state.gradient_steps,
                 (buffer.priorities, buffer.max_priority))
        (network, target_network, opt_state, gradient_steps, (priorities, max_priority)), metrics = \
            replay.gradient_steps_once_ready(gradient_step, carry, learn_key, num_steps=dqn_cfg.replay_ratio,
                                             ready=ready)
        buffer = buffer.replace(priorities=priorities, max_priority=max_priority)
        acted_epsilon = state.params.epsilon  # the rate this fragment was collected with
        update_count = state.update_count + 1
        params = state.params.replace(network=network, epsilon=epsilon(update_count * num_envs * num_steps))
        state = state.replace(params=params, opt_state=opt_state, key=key, update_count=update_count,
                              target_network=target_network, replay=buffer, gradient_steps=gradient_steps)
        metrics = {**metrics, "learning_rate": learning_rate, "epsilon": acted_epsilon,
                   "replay_fill": fill / (buffer.capacity_rows * num_envs),
                   "gradient_steps": jnp.where(ready, dqn_cfg.replay_ratio, 0).astype(jnp.float32)}
        if dqn_cfg.prioritised:
            metrics["priority_weight_exponent"] = weight_exponent
        return state, metrics

    def behaviour(params, env_steps):
        # the epsilon of the env steps taken, whatever update the params come from (async lag >= 1)
        return params.replace(epsilon=jnp.broadcast_to(epsilon(env_steps), params.epsilon.shape))

    return Algorithm(init, update, behaviour)
