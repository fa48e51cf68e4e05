"""TD3, Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error in
Actor-Critic Methods"): a deterministic actor, twin critics, target policy smoothing and delayed
actor updates, for Box actions, as an `Algorithm(init, update)`.

One `update` takes the rollout's `[T, B]` fragment (acted by the actor with Gaussian exploration
noise, `nets/td3.py`, or uniformly at random before learning starts), adds it to the replay buffer
it carries (`replay/learner.py`, DQN's and SAC's; the steps TD3 shares with SAC are
`replay/actor_critic.py`'s), and — once the buffer holds `learning_starts`
transitions — takes `replay_ratio` gradient steps, each on a minibatch sampled uniformly (or by
priority, `priority_exponent` > 0: the critics' loss is then importance-weighted and their mean
|TD error| per transition becomes its priority; the actor's loss is not weighted). Gradient step k
(counted over the run from 1):

    eps      = clip(target_noise * N(0, I), -target_noise_clip, target_noise_clip)
    a'       = clip(mu_target(s') + eps, -1, 1)                   (s': the bootstrap obs)
    y        = R^(m) + discount * min_i Q_target_i(s', a')
    critic   = 1/2 sum_i mean (Q_i(s, a) - stop_gradient(y))^2    -> critic step
    if k % policy_delay == 0:
      actor  = -mean Q_1(s, mu(s))                                -> actor step (new critics)
      Q_target  <- tau Q  + (1 - tau) Q_target
      mu_target <- tau mu + (1 - tau) mu_target

`discount` is gamma^m, zero after a termination; at a time limit s' is the pre-reset observation,
so truncations bootstrap (`replay/buffer.py`, `n_step_target`). Actions enter the critics as unit
actions in [-1, 1]^D, and every noise scale is in those units (a fraction of half the action
range, as the paper's fractions of `max_action`). The actor follows the first critic alone, as in
the paper (the second only curbs the target's overestimation).

Between two delayed steps the actor and the three target networks do not change, and nothing of
the actor is computed (with one seed the step's `lax.cond` skips it; vmapped seeds run both branches
as a select). Its metrics are therefore the delayed steps' alone: a step reports `actor_loss` and
`actor_grad_norm` where it updated the actor and 0 elsewhere, with `actor_updates` 1 or 0, and the
metrics lines divide the window's sums by the actor updates in it (`td3_host_hooks`), so they show
the mean over actor updates, not one diluted by the steps in between.

Warm-up: until the first gradient step the rollout acts uniformly over the action box (the
policy's `random_actions`), the paper's `start_timesteps` of random actions. Once TD3 has
learned, it acts with its actor, also while a buffer that a resume left empty refills.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl_async.algorithms.replay.actor_critic import (StepCarry, actor_step, at_precision, critic_step,
                                                        grad_norm_metrics, make_replay_actor_critic, sample_batch,
                                                        twin_critic_loss)
from jaxrl_async.algorithms.replay.learner import UpdateStart, host_hooks, polyak
from jaxrl_async.core.optimizer import global_norm, make_optimizer
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.nets.td3 import TD3Nets, make_td3_policy
from jaxrl_async.speed import SpeedSettings
from jaxrl_async.types import Algorithm, HostHooks, Learner, LearnerState


@struct.dataclass
class TD3Targets:
    """TD3's `ReplayState.nets`: the twin critics' params and the Polyak averages of the critics
    and of the actor (whose own params are the policy's, `LearnerState.params.actor`)."""

    critic: Any
    target_critic: Any
    target_actor: Any


# -- the maths, on plain arrays (tests/test_td3.py checks them against NumPy) ---------------
def smoothed_target_action(next_action, noise, target_noise, target_noise_clip):
    """Target policy smoothing: clip(mu_target(s') + clip(sigma noise, -c, c), -1, 1); `next_action`
    the target actor's unit action `[N, D]`, `noise` standard normal of the same shape."""
    smoothing = jnp.clip(target_noise * noise, -target_noise_clip, target_noise_clip)
    return jnp.clip(next_action + smoothing, -1.0, 1.0)


def critic_target(n_step_return, discount, next_q):
    """y = R + discount * min_i next_q_i; next_q `[2, N]`, the rest `[N]`."""
    return n_step_return + discount * jnp.min(next_q, axis=0)


def actor_loss(q):
    """-mean Q_1 at the actor's own actions; q `[2, N]` (the second critic is not followed)."""
    return -jnp.mean(q[0])


def critic_loss_on_batch(nets: TD3Nets, critic_params, target_critic_params, target_actor_params, batch: dict,
                         key, target_noise: float, target_noise_clip: float) -> tuple[jax.Array, dict]:
    """The critics' loss on a sampled batch (`replay.sample`, weighted by its `weight` where
    prioritised), `key` for the smoothing noise; metrics' `td_abs` is `[N]`, the rest scalars."""
    next_action = nets.actor(target_actor_params, batch["bootstrap_obs"])
    noise = jax.random.normal(key, next_action.shape, next_action.dtype)
    next_action = smoothed_target_action(next_action, noise, target_noise, target_noise_clip)
    next_q = nets.critic(target_critic_params, batch["bootstrap_obs"], next_action)
    target = critic_target(batch["n_step_return"], batch["discount"], next_q)
    q = nets.critic(critic_params, batch["obs"], nets.to_unit(batch["action"]))
    return twin_critic_loss(q, target, batch.get("weight"))


def actor_loss_on_batch(nets: TD3Nets, actor_params, critic_params, batch: dict) -> jax.Array:
    """The actor's loss on the batch's observations."""
    return actor_loss(nets.critic(critic_params, batch["obs"], nets.actor(actor_params, batch["obs"])))


def is_delayed_step(gradient_steps_before: jax.Array, policy_delay: int) -> jax.Array:
    """Whether the gradient step after `gradient_steps_before` others (the run's k-th, k counted
    from 1) updates the actor and the targets: every `policy_delay`-th one, k % policy_delay == 0."""
    return (gradient_steps_before + 1) % policy_delay == 0


def make_td3(cfg, replay_cfg, td3_cfg, policy: Policy, nets: TD3Nets, *, num_updates: int, num_envs: int,
             num_steps: int) -> Algorithm:
    """TD3 over rollouts of `num_steps` x `num_envs`; its `LearnerState.extra` is a `ReplayState`
    whose `nets` are `TD3Targets`, and its `opt_state` a dict of Adam states (`actor`, `critic`).
    The arguments are `sac.make_sac`'s, with `td3_cfg` (`td3_config.TD3Config`) for `sac_cfg` and
    TD3's networks (`nets.td3.make_td3_policy`).
    """
    optimizer = make_optimizer(cfg.max_grad_norm)

    def own(params, critic):
        opt_state = dict(actor=optimizer.init(params.actor), critic=optimizer.init(critic))
        return TD3Targets(critic=critic, target_critic=critic, target_actor=params.actor), opt_state

    def gradient_step_for(start: UpdateStart):
        learning_rate = start.learning_rate

        def delayed_step(actor, critic, targets, actor_opt, batch):
            actor, actor_opt, loss, _, grads = actor_step(
                optimizer, lambda a: (actor_loss_on_batch(nets, a, critic, batch), None), actor, actor_opt,
                learning_rate)
            targets = TD3Targets(critic=critic, target_critic=polyak(critic, targets.target_critic, td3_cfg.target_tau),
                                 target_actor=polyak(actor, targets.target_actor, td3_cfg.target_tau))
            return actor, targets, actor_opt, loss, global_norm(grads)

        def hold(actor, critic, targets, actor_opt, batch):
            # the actor and the targets wait for the next delayed step
            return actor, targets.replace(critic=critic), actor_opt, jnp.zeros(()), jnp.zeros(())

        def gradient_step(carry: StepCarry, step_key):
            targets, opt_state = carry.nets, carry.opt_state
            sample_key, noise_key = jax.random.split(step_key)
            view, batch = sample_batch(start, carry, sample_key, replay_cfg, gamma=cfg.gamma)
            critic, critic_opt, critic_grads, metrics, view = critic_step(
                optimizer, lambda c: critic_loss_on_batch(nets, c, targets.target_critic, targets.target_actor, batch,
                                                          noise_key, td3_cfg.target_noise, td3_cfg.target_noise_clip),
                targets.critic, opt_state["critic"], learning_rate, view, batch, replay_cfg)
            delayed = is_delayed_step(carry.gradient_steps, td3_cfg.policy_delay)
            actor, targets, actor_opt, loss_pi, actor_grad_norm = jax.lax.cond(
                delayed, delayed_step, hold, carry.actor, critic, targets, opt_state["actor"], batch)
            opt_state = dict(actor=actor_opt, critic=critic_opt)
            # `loss` and `grad_norm`, which every learner reports (the divergence check reads them):
            # the critics' and the actor's together
            metrics = {**metrics, "loss": metrics["critic_loss"] + loss_pi, "actor_loss": loss_pi,
                       **grad_norm_metrics(global_norm(critic_grads), actor_grad_norm),
                       "actor_updates": delayed.astype(jnp.float32)}
            return carry.after(view, actor=actor, nets=targets, opt_state=opt_state), metrics

        return gradient_step

    return make_replay_actor_critic(cfg, replay_cfg, policy, nets.init_critic, own, gradient_step_for,
                                    host=td3_host_hooks(replay_cfg), num_updates=num_updates, num_envs=num_envs,
                                    num_steps=num_steps)


ACTOR_METRICS = ("actor_loss", "actor_grad_norm")


def td3_host_hooks(replay_cfg) -> HostHooks:
    """The replay learners' host hooks (`replay/learner.py`), with each metrics line's `actor_loss` and
    `actor_grad_norm` the means over the window's actor updates (None in a window without one)
    rather than over its iterations: the update reports them where the actor moved, 0 elsewhere."""
    hooks = host_hooks(replay_cfg)

    def figures(sums: dict, samples: int, seconds: float, final: LearnerState | None = None) -> dict:
        out = hooks.figures(sums, samples, seconds, final)
        if final is None and "actor_updates" in sums:
            updates = float(np.sum(sums["actor_updates"]))
            out.update({name: float(np.sum(sums[name])) / updates if updates > 0 else None for name in ACTOR_METRICS})
        return out

    return hooks._replace(figures=figures)


def _networks(cfg, obs_shape, action_space):
    policy, nets = make_td3_policy(cfg.network, obs_shape, action_space, cfg.td3.exploration_noise)
    return policy, at_precision(nets, cfg.matmul_precision)


def _make(cfg, policy, nets, speed: SpeedSettings) -> Algorithm:
    return make_td3(cfg.learner, cfg.replay, cfg.td3, policy, nets, num_updates=cfg.num_updates,
                    num_envs=cfg.num_envs, num_steps=cfg.num_steps)


LEARNER = Learner(networks=_networks, make=_make)
