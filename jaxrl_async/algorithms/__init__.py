"""Learners, each an `Algorithm(init, update)` built by a `make_*` factory over the shared SGD loop."""

from __future__ import annotations

from typing import Callable

from jaxrl_async.algorithms.a2c import make_a2c
from jaxrl_async.algorithms.dqn import make_dqn
from jaxrl_async.algorithms.sgd import LearnerHyperparams, make_learner, sweep_hparams
from jaxrl_async.algorithms.impala import make_impala
from jaxrl_async.algorithms.ppo import PPOHyperparams, make_ppo
from jaxrl_async.algorithms.reinforce import make_reinforce
from jaxrl_async.algorithms.sac import make_sac
from jaxrl_async.config import TrainConfig
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.nets.sac import SACNets
from jaxrl_async.types import Algorithm

ALGORITHMS = ("ppo", "a2c", "reinforce", "impala", "dqn", "sac")


def make_algorithm(cfg: TrainConfig, policy: Policy, q_values: Callable | None = None,
                   unroll: int = 1, sac_nets: SACNets | None = None) -> Algorithm:
    """The learner `cfg.algo` names, sized for this config's rollout (`q_values`: the Q-network
    of a Q policy, for dqn; `sac_nets`: SAC's actor and critics, for sac; `unroll`: the
    minibatch loop's unroll factor, speed only)."""
    learner = cfg.learner
    if cfg.algo == "sac":
        if sac_nets is None:
            raise ValueError("algo='sac' needs SAC's networks: build them with sac_policy.make_sac_policy")
        return make_sac(learner, cfg.dqn, cfg.sac, policy, sac_nets, num_updates=cfg.num_updates,
                        num_envs=cfg.num_envs, num_steps=cfg.num_steps)
    if cfg.algo == "dqn":
        if q_values is None:
            raise ValueError("algo='dqn' needs the Q policy's network: build it with q_policy.make_q_policy")
        return make_dqn(learner, cfg.dqn, policy, q_values, num_updates=cfg.num_updates, num_envs=cfg.num_envs,
                        num_steps=cfg.num_steps, total_timesteps=cfg.total_timesteps)
    if cfg.algo == "ppo":
        return make_ppo(learner, policy, num_updates=cfg.num_updates, batch_size=cfg.batch_size, unroll=unroll)
    if cfg.algo == "a2c":
        return make_a2c(learner, policy, num_updates=cfg.num_updates, unroll=unroll)
    if cfg.algo == "reinforce":
        return make_reinforce(learner, policy, num_updates=cfg.num_updates, unroll=unroll)
    if cfg.algo == "impala":
        return make_impala(learner, policy, num_updates=cfg.num_updates, unroll=unroll)
    raise ValueError(f"algo={cfg.algo!r} is not known: choose one of {', '.join(ALGORITHMS)}")


__all__ = ["ALGORITHMS", "LearnerHyperparams", "PPOHyperparams", "make_a2c", "make_algorithm", "make_dqn", "make_impala",
           "make_learner", "make_ppo", "make_reinforce", "make_sac", "sweep_hparams"]
