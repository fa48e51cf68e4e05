"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC and applications": twin critics, target
critics, learned temperature) for Box actions, as an `Algorithm(init, update)`.

One `update` takes the rollout's `[T, B]` fragment (acted by the squashed-Gaussian actor,
`nets/sac.py`, or uniformly at random before learning starts), adds it to the replay
buffer it carries (`replay/learner.py`, DQN's; the steps SAC shares with TD3 are
`replay/actor_critic.py`'s), and — once the buffer holds `learning_starts`
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
the critics as unit actions in [-1, 1]^D (`UnitBox.to_unit`).

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

from jaxrl_async.algorithms.replay.actor_critic import (StepCarry, actor_step, apply_gradients, at_precision,
                                                        critic_step, grad_norm_metrics, make_replay_actor_critic,
                                                        sample_batch, twin_critic_loss)
from jaxrl_async.algorithms.replay.learner import UpdateStart, host_hooks, polyak
from jaxrl_async.core.optimizer import global_norm, make_optimizer
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.nets.sac import SACNets, make_sac_policy
from jaxrl_async.speed import SpeedSettings
from jaxrl_async.types import Algorithm, Learner


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
    q = nets.critic(critic_params, batch["obs"], next_dist.box.to_unit(batch["action"]))
    return twin_critic_loss(q, target, batch.get("weight"))


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
      sac_cfg: `sac_config.SACConfig`.
      policy, nets: the actor policy and SAC's networks (`nets.sac.make_sac_policy`).
      num_updates: iterations in the run (for the learning-rate annealing).
      num_envs, num_steps: the rollout's B and T.
    """
    optimizer = make_optimizer(cfg.max_grad_norm)
    target_entropy = (-float(nets.action_dim) if sac_cfg.target_entropy == "auto"
                      else float(sac_cfg.target_entropy))

    def own(params, critic):
        log_temperature = jnp.log(jnp.float32(sac_cfg.init_temperature))
        opt_state = dict(actor=optimizer.init(params.actor), critic=optimizer.init(critic),
                         temperature=optimizer.init(log_temperature))
        return SACCritics(critic=critic, target_critic=critic, log_temperature=log_temperature), opt_state

    def gradient_step_for(start: UpdateStart):
        learning_rate = start.learning_rate

        def gradient_step(carry: StepCarry, step_key):
            actor, critics, opt_state = carry.actor, carry.nets, carry.opt_state
            sample_key, next_key, actor_key = jax.random.split(step_key, 3)
            view, batch = sample_batch(start, carry, sample_key, replay_cfg, gamma=cfg.gamma)
            temperature = jnp.exp(critics.log_temperature)
            critic, critic_opt, critic_grads, metrics, view = critic_step(
                optimizer, lambda c: critic_loss_on_batch(nets, c, critics.target_critic, actor, batch, temperature,
                                                          next_key),
                critics.critic, opt_state["critic"], learning_rate, view, batch, replay_cfg)
            actor, actor_opt, loss_pi, log_prob, actor_grads = actor_step(
                optimizer, lambda a: actor_loss_on_batch(nets, a, critic, batch, temperature, actor_key),
                actor, opt_state["actor"], learning_rate)
            log_temperature, temperature_opt = critics.log_temperature, opt_state["temperature"]
            if sac_cfg.learn_temperature:
                temperature_grad = jax.grad(temperature_loss)(log_temperature, log_prob, target_entropy)
                log_temperature, temperature_opt = apply_gradients(optimizer, log_temperature, temperature_grad,
                                                                   temperature_opt, learning_rate)
            critics = SACCritics(critic=critic, target_critic=polyak(critic, critics.target_critic, sac_cfg.tau),
                                 log_temperature=log_temperature)
            opt_state = dict(actor=actor_opt, critic=critic_opt, temperature=temperature_opt)
            # `loss` and `grad_norm`, which every learner reports (the divergence check reads them):
            # the critics' and the actor's together
            metrics = {**metrics, "loss": metrics["critic_loss"] + loss_pi, "actor_loss": loss_pi,
                       "entropy": -jnp.mean(log_prob), "temperature": temperature,
                       **grad_norm_metrics(global_norm(critic_grads), global_norm(actor_grads))}
            return carry.after(view, actor=actor, nets=critics, opt_state=opt_state), metrics

        return gradient_step

    return make_replay_actor_critic(cfg, replay_cfg, policy, nets.init_critic, own, gradient_step_for,
                                    host=host_hooks(replay_cfg), num_updates=num_updates, num_envs=num_envs,
                                    num_steps=num_steps)


def _networks(cfg, obs_shape, action_space):
    policy, nets = make_sac_policy(cfg.network, obs_shape, action_space)
    return policy, at_precision(nets, cfg.matmul_precision)


def _make(cfg, policy, nets, speed: SpeedSettings) -> Algorithm:
    return make_sac(cfg.learner, cfg.replay, cfg.sac, policy, nets, num_updates=cfg.num_updates,
                    num_envs=cfg.num_envs, num_steps=cfg.num_steps)


LEARNER = Learner(networks=_networks, make=_make)
