"""PQN's own flags (`--algo pqn`).

A learner's section of `TrainConfig` lives beside the learner (`algorithms/pqn.py`); the
registry (`algorithms/registry.py`) makes it the config's `pqn` field, and its fields flags.
This module imports no JAX: the CLI reads it before JAX starts.
"""

from __future__ import annotations

import dataclasses

from jaxrl_async.config import require_field_types


@dataclasses.dataclass(frozen=True)
class PQNConfig:
    """PQN (--algo pqn): Q-learning on Q(lambda) returns over each rollout, without a replay buffer or a
    target network. Its minibatch epochs are the learner flags (--update-epochs, --num-minibatches, as PPO's),
    lambda is --gae-lambda, and the exploration schedule is DQN's flags (--epsilon-start, --epsilon-end,
    --epsilon-decay-fraction)."""

    layer_norm: bool = True
    """PQN: LayerNorm before each hidden nonlinearity of the Q-network, which keeps Q-learning without a target network stable (Gallici et al. 2025); --no-layer-norm for the plain MLP / CNN."""

    def __post_init__(self):
        require_field_types(self)
