"""Twin critics Q_1(s, a), Q_2(s, a) for the Box-action replay learners (SAC, TD3): two independent
MLPs on the observation and the unit action, initialised apart and run as one batched network.
The learners regress both onto one target built from the smaller of their target copies' values
(Fujimoto et al. 2018's clipped double Q), which curbs the overestimation a single critic's
maximisation brings.

    critic, init_critic = make_twin_critic(network_cfg, obs_shape, action_dim)
    q = critic(init_critic(key), obs, unit_action)   # [2, ...]: both critics' Q
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp

from jaxrl_async.config import NetworkConfig
from jaxrl_async.nets.actor_critic import MLPTorso, flat_observations
from jaxrl_async.nets.orthogonal import orthogonal


class ActionValue(nn.Module):
    """Q(s, a): an MLP on [obs, unit action] -> one value."""

    hidden_sizes: Sequence[int]
    activation: str

    @nn.compact
    def __call__(self, x):
        features = MLPTorso(self.hidden_sizes, self.activation, name="torso")(x)
        return nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=nn.initializers.zeros,
                        name="q_head")(features)[..., 0]


class TwinCritic(nn.Module):
    """Two independent `ActionValue`s (params stacked on a leading axis of 2, initialised apart),
    run as one batched network: `[2, ...]` Q-values."""

    hidden_sizes: Sequence[int]
    activation: str

    @nn.compact
    def __call__(self, obs, action):
        twin = nn.vmap(ActionValue, variable_axes={"params": 0}, split_rngs={"params": True},
                       in_axes=None, out_axes=0, axis_size=2)
        return twin(self.hidden_sizes, self.activation, name="twin")(jnp.concatenate([obs, action], axis=-1))


def make_twin_critic(cfg: NetworkConfig, obs_shape: tuple[int, ...],
                     action_dim: int) -> tuple[Callable, Callable]:
    """`critic(critic_params, obs [..., *obs_shape], unit_action [..., D]) -> [2, ...]` and
    `init_critic(key) -> critic params`, the MLP's widths and activation from `cfg`."""
    module = TwinCritic(tuple(cfg.hidden_sizes), cfg.activation)
    prepare = flat_observations(obs_shape)

    def critic(critic_params, obs, unit_action):
        return module.apply(critic_params, prepare(obs), unit_action)

    def init_critic(key):
        obs = prepare(jnp.zeros((1,) + obs_shape, jnp.float32))
        return module.init(key, obs, jnp.zeros((1, action_dim), jnp.float32))

    return critic, init_critic
