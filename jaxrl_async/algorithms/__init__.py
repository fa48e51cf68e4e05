"""The learners, each an `Algorithm(init, update)` built by its module, and their registry.

Adding a learner is one module that defines `LEARNER = Learner(networks, make)` (`types.Learner`),
its line in `LEARNERS` below, and its name in `config.ALGORITHMS` (with a config section if it has
flags of its own); nothing in the loops, the build or the CLI names a learner.
"""

from __future__ import annotations

from jaxrl_async.algorithms import a2c, dqn, impala, ppo, pqn, reinforce, sac, td3
from jaxrl_async.algorithms.a2c import make_a2c
from jaxrl_async.algorithms.dqn import make_dqn
from jaxrl_async.algorithms.impala import make_impala
from jaxrl_async.algorithms.ppo import PPOHyperparams, make_ppo
from jaxrl_async.algorithms.reinforce import make_reinforce
from jaxrl_async.algorithms.sac import make_sac
from jaxrl_async.algorithms.sgd import LearnerHyperparams, make_learner, sweep_hparams
from jaxrl_async.config import ALGORITHMS, BACKEND_DEFAULTS, SpeedSettings, TrainConfig
from jaxrl_async.types import Algorithm, Learner

LEARNERS: dict[str, Learner] = {
    "ppo": ppo.LEARNER,
    "a2c": a2c.LEARNER,
    "reinforce": reinforce.LEARNER,
    "impala": impala.LEARNER,
    "dqn": dqn.LEARNER,
    "sac": sac.LEARNER,
    "td3": td3.LEARNER,
    "pqn": pqn.LEARNER,
}


def learner(algo: str) -> Learner:
    """The registry's entry for `algo`, or a ValueError naming the known ones."""
    if algo not in LEARNERS:
        raise ValueError(f"algo={algo!r} is not known: choose one of {', '.join(LEARNERS)}")
    return LEARNERS[algo]


def make_algorithm(cfg: TrainConfig, policy, nets=None, speed: SpeedSettings | None = None) -> Algorithm:
    """The learner `cfg.algo` names, sized for this config's rollout (`nets`: the learner's own
    networks from its `Learner.networks`; `speed`: its loops' layout, default every loop rolled,
    as on the CPU)."""
    return learner(cfg.algo).make(cfg, policy, nets, speed or BACKEND_DEFAULTS["cpu"])


__all__ = ["ALGORITHMS", "LEARNERS", "LearnerHyperparams", "PPOHyperparams", "learner", "make_a2c", "make_algorithm",
           "make_dqn", "make_impala", "make_learner", "make_ppo", "make_reinforce", "make_sac", "sweep_hparams"]
