"""TD3's own flags (`--algo td3`): exploration, target policy smoothing, the delayed actor.

A learner's section of `TrainConfig` lives beside the learner (`algorithms/td3.py`); the
registry (`algorithms/registry.py`) makes it the config's `td3` field, and its fields flags.
This module imports no JAX: the CLI reads it before JAX starts.
"""

from __future__ import annotations

import dataclasses
import math

from jaxrl_async.config import require, require_field_types


@dataclasses.dataclass(frozen=True)
class TD3Config:
    """TD3 (--algo td3): exploration, target policy smoothing, the delayed actor and its targets.
    Every noise is in the unit action box [-1, 1]^D, i.e. a fraction of half the env's action
    range. The replay flags are `ReplayConfig`'s; the learning rate (of the actor and the
    critics alike), gamma and max_grad_norm are the learner flags."""

    exploration_noise: float = 0.1
    """TD3: std of the Gaussian noise added to the actor's action when acting, a fraction of half the action range (the paper's 0.1); the noise is correlated over time with --action-noise-correlation."""
    policy_delay: int = 2
    """TD3: gradient steps per update of the actor and the target networks (the critics learn at every one)."""
    target_noise: float = 0.2
    """TD3: std of the Gaussian noise added to the target actor's action in the critics' target (target policy smoothing; 0 turns it off)."""
    target_noise_clip: float = 0.5
    """TD3: the target policy smoothing noise is clipped to [-target_noise_clip, target_noise_clip]."""
    target_tau: float = 0.005
    """TD3: the target actor's and critics' Polyak step at each actor update, target <- tau*online + (1-tau)*target."""

    def __post_init__(self):
        require_field_types(self)
        require(math.isfinite(self.exploration_noise) and self.exploration_noise > 0, "exploration_noise",
                self.exploration_noise, "must be a finite number > 0, a fraction of half the action range (e.g. 0.1)")
        require(isinstance(self.policy_delay, int) and self.policy_delay >= 1, "policy_delay", self.policy_delay,
                "must be a count of gradient steps >= 1 (1: the actor learns at every step; the paper's: 2)")
        require(math.isfinite(self.target_noise) and self.target_noise >= 0, "target_noise", self.target_noise,
                "must be a finite number >= 0 (0: no target policy smoothing; the paper's: 0.2)")
        require(math.isfinite(self.target_noise_clip) and self.target_noise_clip >= 0, "target_noise_clip",
                self.target_noise_clip, "must be a finite number >= 0 (the paper's: 0.5)")
        require(0.0 < self.target_tau <= 1.0, "target_tau", self.target_tau,
                "must be in (0, 1]: the target networks move that part of the way at each actor update")
