"""The learners, each an `Algorithm(init, update)` built by its module, and their registry
(`registry.py`: one line per learner).

Adding a learner is its module `algorithms/<name>.py`, which defines `LEARNER = Learner(networks,
make)` (`types.Learner`), its flags' dataclass beside it where it has flags of its own
(`<name>_config.py`), and its line in `registry.LEARNERS`; nothing in the config, the loops, the
build or the CLI names a learner.

Importing this package starts no JAX: a learner's module is imported when it is asked for, and the
names below that need JAX (`sweep_hparams`, ...) load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from jaxrl_async.algorithms.registry import LEARNERS, TrainConfig, check_action_space, learners_for
from jaxrl_async.speed import BACKEND_DEFAULTS, SpeedSettings

if TYPE_CHECKING:  # jaxrl_async.types imports JAX
    from jaxrl_async.types import Algorithm, Learner

_FROM_SGD = ("LearnerHyperparams", "make_learner", "sweep_hparams")


def learner(algo: str) -> Learner:
    """The learner `algo` names (its module's `LEARNER`), or a ValueError naming the known ones."""
    if algo not in LEARNERS:
        raise ValueError(f"algo={algo!r} is not known: choose one of {', '.join(LEARNERS)}")
    return importlib.import_module(f"{__name__}.{algo}").LEARNER


def make_algorithm(cfg: TrainConfig, policy, nets=None, speed: SpeedSettings | None = None) -> Algorithm:
    """The learner `cfg.algo` names, sized for this config's rollout (`nets`: the learner's own
    networks from its `Learner.networks`; `speed`: its loops' layout, default every loop rolled,
    as on the CPU)."""
    return learner(cfg.algo).make(cfg, policy, nets, speed or BACKEND_DEFAULTS["cpu"])


def __getattr__(name: str):
    if name in _FROM_SGD:
        return getattr(importlib.import_module(f"{__name__}.sgd"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LEARNERS", "TrainConfig", "check_action_space", "learner", "learners_for", "make_algorithm",
           *_FROM_SGD]
