"""The replay learners' configs (--algo dqn, --algo sac): `TrainConfig.dqn` and `TrainConfig.sac`
(`config.py` re-exports them). Frozen and validated like every config; each field's docstring is
its flag's help text.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from jaxrl_async.config_checks import check as _check


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN (--algo dqn): the replay buffer, the target network and the exploration schedule.
    The learning rate, its annealing, gamma and max_grad_norm are the learner flags. The replay
    flags (replay_capacity, learning_starts, replay_ratio, replay_batch_size, n_step,
    checkpoint_replay, priority_*) are SAC's too: one buffer, one set of flags, for both off-policy learners."""

    replay_capacity: int = 100_000
    """DQN, SAC: transitions the replay buffer holds per seed (rounded down to whole rows of num_envs)."""
    learning_starts: int = 10_000
    """DQN, SAC: transitions in the buffer before the first gradient step (a resume without the buffer waits again)."""
    replay_ratio: int = 1
    """DQN, SAC: gradient steps per iteration, i.e. per num_envs*num_steps env steps added to the buffer."""
    replay_batch_size: int = 128
    """DQN, SAC: transitions sampled (uniformly, or by priority: priority_exponent) per gradient step."""
    n_step: int = 1
    """DQN, SAC: steps in the return before bootstrapping (cut at terminations and time limits)."""
    huber_delta: float = 10.0
    """DQN: the Huber loss's quadratic range (1.0 is the Nature DQN's error clipping, made for clipped rewards; with CartPole's unclipped returns it let Q diverge)."""
    double_q: bool = True
    """DQN: Double DQN (the online network picks the bootstrap action, the target network values it)."""
    target_update_period: int = 500
    """DQN: gradient steps between target-network updates."""
    target_update_tau: float = 1.0
    """DQN: the target update's step, target <- tau*online + (1-tau)*target (1.0: a copy; e.g. 0.005 with period 1: Polyak)."""
    epsilon_start: float = 1.0
    """DQN: exploration rate at the start."""
    epsilon_end: float = 0.05
    """DQN: exploration rate after the decay."""
    epsilon_decay_fraction: float = 0.5
    """DQN: fraction of total_timesteps over which epsilon decays linearly to epsilon_end."""
    checkpoint_replay: bool = False
    """DQN, SAC: save the replay buffer in checkpoints (a resume is then bit-identical; without it the buffer refills)."""
    priority_exponent: float = 0.0
    """DQN, SAC: prioritised replay's alpha: transitions are drawn in proportion to (|TD error| + priority_epsilon)^alpha (Schaul et al. 2016, proportional; 0.6 is the paper's); 0 draws uniformly, exactly as without prioritised replay."""
    priority_weight_exponent: float = 0.4
    """DQN, SAC: prioritised replay's beta, the importance-sampling exponent at the start of the run, annealed linearly to 1 at its end; the loss of each sampled transition is weighted by (N P)^-beta / max over the batch (unused when priority_exponent is 0)."""
    priority_epsilon: float = 1e-6
    """DQN, SAC: added to |TD error| before the exponent, so no written transition's priority is 0 (unused when priority_exponent is 0)."""

    def __post_init__(self):
        _check(self.replay_capacity >= 1, "replay_capacity", self.replay_capacity, "must be >= 1")
        _check(self.learning_starts >= 1, "learning_starts", self.learning_starts,
               "must be >= 1 (the first gradient step needs a transition to sample)")
        _check(self.replay_ratio >= 1, "replay_ratio", self.replay_ratio, "must be >= 1 gradient step per iteration")
        _check(self.replay_batch_size >= 1, "replay_batch_size", self.replay_batch_size, "must be >= 1")
        _check(self.n_step >= 1, "n_step", self.n_step, "must be >= 1")
        _check(self.huber_delta > 0, "huber_delta", self.huber_delta, "must be > 0")
        _check(self.target_update_period >= 1, "target_update_period", self.target_update_period, "must be >= 1")
        _check(0.0 < self.target_update_tau <= 1.0, "target_update_tau", self.target_update_tau,
               "must be in (0, 1]: 1.0 copies the online network, less moves the target part of the way")
        for name in ("epsilon_start", "epsilon_end"):
            _check(0.0 <= getattr(self, name) <= 1.0, name, getattr(self, name), "must be a probability in [0, 1]")
        _check(0.0 < self.epsilon_decay_fraction <= 1.0, "epsilon_decay_fraction", self.epsilon_decay_fraction,
               "must be in (0, 1]")
        _check(math.isfinite(self.priority_exponent) and self.priority_exponent >= 0, "priority_exponent",
               self.priority_exponent, "must be a finite number >= 0 (0: uniform replay; 0.6: the paper's)")
        _check(0.0 <= self.priority_weight_exponent <= 1.0, "priority_weight_exponent",
               self.priority_weight_exponent, "must be in [0, 1] (it is annealed from there to 1; 0.4: the paper's)")
        _check(math.isfinite(self.priority_epsilon) and self.priority_epsilon > 0, "priority_epsilon",
               self.priority_epsilon, "must be a finite number > 0, so no transition's priority is 0 (e.g. 1e-6)")

    @property
    def prioritised(self) -> bool:
        """Whether the replay draws by priority (priority_exponent > 0)."""
        return self.priority_exponent > 0


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC (--algo sac): the target critics and the temperature. The replay flags are DQN's
    (replay_capacity, learning_starts, replay_ratio, ...); the learning rate (of the actor, the
    critics and the temperature alike), gamma and max_grad_norm are the learner flags."""

    tau: float = 0.005
    """SAC: the target critics' Polyak step after every gradient step, target <- tau*critic + (1-tau)*target."""
    target_entropy: float | Literal["auto"] = "auto"
    """SAC: the entropy (nats, of the action squashed into [-1, 1]) the learned temperature aims for; 'auto': -(action dimensions)."""
    init_temperature: float = 1.0
    """SAC: the temperature (entropy weight) at the start."""
    learn_temperature: bool = True
    """SAC: learn the temperature towards target_entropy (else it stays at init_temperature)."""

    def __post_init__(self):
        _check(0.0 < self.tau <= 1.0, "tau", self.tau,
               "must be in (0, 1]: the target critics move that part of the way each gradient step")
        _check(self.target_entropy == "auto" or (isinstance(self.target_entropy, (int, float))
                                                 and math.isfinite(self.target_entropy)),
               "target_entropy", self.target_entropy, "use a finite number of nats or 'auto' (-|A|)")
        _check(math.isfinite(self.init_temperature) and self.init_temperature > 0, "init_temperature",
               self.init_temperature, "must be a finite number > 0")


OFF_POLICY_ALGOS = ("dqn", "sac")
