"""DQN's own flags (`--algo dqn`): the target network and the exploration schedule, which PQN uses too.

A learner's section of `TrainConfig` lives beside the learner (`algorithms/dqn.py`); the
registry (`algorithms/registry.py`) makes it the config's `dqn` field, and its fields flags.
This module imports no JAX: the CLI reads it before JAX starts.
"""

from __future__ import annotations

import dataclasses

from jaxrl_async.config import require, require_field_types


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN (--algo dqn): the target network and the exploration schedule (PQN's too). The replay flags are
    `ReplayConfig`'s; the learning rate, its annealing, gamma and max_grad_norm are the learner flags."""

    huber_delta: float = 10.0
    """DQN: the Huber loss's quadratic range (1.0 is the Nature DQN's error clipping, made for clipped rewards; with CartPole's unclipped returns it let Q diverge)."""
    double_q: bool = True
    """DQN: Double DQN (the online network picks the bootstrap action, the target network values it)."""
    target_update_period: int = 500
    """DQN: gradient steps between target-network updates."""
    target_update_tau: float = 1.0
    """DQN: the target update's step, target <- tau*online + (1-tau)*target (1.0: a copy; e.g. 0.005 with period 1: Polyak)."""
    epsilon_start: float = 1.0
    """DQN, PQN: exploration rate at the start."""
    epsilon_end: float = 0.05
    """DQN, PQN: exploration rate after the decay."""
    epsilon_decay_fraction: float = 0.5
    """DQN, PQN: fraction of total_timesteps over which epsilon decays linearly to epsilon_end."""

    def __post_init__(self):
        require_field_types(self)
        require(self.huber_delta > 0, "huber_delta", self.huber_delta, "must be > 0")
        require(self.target_update_period >= 1, "target_update_period", self.target_update_period, "must be >= 1")
        require(0.0 < self.target_update_tau <= 1.0, "target_update_tau", self.target_update_tau,
                "must be in (0, 1]: 1.0 copies the online network, less moves the target part of the way")
        for name in ("epsilon_start", "epsilon_end"):
            require(0.0 <= getattr(self, name) <= 1.0, name, getattr(self, name), "must be a probability in [0, 1]")
        require(0.0 < self.epsilon_decay_fraction <= 1.0, "epsilon_decay_fraction", self.epsilon_decay_fraction,
                "must be in (0, 1]")
