"""SAC's own flags (`--algo sac`): the target critics and the temperature.

A learner's section of `TrainConfig` lives beside the learner (`algorithms/sac.py`); the
registry (`algorithms/registry.py`) makes it the config's `sac` field, and its fields flags.
This module imports no JAX: the CLI reads it before JAX starts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from jaxrl_async.config import require, require_field_types


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC (--algo sac): the target critics and the temperature. The replay flags are
    `ReplayConfig`'s; the learning rate (of the actor, the critics and the temperature alike), gamma and max_grad_norm are the learner flags."""

    tau: float = 0.005
    """SAC: the target critics' Polyak step after every gradient step, target <- tau*critic + (1-tau)*target."""
    target_entropy: float | Literal["auto"] = "auto"
    """SAC: the entropy (nats, of the action squashed into [-1, 1]) the learned temperature aims for; 'auto': -(action dimensions)."""
    init_temperature: float = 1.0
    """SAC: the temperature (entropy weight) at the start."""
    learn_temperature: bool = True
    """SAC: learn the temperature towards target_entropy (else it stays at init_temperature)."""

    def __post_init__(self):
        require_field_types(self)
        require(0.0 < self.tau <= 1.0, "tau", self.tau,
                "must be in (0, 1]: the target critics move that part of the way each gradient step")
        require(self.target_entropy == "auto" or (isinstance(self.target_entropy, (int, float))
                                                 and math.isfinite(self.target_entropy)),
               "target_entropy", self.target_entropy, "use a finite number of nats or 'auto' (-|A|)")
        require(math.isfinite(self.init_temperature) and self.init_temperature > 0, "init_temperature",
                self.init_temperature, "must be a finite number > 0")
