"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC and applications": twin critics, target
critics, learned temperature) for Box actions, as an `Algorithm(init, update)`.

One `update` takes the rollout's `[T, B]` fragment (acted by the squashed-Gaussian actor,
`nets/sac.py`, or uniformly at random before learning starts), adds it to the replay
buffer it carries (`replay/learner.py`, DQN's), and — once the buffer holds `learning_starts`
transitions — takes `replay_ratio` gradient steps, each on a minibatch sampled uniformly (or
by priority, `priority_exponent` > 0: the critics' loss is then importance-weighted and their
mean |TD error| per transition becomes its priority; the actor's loss is not weighted):

    a', log pi(a'|s')  ~ actor(s')                                   (s': the bootstrap obs)
    y        = R^(m) + discount * (min_i Q_target_i(s', a') - alpha log pi(a'|s'))
    critic   = 1/2 sum_i mean (Q_i(s, a) - stop_gradient(y))^2        -> critic step
    a~, log pi(a~|s) ~ actor(s)                                       (reparameterised)
    actor    = mean (alpha log pi(a~|s) - min_i Q_i(s, a~))           -> actor step (new critics)
    alpha    = mean (-log alpha * stop_gradient(log pi(a~|s) + target_entropy))  -> temperature step
    Q_target <- tau Q + (1 - tau) Q_target

`discount` is gamma^m, zero after a termination; at a time limit s' is the pre-reset
observation, so truncations bootstrap (`replay/buffer.py`, `n_step_target`). With n_step > 1 the entropy
term enters at the bootstrap only (the n-step return holds the rewards alone). Actions enter
the critics as unit actions in [-1, 1]^D (`SquashedGaussian.to_unit`).

Warm-up: until the first gradient step the rollout acts uniformly over the action box (the
policy's `random_actions`), a common choice (SB3's `learning_starts`, CleanRL's SAC) that
fills the buffer with broad coverage rather than one untrained Gaussian's. Once SAC has
learned, it acts with its policy, also while a buffer that a resume left empty refills.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.algorithms.replay import buffer as replay
from jaxrl_async.algorithms.replay.learner import (ReplayState, begin_update, host_hooks, learn_once_ready,
                                                   new_buffer, replay_metrics)
from jaxrl_async.algorithms.sgd import LearnerHyperparams
from jaxrl_async.core.optimizer import global_norm, make_optimizer, sgd_step
from jaxrl_async.nets.actor_critic import Policy, at_matmul_precision
from jaxrl_async.nets.sac import SACNets, make_sac_policy
from jaxrl_async.config import SpeedSettings
from jaxrl_async.types import Algorithm, Learner, LearnerState, Trajectory


@struct.dataclass
class SACCritics:
    """SAC's `ReplayState.nets`: the twin critics' params, their Polyak average, and log alpha (`[]`)."""

    critic: Any
    target_critic: Any
    log_temperature: jax.Array


# -- the losses, on plain arrays (tests/test_sac.py checks them against NumPy) ---------------
def critic_target(n_step_return, discount, next_q, next_log_prob, temperature):
    """y = R + discount * (min_i next_q_i - alpha log pi); next_q `[2, N]`, the rest `[N]`."""
    return n_step_return + discount * (jnp.min(next_q, axis=0) - temperature * next_log_prob)


def critic_loss(q, target, weight=None):
    """1/2 sum over the twins of the mean squared error; q `[2, N]`, target `[N]` (held fixed);
    `weight` `[N]`: prioritised replay's importance weights on each transition's error."""
    squared = jnp.square(q - jax.lax.stop_gradient(target)[None])
    return 0.5 * jnp.sum(jnp.mean(squared if weight is None else weight[None] * squared, axis=-1))


def actor_loss(q, log_prob, temperature):
    """mean(alpha log pi - min_i Q_i) at the actor's own (reparameterised) actions; q `[2, N]`."""
    return jnp.mean(temperature * log_prob - jnp.min(q, axis=0))


def temperature_loss(log_temperature, log_prob, target_entropy):
    """mean(-log alpha (log pi + target_entropy)): alpha rises while the entropy -log pi is below target."""
    return -log_temperature * jnp.mean(jax.lax.stop_gradient(log_prob) + target_entropy)


def critic_loss_on_batch(nets: SACNets, critic_params, target_critic_params, actor_params, batch: dict,
                         temperature, key) -> tuple[jax.Array, dict]:
    """The critics' loss on a sampled batch (`replay.sample`, weighted by its `weight` where
    prioritised), `key` for the next actions; metrics' `td_abs` is `[N]`, the rest scalars."""
    next_dist = nets.actor(actor_params, batch["bootstrap_obs"])
    next_action, next_log_prob = next_dist.sample_unit(key)
    next_q = nets.critic(target_critic_params, batch["bootstrap_obs"], next_action)
    target = critic_target(batch["n_step_return"], batch["discount"], next_q, next_log_prob, temperature)
    q = nets.critic(critic_params, batch["obs"], next_dist.to_unit(batch["action"]))
    loss = critic_loss(q, target, batch.get("weight"))
    # the twins' mean |TD error| per transition: prioritised replay's new priorities
    td_abs = jnp.mean(jnp.abs(q - jax.lax.stop_gradient(target)[None]), axis=0)
    return loss, {"critic_loss": loss, "q_mean": jnp.mean(q), "target_mean": jnp.mean(target), "td_abs": td_abs}


def actor_loss_on_batch(nets: SACNets, actor_params, critic_params, batch: dict, temperature,
                        key) -> tuple[jax.Array, jax.Array]:
    """The actor's loss on the batch's observations, and the log-probs of its sampled actions."""
    action, log_prob = nets.actor(actor_params, batch["obs"]).sample_unit(key)
    q = nets.critic(critic_params, batch["obs"], action)
    return actor_loss(q, log_prob, temperature), log_prob


def make_sac(cfg, replay_cfg, sac_cfg, policy: Policy, nets: SACNets, *, num_updates: int, num_envs: int,
             num_steps: int) -> Algorithm:
    """SAC over rollouts of `num_steps` x `num_envs`; its `LearnerState.extra` is a `ReplayState`
    whose `nets` are `SACCritics`, and its `opt_state` a dict of Adam states (`actor`, `critic`,
    `temperature`).

    Args:
      cfg: the learner config (learning_rate, anneal_lr, gamma, max_grad_norm).
      replay_cfg: `config.ReplayConfig`.
      sac_cfg: `config.SACConfig`.
      policy, nets: the actor policy and SAC's networks (`nets.sac.make_sac_policy`).
      num_updates: iterations in the run (for the learning-rate annealing).
      num_envs, num_steps: the rollout's B and T.
    """
    optimizer = make_optimizer(cfg.max_grad_norm)
    target_entropy = (-float(nets.action_dim) if sac_cfg.target_entropy == "auto"
                      else float(sac_cfg.target_entropy))
    buffer_shape = dict(obs_shape=policy.obs_shape, action_shape=policy.action_shape, action_dtype=jnp.float32,
                        num_envs=num_envs, num_steps=num_steps)
    new_buffer(replay_cfg, **buffer_shape)  # a capacity below one rollout fails here, not at init

    def init(key: jax.Array, hparams: LearnerHyperparams | None = None) -> LearnerState:
        key, actor_key, critic_key = jax.random.split(key, 3)
        params = policy.init(actor_key)
        critic = nets.init_critic(critic_key)
        log_temperature = jnp.log(jnp.float32(sac_cfg.init_temperature))
        opt_state = dict(actor=optimizer.init(params.actor), critic=optimizer.init(critic),
                         temperature=optimizer.init(log_temperature))
        critics = SACCritics(critic=critic, target_critic=critic, log_temperature=log_temperature)
        return LearnerState(params=params, opt_state=opt_state, key=key, update_count=jnp.zeros((), jnp.int32),
                            hparams=LearnerHyperparams.from_config(cfg) if hparams is None else hparams,
                            extra=ReplayState(nets=critics, buffer=new_buffer(replay_cfg, **buffer_shape),
                                              gradient_steps=jnp.zeros((), jnp.int32)))

    def adam_step(params, grads, opt_state, learning_rate):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return sgd_step(params, updates, learning_rate), opt_state

    def update(state: LearnerState, trajectory: Trajectory) -> tuple[LearnerState, dict]:
        start = begin_update(state, trajectory, cfg, replay_cfg, num_updates=num_updates)
        buffer, learning_rate = start.buffer, start.learning_rate

        def gradient_step(carry, step_key):
            actor, critic, target_critic, log_temperature, opt_state, (priorities, max_priority) = carry
            sample_key, next_key, actor_key = jax.random.split(step_key, 3)
            view = buffer.replace(priorities=priorities, max_priority=max_priority)  # None: uniform
            batch = replay.sample(view, sample_key, batch_size=replay_cfg.replay_batch_size,
                                  n_step=replay_cfg.n_step, gamma=cfg.gamma, weight_exponent=start.weight_exponent)
            temperature = jnp.exp(log_temperature)
            critic_grads, metrics = jax.grad(
                lambda c: critic_loss_on_batch(nets, c, target_critic, actor, batch, temperature, next_key),
                has_aux=True)(critic)
            td_abs = metrics.pop("td_abs")
            if replay_cfg.prioritised:  # prioritised replay weights the critics' loss only, not the actor's
                view = replay.update_priorities(view, batch["row"], batch["env"], td_abs,
                                                exponent=replay_cfg.priority_exponent,
                                                epsilon=replay_cfg.priority_epsilon)
            critic, critic_opt = adam_step(critic, critic_grads, opt_state["critic"], learning_rate)
            (loss_pi, log_prob), actor_grads = jax.value_and_grad(
                lambda a: actor_loss_on_batch(nets, a, critic, batch, temperature, actor_key), has_aux=True)(actor)
            actor, actor_opt = adam_step(actor, actor_grads, opt_state["actor"], learning_rate)
            temperature_opt = opt_state["temperature"]
            if sac_cfg.learn_temperature:
                temperature_grad = jax.grad(temperature_loss)(log_temperature, log_prob, target_entropy)
                log_temperature, temperature_opt = adam_step(log_temperature, temperature_grad, temperature_opt,
                                                             learning_rate)
            target_critic = jax.tree.map(lambda online, target: sac_cfg.tau * online + (1.0 - sac_cfg.tau) * target,
                                         critic, target_critic)
            opt_state = dict(actor=actor_opt, critic=critic_opt, temperature=temperature_opt)
            # `loss` and `grad_norm`, which every learner reports (the divergence check reads them):
            # the critics' and the actor's together
            metrics = {**metrics, "loss": metrics["critic_loss"] + loss_pi,
                       "grad_norm": global_norm((critic_grads, actor_grads)), "actor_loss": loss_pi,
                       "entropy": -jnp.mean(log_prob), "temperature": temperature,
                       "critic_grad_norm": global_norm(critic_grads),
                       "actor_grad_norm": global_norm(actor_grads)}
            priority_state = (view.priorities, view.max_priority)
            return (actor, critic, target_critic, log_temperature, opt_state, priority_state), metrics

        critics = state.extra.nets
        carry = (state.params.actor, critics.critic, critics.target_critic, critics.log_temperature, state.opt_state,
                 (buffer.priorities, buffer.max_priority))
        carry, metrics, ready = learn_once_ready(gradient_step, carry, start, replay_cfg, num_envs=num_envs)
        actor, critic, target_critic, log_temperature, opt_state, (priorities, max_priority) = carry
        buffer = buffer.replace(priorities=priorities, max_priority=max_priority)
        gradient_steps = state.extra.gradient_steps + jnp.where(ready, replay_cfg.replay_ratio, 0)
        acted_randomly = state.params.random_actions  # how this fragment was collected
        params = state.params.replace(actor=actor, random_actions=gradient_steps == 0)
        critics = SACCritics(critic=critic, target_critic=target_critic, log_temperature=log_temperature)
        state = state.replace(params=params, opt_state=opt_state, key=start.key, update_count=state.update_count + 1,
                              extra=ReplayState(nets=critics, buffer=buffer, gradient_steps=gradient_steps))
        metrics = {**metrics, "learning_rate": learning_rate, "random_actions": acted_randomly.astype(jnp.float32),
                   **replay_metrics(buffer, ready, replay_cfg, num_envs=num_envs)}
        return state, metrics

    def behaviour(params, env_steps):
        # the warm-up ends with the first update that finds learning_starts transitions, which
        # params a version behind do not know yet (async lag >= 1)
        return params.replace(random_actions=params.random_actions & (env_steps < replay_cfg.learning_starts))

    return Algorithm(init, update, behaviour, host=host_hooks(replay_cfg))


def _networks(cfg, obs_shape, action_space):
    policy, nets = make_sac_policy(cfg.network, obs_shape, action_space)
    return policy, nets._replace(actor=at_matmul_precision(nets.actor, cfg.matmul_precision),
                                 critic=at_matmul_precision(nets.critic, cfg.matmul_precision))


def _make(cfg, policy, nets, speed: SpeedSettings) -> Algorithm:
    return make_sac(cfg.learner, cfg.replay, cfg.sac, policy, nets, num_updates=cfg.num_updates,
                    num_envs=cfg.num_envs, num_steps=cfg.num_steps)


LEARNER = Learner(networks=_networks, make=_make)
