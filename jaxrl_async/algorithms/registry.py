"""The learners' registry: one line per learner, and the `TrainConfig` it makes.

A learner is its module `algorithms/<name>.py`, which defines `LEARNER = Learner(networks, make)`
(`types.Learner`); where it has flags of its own, their dataclass beside it
(`algorithms/<name>_config.py`); and its line below, which says what the config must know of it
(`train_config.LearnerSpec`). Nothing in the config, the loops, the build or the CLI names a learner:
`TrainConfig` gets `algo`'s choices and each learner's section from here.

This module imports no JAX (the CLI builds its flags from `TrainConfig` before JAX starts); a
learner's module is imported when a run asks for it (`algorithms.learner`).
"""

from __future__ import annotations

from jaxrl_async.algorithms.dqn_config import DQNConfig
from jaxrl_async.algorithms.pqn_config import PQNConfig
from jaxrl_async.algorithms.sac_config import SACConfig
from jaxrl_async.algorithms.td3_config import TD3Config
from jaxrl_async.train_config import LearnerSpec, train_config_class

DISCRETE, BOX = ("Discrete",), ("Box",)
_POLICY_GRADIENT = ("learning_rate", "ent_coef", "vf_coef")  # the loss's weights; no clip range
# the learner flags of the minibatch loop (`sgd.make_learner`), which the replay learners do not run
_MINIBATCHES = ("learner.update_epochs", "learner.num_minibatches")
_PG = (*_MINIBATCHES, "learner.normalize_advantages", "learner.importance_weights")  # a2c's policy gradient

LEARNERS: dict[str, LearnerSpec] = {spec.name: spec for spec in (
    LearnerSpec("ppo", hparams_read=("learning_rate", "ent_coef", "vf_coef", "clip_eps"),
                reads=(*_MINIBATCHES, "learner.normalize_advantages", "learner.clip_value_loss")),
    LearnerSpec("a2c", hparams_read=_POLICY_GRADIENT, reads=_PG),
    LearnerSpec("reinforce", hparams_read=_POLICY_GRADIENT, reads=(*_PG, "learner.reinforce_baseline")),
    LearnerSpec("impala", whole_sequences=True, hparams_read=_POLICY_GRADIENT,
                reads=(*_MINIBATCHES, "learner.clip_rho_threshold", "learner.clip_pg_rho_threshold")),
    LearnerSpec("dqn", DQNConfig, DISCRETE, replay=True, own_networks="its Q-network"),
    LearnerSpec("sac", SACConfig, BOX, replay=True,
                own_networks="its tanh-squashed Gaussian actor and twin critics"),
    LearnerSpec("td3", TD3Config, BOX, replay=True, own_networks="its deterministic actor and twin critics"),
    LearnerSpec("pqn", PQNConfig, DISCRETE, own_networks="its Q-network", resume_fixed=("layer_norm",),
                reads=(*_MINIBATCHES, "dqn.epsilon_start", "dqn.epsilon_end", "dqn.epsilon_decay_fraction")),
)}

TrainConfig = train_config_class(LEARNERS.values(), module=__name__)


def learners_for(action_space) -> tuple[str, ...]:
    """The learners whose `LearnerSpec.actions` include `action_space`'s kind, in registry order."""
    kind = type(action_space).__name__
    return tuple(name for name, spec in LEARNERS.items() if kind in spec.actions)


def check_action_space(algo: str, action_space) -> None:
    """A ValueError where `algo` does not learn `action_space`'s kind, naming every learner that does."""
    spec = LEARNERS[algo]
    if type(action_space).__name__ in spec.actions:
        return
    fitting = learners_for(action_space)
    instead = f"use --algo {' or '.join(fitting)}" if fitting else "no learner here learns it"
    raise ValueError(f"algo={algo!r} needs a {' or '.join(spec.actions)} action space, got {action_space!r}: "
                     f"{instead}")
