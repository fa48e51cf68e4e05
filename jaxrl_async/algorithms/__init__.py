"""Learners, each an `Algorithm(init, update)` built by a `make_*` factory."""

from __future__ import annotations

from jaxrl_async.algorithms.ppo import PPOHyperparams, make_ppo
from jaxrl_async.config import TrainConfig
from jaxrl_async.networks import Policy
from jaxrl_async.types import Algorithm


def make_algorithm(cfg: TrainConfig, policy: Policy) -> Algorithm:
    """The learner `cfg.algo` names, sized for this config's rollout."""
    if cfg.algo == "ppo":
        return make_ppo(cfg.ppo, policy, num_updates=cfg.num_updates, batch_size=cfg.batch_size)
    raise ValueError(f"algo={cfg.algo!r} is not known: choose ppo")


__all__ = ["PPOHyperparams", "make_algorithm", "make_ppo"]
