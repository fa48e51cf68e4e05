"""The Q-network as an `actor_critic.Policy`: epsilon-greedy acting, greedy evaluation.

`make_q_policy(network_cfg, obs_shape, action_space)` returns the same interface the
actor-critic has (DQN's and PQN's; PQN's with `layer_norm`), so the rollout, the evaluator and the checkpoints use it unchanged:

- params are `QParams(network, epsilon)`: the behaviour policy is the Q-network *and* its
  exploration rate, so the learner sets `epsilon` from its schedule and every reader of the
  params (the rollout, a published copy) acts with the rate that belongs to them;
- `step` returns `EpsilonGreedy(q, epsilon)` (its `mode()` is the greedy action the evaluator
  takes) and max_a Q as the value; `value_step` is max_a Q alone;
- the carry is empty (no recurrent Q-network), `replay_length` 1.

`q_values(params_network, obs) -> [..., A]` is the network itself, for the learner.
Observations are encoded as the actor-critic's are (`actor_critic.encoder_input`: one encoder per
leaf of a Dict / Tuple observation). Where the observation carries an action mask
(`spaces.ACTION_MASK`), greedy and random actions are both among the legal ones, and the value
is the largest legal Q; `q_values` stays the network's, every action's.
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces

from jaxrl_async.config import NetworkConfig
from jaxrl_async.core.distributions import EpsilonGreedy, mask_scores
from jaxrl_async.envs.spaces import check_action_mask, zeros_observation
from jaxrl_async.nets.actor_critic import Policy, encoder_input, make_torso, observed_legal_actions
from jaxrl_async.nets.orthogonal import orthogonal


@struct.dataclass
class QParams:
    network: dict  # the Q-network's flax params
    epsilon: jax.Array  # [] float32, the exploration rate the rollout acts with


class QNetwork(nn.Module):
    """Torso (MLP, or the CNN for images; one per leaf of a nested observation) -> one Q-value
    per action; with `layer_norm`, a LayerNorm before each hidden nonlinearity."""

    hidden_sizes: Sequence[int]
    activation: str
    use_cnn: bool
    num_actions: int
    leaves: tuple[tuple[str, bool], ...] | None = None  # a nested observation's encoders (`LeafEncoders`)
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs):
        features = make_torso(self.hidden_sizes, self.activation, self.use_cnn, self.leaves, "torso",
                              self.layer_norm)(obs)
        return nn.Dense(self.num_actions, kernel_init=orthogonal(1.0),
                        bias_init=nn.initializers.zeros, name="q_head")(features)


def make_q_policy(cfg: NetworkConfig, obs_shape, action_space, *, algo: str = "dqn",
                  layer_norm: bool = False) -> tuple[Policy, Callable]:
    """The epsilon-greedy Q policy and `q_values(network_params, obs)` for a Discrete action space
    (`algo`: the learner that asks, for the errors; `layer_norm`: `QNetwork`'s)."""
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"algo={algo!r} needs a Discrete action space, got {action_space!r}")
    if cfg.core != "none":
        raise ValueError(f"core={cfg.core!r} is not supported with algo={algo!r} (its Q-network learns from "
                         "single transitions, not sequences): use --core none")
    check_action_mask(obs_shape, action_space)
    obs_shape, prepare, use_cnn, leaves = encoder_input(cfg.torso, obs_shape)
    module = QNetwork(tuple(cfg.hidden_sizes), cfg.activation, use_cnn, int(action_space.n), leaves, layer_norm)

    def q_values(network, obs):
        return module.apply(network, prepare(obs))

    def init(key):
        # a fresh Q policy is greedy; the learner sets epsilon from its schedule
        network = module.init(key, prepare(zeros_observation(obs_shape, (1,))))
        return QParams(network=network, epsilon=jnp.zeros((), jnp.float32))

    def step(params: QParams, obs, carry):
        q, legal = q_values(params.network, obs), observed_legal_actions(obs)
        return EpsilonGreedy(q, params.epsilon, legal), jnp.max(mask_scores(q, legal), axis=-1), carry

    def value_step(params: QParams, obs, carry):
        return jnp.max(mask_scores(q_values(params.network, obs), observed_legal_actions(obs)), axis=-1)

    def unroll(params, obs, carry, reset):
        return step(params, obs, carry)

    policy = Policy(init, lambda batch_shape: (), step, value_step, unroll, replay_length=1,
                    obs_shape=obs_shape, discrete=True, action_shape=())
    return policy, q_values

