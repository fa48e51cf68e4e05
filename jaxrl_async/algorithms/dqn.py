"""DQN (Mnih et al. 2015) with Double DQN (van Hasselt et al. 2016), n-step returns and a
target network updated by period or Polyak averaging, as an `Algorithm(init, update)`.

One `update` takes the rollout's `[T, B]` fragment (acted epsilon-greedily by the Q policy,
`nets/q.py`), adds its transitions to the replay buffer it carries (`replay/learner.py`), and —
once the buffer holds `learning_starts` transitions — takes `replay_ratio` gradient steps on
minibatches sampled uniformly or, with `priority_exponent` > 0, by priority (`replay/priority.py`:
each step's n-step |TD errors| become the sampled transitions' priorities, and importance weights
scale their losses).

The loss on a sampled transition with its n-step window (`replay/buffer.py`, `n_step_target`):

    y = R^(m) + discount * Q_target(s', argmax_a Q_online(s', a))     (double_q; else max_a Q_target)
    loss = huber_delta(Q_online(s, a) - stop_gradient(y))

Where the env gives action masks (`spaces.ACTION_MASK`), the argmax and the max run over the
actions legal in s' (the replay stores observations, so s' carries its mask), as the policy
acts: an illegal action's Q is never trained, and must not set the target.

The Huber loss's quadratic range is a flag (`huber_delta`, default 10): at the Nature DQN's
1.0, made for clipped rewards, the loss is nearly L1 for CartPole's returns of up to 100, the
few terminal transitions no longer outweigh the many bootstrapped ones, and Q diverged on
CartPole (docs/learners.md, "DQN").
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from jaxrl_async.algorithms.replay import buffer as replay
from jaxrl_async.algorithms.replay.learner import (ReplayState, begin_update, host_hooks, learn_once_ready,
                                                   new_buffer, normalized_batch, polyak, replay_metrics)
from jaxrl_async.algorithms.sgd import LearnerHyperparams, env_steps_of
from jaxrl_async.nets.actor_critic import Policy, at_matmul_precision, observed_legal_actions
from jaxrl_async.nets.q import make_q_policy
from jaxrl_async.core.distributions import mask_scores, pick
from jaxrl_async.core.optimizer import global_norm, make_optimizer, sgd_step
from jaxrl_async.speed import SpeedSettings
from jaxrl_async.types import Algorithm, Learner, LearnerState, Trajectory


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
    q_taken = pick(q, batch["action"])
    q_next_target = q_values(target_network, batch["bootstrap_obs"])
    next_legal = observed_legal_actions(batch["bootstrap_obs"])  # None without action masks
    if double_q:
        best = jnp.argmax(mask_scores(q_values(network, batch["bootstrap_obs"]), next_legal), axis=-1)
        q_next = pick(q_next_target, best)
    else:
        q_next = jnp.max(mask_scores(q_next_target, next_legal), axis=-1)
    target = jax.lax.stop_gradient(batch["n_step_return"] + batch["discount"] * q_next)
    losses = optax.huber_loss(q_taken, target, delta=huber_delta)
    # prioritised replay: each transition's loss times its importance weight
    loss = jnp.mean(losses * batch["weight"] if "weight" in batch else losses)
    td_abs = jnp.abs(target - q_taken)
    return loss, {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(td_abs), "td_abs": td_abs}


def make_dqn(cfg, replay_cfg, dqn_cfg, policy: Policy, q_values: Callable, *, num_updates: int, num_envs: int,
             num_steps: int, total_timesteps: int) -> Algorithm:
    """DQN over rollouts of `num_steps` x `num_envs`; its `LearnerState.extra` is a `ReplayState`
    whose `nets` are the target network's params.

    Args:
      cfg: the learner config (learning_rate, anneal_lr, gamma, max_grad_norm).
      replay_cfg: `config.ReplayConfig`.
      dqn_cfg: `dqn_config.DQNConfig`.
      policy, q_values: the Q policy and its network (`nets.q.make_q_policy`).
      num_updates: iterations in the run (for the learning-rate annealing).
      num_envs, num_steps: the rollout's B and T (the buffer's row width; env steps per update).
      total_timesteps: the run's budget per seed (for the epsilon schedule).
    """
    optimizer = make_optimizer(cfg.max_grad_norm)
    epsilon = epsilon_schedule(dqn_cfg, total_timesteps)
    buffer_shape = dict(obs_shape=policy.obs_shape, action_shape=(), action_dtype=jnp.int32, num_envs=num_envs,
                        num_steps=num_steps)
    new_buffer(replay_cfg, **buffer_shape)  # a capacity below one rollout fails here, not at init

    def init(key: jax.Array, hparams: LearnerHyperparams | None = None) -> LearnerState:
        key, init_key = jax.random.split(key)
        params = policy.init(init_key)
        params = params.replace(epsilon=epsilon(jnp.zeros((), jnp.int32)))
        return LearnerState(params=params, opt_state=optimizer.init(params.network), key=key,
                            update_count=jnp.zeros((), jnp.int32),
                            hparams=LearnerHyperparams.from_config(cfg) if hparams is None else hparams,
                            extra=ReplayState(nets=params.network, buffer=new_buffer(replay_cfg, **buffer_shape),
                                              gradient_steps=jnp.zeros((), jnp.int32)))

    def update(state: LearnerState, trajectory: Trajectory) -> tuple[LearnerState, dict]:
        start = begin_update(state, trajectory, cfg, replay_cfg, num_updates=num_updates)
        buffer, learning_rate = start.buffer, start.learning_rate

        def gradient_step(carry, step_key):
            network, target_network, opt_state, gradient_steps, (priorities, max_priority) = carry
            # the priorities change every step (None, unchanged, for a uniform ring)
            view = buffer.replace(priorities=priorities, max_priority=max_priority)
            batch = normalized_batch(replay.sample(view, step_key, batch_size=replay_cfg.replay_batch_size,
                                                   n_step=replay_cfg.n_step, gamma=cfg.gamma,
                                                   weight_exponent=start.weight_exponent), start.obs_stats)
            grads, metrics = jax.grad(lambda p: q_learning_loss(q_values, p, target_network, batch,
                                                                dqn_cfg.double_q, dqn_cfg.huber_delta),
                                      has_aux=True)(network)
            td_abs = metrics.pop("td_abs")
            if replay_cfg.prioritised:  # the n-step TD errors of the transitions just learned from
                view = replay.update_priorities(view, batch["row"], batch["env"], td_abs,
                                                exponent=replay_cfg.priority_exponent,
                                                epsilon=replay_cfg.priority_epsilon)
            updates, opt_state = optimizer.update(grads, opt_state, network)
            network = sgd_step(network, updates, learning_rate)
            gradient_steps = gradient_steps + 1
            due = gradient_steps % dqn_cfg.target_update_period == 0
            target_network = jax.tree.map(lambda new, old: jnp.where(due, new, old),
                                          polyak(network, target_network, dqn_cfg.target_update_tau), target_network)
            carry = (network, target_network, opt_state, gradient_steps, (view.priorities, view.max_priority))
            return carry, {**metrics, "grad_norm": global_norm(grads)}

        carry = (state.params.network, state.extra.nets, state.opt_state, state.extra.gradient_steps,
                 (buffer.priorities, buffer.max_priority))
        carry, metrics, ready = learn_once_ready(gradient_step, carry, start, replay_cfg, num_envs=num_envs)
        network, target_network, opt_state, gradient_steps, (priorities, max_priority) = carry
        buffer = buffer.replace(priorities=priorities, max_priority=max_priority)
        acted_epsilon = state.params.epsilon  # the rate this fragment was collected with
        update_count = state.update_count + 1
        steps = env_steps_of(update_count, num_envs * num_steps)
        params = state.params.replace(network=network, epsilon=epsilon(steps))
        state = state.replace(params=params, opt_state=opt_state, key=start.key, update_count=update_count,
                              extra=ReplayState(nets=target_network, buffer=buffer, gradient_steps=gradient_steps))
        metrics = {**metrics, "learning_rate": learning_rate, "epsilon": acted_epsilon,
                   **replay_metrics(buffer, ready, replay_cfg, num_envs=num_envs)}
        if replay_cfg.prioritised:
            metrics["priority_weight_exponent"] = start.weight_exponent
        return state, metrics

    def behaviour(params, env_steps):
        # the epsilon of the env steps taken, whatever update the params come from (async lag >= 1)
        return params.replace(epsilon=jnp.broadcast_to(epsilon(env_steps), params.epsilon.shape))

    return Algorithm(init, update, behaviour, host=host_hooks(replay_cfg))


def _networks(cfg, obs_shape, action_space):
    policy, q_values = make_q_policy(cfg.network, obs_shape, action_space)
    return policy, at_matmul_precision(q_values, cfg.matmul_precision)


def _make(cfg, policy, q_values, speed: SpeedSettings) -> Algorithm:
    return make_dqn(cfg.learner, cfg.replay, cfg.dqn, policy, q_values, num_updates=cfg.num_updates,
                    num_envs=cfg.num_envs, num_steps=cfg.num_steps, total_timesteps=cfg.total_timesteps)


LEARNER = Learner(networks=_networks, make=_make)
