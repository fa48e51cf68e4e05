"""SAC's actor as an `actor_critic.Policy` (a tanh-squashed Gaussian), and its twin critics.

`make_sac_policy(network_cfg, obs_shape, action_space)` returns `(policy, nets)`:

- params are `SACParams(actor, random_actions)`: the actor network and whether the rollout
  acts uniformly at random (the warm-up before `learning_starts`, which the learner switches
  off), so the rollout, the evaluator and the checkpoints use the one policy interface;
- `step` returns a `SquashedGaussian` whose `sample` is the env action (its `mode()`, the
  squashed mean, is what the evaluator takes) and a zero value: SAC values actions with its
  critics, which the learner calls itself (`nets.critic`), so the rollout's GAE is unused;
- `nets.actor(actor_params, obs) -> SquashedGaussian` and `nets.critic(critic_params, obs,
  unit_action) -> [2, ...]` (both critics' Q) are the learner's.

Actions: the actor's Gaussian sample u is squashed, a = tanh(u) in [-1, 1]^D, then mapped
affinely onto the env's Box, low + (a + 1) (high - low) / 2. The critics take the unit action
a (the replay stores the env action; `to_unit` maps it back), so the critics see the same
range whatever the bounds. `log_prob` is the density of the unit action a, with the tanh
correction (Haarnoja et al. 2018, appendix C):

    log pi(a|s) = sum_d [ log N(u_d; mean_d, std_d) - log(1 - tanh(u_d)^2) ]

The affine map to the bounds would add the constant -sum_d log((high - low) / 2), which moves
no gradient; leaving it out makes the default target entropy -|A| mean the same for every
bound (as Stable-Baselines3, which also acts in [-1, 1] and rescales).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces

from jaxrl_async.config import NetworkConfig
from jaxrl_async.nets.actor_critic import MLPTorso, Policy

_LOG_2PI = math.log(2.0 * math.pi)
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # the actor's log-std is clipped to this range (as SB3)


@struct.dataclass
class SACParams:
    actor: dict  # the actor network's flax params
    random_actions: jax.Array  # [] bool: the rollout acts uniformly over the Box (the warm-up)


def squash_log_det(u: jax.Array) -> jax.Array:
    """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), exact and finite for large |u|."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


@struct.dataclass
class SquashedGaussian:
    """tanh(N(mean, std)) mapped onto [low, high]; see the module docstring.

    `low`, `high` broadcast against the action `[..., D]`; `uniform` ([] bool) makes `sample`
    draw uniformly over the box instead (log_prob and mode are the Gaussian's either way).
    """

    mean: jax.Array  # [..., D]
    log_std: jax.Array  # [..., D]
    low: jax.Array  # [D]
    high: jax.Array  # [D]
    uniform: jax.Array  # [] bool

    def to_env(self, unit_action: jax.Array) -> jax.Array:
        return self.low + (unit_action + 1.0) * 0.5 * (self.high - self.low)

    def to_unit(self, action: jax.Array) -> jax.Array:
        return 2.0 * (action - self.low) / (self.high - self.low) - 1.0

    def _pre_squash(self, noise: jax.Array) -> jax.Array:
        """u = mean + std * noise, the Gaussian sample the tanh squashes."""
        return self.mean + jnp.exp(self.log_std) * noise

    def sample_unit(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A reparameterised sample: (unit action tanh(u) [..., D], its log-density [...])."""
        noise = jax.random.normal(key, self.mean.shape, self.mean.dtype)
        u = self._pre_squash(noise)
        log_prob = jnp.sum(-0.5 * noise * noise - self.log_std - 0.5 * _LOG_2PI - squash_log_det(u), axis=-1)
        return jnp.tanh(u), log_prob

    def draw(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(the Gaussian's standard-normal noise, a uniform point of [-1, 1]^D for the warm-up)."""
        gauss_key, uniform_key = jax.random.split(key)
        return (jax.random.normal(gauss_key, self.mean.shape, self.mean.dtype),
                jax.random.uniform(uniform_key, self.mean.shape, self.mean.dtype, -1.0, 1.0))

    def sample_from_draw(self, draw: tuple[jax.Array, jax.Array]) -> jax.Array:
        noise, random = draw
        unit = jnp.tanh(self._pre_squash(noise))  # `sample_unit`'s action for this noise
        return self.to_env(jnp.where(self.uniform, random, unit))

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def sample_from_noise(self, noise: jax.Array) -> jax.Array:
        """The env action for a standard-normal `noise` [..., D] (`exploration.py` correlates it
        over time). In the warm-up it is the noise's normal CDF mapped onto the box: uniform, as
        `sample`'s, and correlated alike (white warm-up actions explore as little as white noise)."""
        unit = jnp.tanh(self._pre_squash(noise))
        uniform = 2.0 * jax.scipy.special.ndtr(noise) - 1.0
        return self.to_env(jnp.where(self.uniform, uniform, unit))

    def log_prob(self, action: jax.Array) -> jax.Array:
        """The unit action's log-density, from the env action (clipped inside the open box to
        invert the tanh: the rollout records it; the learner uses `sample_unit`'s)."""
        unit = jnp.clip(self.to_unit(action), -1.0 + 1e-6, 1.0 - 1e-6)
        u = jnp.arctanh(unit)
        z = (u - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z * z - self.log_std - 0.5 * _LOG_2PI - squash_log_det(u), axis=-1)

    def entropy(self) -> jax.Array:
        """The pre-squash Gaussian's entropy (the squashed one has no closed form; SAC's own
        estimate is -log pi of its samples, the learner's `entropy` metric)."""
        return jnp.sum(self.log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)

    def mode(self) -> jax.Array:
        """The deterministic action: the squashed mean, in the env's bounds."""
        return self.to_env(jnp.tanh(self.mean))


class SACActor(nn.Module):
    """MLP torso -> mean and log-std of the pre-squash Gaussian (log-std clipped)."""

    hidden_sizes: Sequence[int]
    activation: str
    action_dim: int

    @nn.compact
    def __call__(self, obs):
        features = MLPTorso(self.hidden_sizes, self.activation, name="torso")(obs)
        out = nn.Dense(2 * self.action_dim, kernel_init=nn.initializers.orthogonal(0.01),
                       bias_init=nn.initializers.zeros, name="head")(features)
        mean, log_std = jnp.split(out, 2, axis=-1)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)


class QNetwork(nn.Module):
    """Q(s, a): an MLP on [obs, unit action] -> one value."""

    hidden_sizes: Sequence[int]
    activation: str

    @nn.compact
    def __call__(self, x):
        features = MLPTorso(self.hidden_sizes, self.activation, name="torso")(x)
        return nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), bias_init=nn.initializers.zeros,
                        name="q_head")(features)[..., 0]


class TwinCritic(nn.Module):
    """Two independent Q-networks (params stacked on a leading axis of 2, initialised apart),
    run as one batched network: `[2, ...]` Q-values."""

    hidden_sizes: Sequence[int]
    activation: str

    @nn.compact
    def __call__(self, obs, action):
        twin = nn.vmap(QNetwork, variable_axes={"params": 0}, split_rngs={"params": True},
                       in_axes=None, out_axes=0, axis_size=2)
        return twin(self.hidden_sizes, self.activation, name="twin")(jnp.concatenate([obs, action], axis=-1))


class SACNets(NamedTuple):
    actor: Callable  # (actor_params, obs) -> SquashedGaussian (uniform off)
    critic: Callable  # (critic_params, obs, unit_action) -> [2, ...] Q-values
    init_critic: Callable  # key -> critic params
    action_dim: int


def make_sac_policy(cfg: NetworkConfig, obs_shape: Sequence[int], action_space) -> tuple[Policy, SACNets]:
    """The squashed-Gaussian policy and SAC's networks for a Box action space."""
    if not isinstance(action_space, spaces.Box):
        raise ValueError(f"algo='sac' needs a continuous Box action space, got {action_space!r}: use --algo ppo "
                         f"(or a2c, reinforce, impala{', dqn, pqn' if isinstance(action_space, spaces.Discrete) else ''})")
    if cfg.core != "none":
        raise ValueError(f"core={cfg.core!r} is not supported with algo='sac' (the replay holds single "
                         "transitions, not sequences): use --core none")
    if cfg.torso == "cnn":
        raise ValueError("torso='cnn' is not supported with algo='sac' (its critics take the observation and the "
                         "action together through the MLP): use --torso mlp or auto")
    obs_shape = tuple(int(d) for d in obs_shape)
    action_shape = tuple(int(d) for d in action_space.shape)
    action_dim = int(np.prod(action_shape))
    low = jnp.broadcast_to(jnp.asarray(action_space.low, jnp.float32), action_shape).reshape(-1)
    high = jnp.broadcast_to(jnp.asarray(action_space.high, jnp.float32), action_shape).reshape(-1)
    if action_shape != (action_dim,) or not bool(jnp.all(jnp.isfinite(low) & jnp.isfinite(high) & (high > low))):
        raise ValueError(f"algo='sac' needs a one-dimensional Box with finite bounds low < high, got shape "
                         f"{action_shape}, low {low}, high {high}")
    actor_module = SACActor(tuple(cfg.hidden_sizes), cfg.activation, action_dim)
    critic_module = TwinCritic(tuple(cfg.hidden_sizes), cfg.activation)

    def prepare(obs):
        # the MLP sees observations of any rank as flat feature vectors
        if len(obs_shape) == 1:
            return obs
        return obs.reshape(obs.shape[: obs.ndim - len(obs_shape)] + (-1,))

    def actor(actor_params, obs, uniform=False):
        mean, log_std = actor_module.apply(actor_params, prepare(obs))
        return SquashedGaussian(mean, log_std, low, high, jnp.asarray(uniform, bool))

    def critic(critic_params, obs, unit_action):
        return critic_module.apply(critic_params, prepare(obs), unit_action)

    def init_critic(key):
        obs = prepare(jnp.zeros((1,) + obs_shape, jnp.float32))
        return critic_module.init(key, obs, jnp.zeros((1, action_dim), jnp.float32))

    def init(key):
        # a fresh policy acts uniformly at random; the learner switches that off once learning starts
        network = actor_module.init(key, prepare(jnp.zeros((1,) + obs_shape, jnp.float32)))
        return SACParams(actor=network, random_actions=jnp.ones((), bool))

    def step(params: SACParams, obs, carry):
        dist = actor(params.actor, obs, params.random_actions)
        return dist, jnp.zeros(obs.shape[: obs.ndim - len(obs_shape)], jnp.float32), carry

    def value_step(params: SACParams, obs, carry):
        return jnp.zeros(obs.shape[: obs.ndim - len(obs_shape)], jnp.float32)

    def unroll(params, obs, carry, reset):
        return step(params, obs, carry)

    policy = Policy(init, lambda batch_shape: (), step, value_step, unroll, replay_length=1,
                    obs_shape=obs_shape, discrete=False, action_shape=action_shape)
    return policy, SACNets(actor, critic, init_critic, action_dim)
