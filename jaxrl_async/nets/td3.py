"""TD3's deterministic actor as an `actor_critic.Policy`, acting with Gaussian exploration noise, and
its twin critics (SAC's, `nets/sac.py`).

`make_td3_policy(network_cfg, obs_shape, action_space, exploration_noise)` returns `(policy, nets)`:

- params are `TD3Params(actor, random_actions)`: the actor network and whether the rollout acts
  uniformly at random (the warm-up before `learning_starts`, which the learner switches off), so
  the rollout, the evaluator and the checkpoints use the one policy interface;
- `step` returns a `NoisyDeterministic` whose `sample` is the explored env action and whose
  `mode()` is the actor's own action (what the evaluator takes), and a zero value: TD3 values
  actions with its critics, which the learner calls itself (`nets.critic`);
- `nets.actor(actor_params, obs) -> [..., D]` is the actor's unit action mu(s) = tanh(f(s)) in
  [-1, 1]^D, `nets.critic(critic_params, obs, unit_action) -> [2, ...]` both critics' Q, and
  `nets.to_unit(env_action)` maps an env action back into [-1, 1]^D.

Actions live in the unit box [-1, 1]^D, mapped affinely onto the env's Box, low + (a + 1)
(high - low) / 2, so every noise scale is a fraction of half the action range whatever the
bounds (Fujimoto et al. 2018 give theirs as fractions of `max_action`; Stable-Baselines3 adds its
noise to the rescaled action alike). Acting explores with

    a = clip(mu(s) + sigma * eps, -1, 1),   eps ~ N(0, I)   (or eps_t correlated: `exploration.py`)

with sigma the `--exploration-noise`.
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
from jaxrl_async.nets.sac import TwinCritic

_LOG_2PI = math.log(2.0 * math.pi)


@struct.dataclass
class TD3Params:
    actor: dict  # the actor network's flax params
    random_actions: jax.Array  # [] bool: the rollout acts uniformly over the Box (the warm-up)


@struct.dataclass
class NoisyDeterministic:
    """The deterministic action `unit_mean` explored with clipped Gaussian noise of std
    `noise_std`, mapped onto [low, high]; see the module docstring.

    `low`, `high` broadcast against the action `[..., D]`; `uniform` ([] bool) makes `sample`
    draw uniformly over the box instead (the warm-up).
    """

    unit_mean: jax.Array  # [..., D] the actor's action mu(s) in [-1, 1]
    noise_std: jax.Array  # [] the exploration noise's standard deviation, in unit-box units
    low: jax.Array  # [D]
    high: jax.Array  # [D]
    uniform: jax.Array  # [] bool

    def to_env(self, unit_action: jax.Array) -> jax.Array:
        return self.low + (unit_action + 1.0) * 0.5 * (self.high - self.low)

    def to_unit(self, action: jax.Array) -> jax.Array:
        return 2.0 * (action - self.low) / (self.high - self.low) - 1.0

    def _explored(self, noise: jax.Array) -> jax.Array:
        """clip(mu + sigma * noise, -1, 1): the unit action for a standard-normal `noise`."""
        return jnp.clip(self.unit_mean + self.noise_std * noise, -1.0, 1.0)

    def draw(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(the standard-normal exploration noise, a uniform point of [-1, 1]^D for the warm-up)."""
        gauss_key, uniform_key = jax.random.split(key)
        return (jax.random.normal(gauss_key, self.unit_mean.shape, self.unit_mean.dtype),
                jax.random.uniform(uniform_key, self.unit_mean.shape, self.unit_mean.dtype, -1.0, 1.0))

    def sample_from_draw(self, draw: tuple[jax.Array, jax.Array]) -> jax.Array:
        noise, random = draw
        return self.to_env(jnp.where(self.uniform, random, self._explored(noise)))

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def sample_from_noise(self, noise: jax.Array) -> jax.Array:
        """The env action for a standard-normal `noise` [..., D] (`exploration.py` correlates it
        over time). In the warm-up it is the noise's normal CDF mapped onto the box: uniform, and
        correlated alike, as SAC's (`SquashedGaussian.sample_from_noise`)."""
        uniform = 2.0 * jax.scipy.special.ndtr(noise) - 1.0
        return self.to_env(jnp.where(self.uniform, uniform, self._explored(noise)))

    def log_prob(self, action: jax.Array) -> jax.Array:
        """The Gaussian exploration density N(mu, sigma^2) at the unit action (the clip's point
        masses at the box's faces left out). The rollout records it; TD3 learns from none."""
        z = (self.to_unit(action) - self.unit_mean) / self.noise_std
        return jnp.sum(-0.5 * z * z - jnp.log(self.noise_std) - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        """The exploration Gaussian's entropy (before the clip), in unit-box units."""
        return jnp.sum(jnp.broadcast_to(jnp.log(self.noise_std) + 0.5 * (1.0 + _LOG_2PI), self.unit_mean.shape),
                       axis=-1)

    def mode(self) -> jax.Array:
        """The greedy action: the actor's own, mu(s), in the env's bounds."""
        return self.to_env(self.unit_mean)


class DeterministicActor(nn.Module):
    """MLP torso -> tanh(Dense): the unit action mu(s) in [-1, 1]^D."""

    hidden_sizes: Sequence[int]
    activation: str
    action_dim: int

    @nn.compact
    def __call__(self, obs):
        features = MLPTorso(self.hidden_sizes, self.activation, name="torso")(obs)
        out = nn.Dense(self.action_dim, kernel_init=nn.initializers.orthogonal(0.01),
                       bias_init=nn.initializers.zeros, name="head")(features)
        return jnp.tanh(out)


class TD3Nets(NamedTuple):
    actor: Callable  # (actor_params, obs) -> [..., D] unit action mu(s)
    critic: Callable  # (critic_params, obs, unit_action) -> [2, ...] Q-values
    init_critic: Callable  # key -> critic params
    to_unit: Callable  # env action [..., D] -> unit action [..., D]
    action_dim: int


def check_box(action_space, algo: str) -> tuple[tuple[int, ...], jax.Array, jax.Array]:
    """(action shape, low, high) of a one-dimensional Box with finite bounds; else a ValueError
    that names the learners for discrete actions."""
    if not isinstance(action_space, spaces.Box):
        raise ValueError(f"algo={algo!r} needs a continuous Box action space, got {action_space!r}: use --algo ppo "
                         f"(or a2c, reinforce, impala{', dqn, pqn' if isinstance(action_space, spaces.Discrete) else ''})")
    action_shape = tuple(int(d) for d in action_space.shape)
    action_dim = int(np.prod(action_shape))
    low = jnp.broadcast_to(jnp.asarray(action_space.low, jnp.float32), action_shape).reshape(-1)
    high = jnp.broadcast_to(jnp.asarray(action_space.high, jnp.float32), action_shape).reshape(-1)
    if action_shape != (action_dim,) or not bool(jnp.all(jnp.isfinite(low) & jnp.isfinite(high) & (high > low))):
        raise ValueError(f"algo={algo!r} needs a one-dimensional Box with finite bounds low < high, got shape "
                         f"{action_shape}, low {low}, high {high}")
    return action_shape, low, high


def make_td3_policy(cfg: NetworkConfig, obs_shape: Sequence[int], action_space,
                    exploration_noise: float) -> tuple[Policy, TD3Nets]:
    """The noisy deterministic policy and TD3's networks for a Box action space."""
    action_shape, low, high = check_box(action_space, "td3")
    if cfg.core != "none":
        raise ValueError(f"core={cfg.core!r} is not supported with algo='td3' (the replay holds single "
                         "transitions, not sequences): use --core none")
    if cfg.torso == "cnn":
        raise ValueError("torso='cnn' is not supported with algo='td3' (its critics take the observation and the "
                         "action together through the MLP): use --torso mlp or auto")
    if not isinstance(obs_shape, tuple) or not all(isinstance(d, (int, np.integer)) for d in obs_shape):
        raise ValueError(f"algo='td3' needs a single-array observation, got a Dict / Tuple observation of shapes "
                         f"{obs_shape!r}")
    obs_shape = tuple(int(d) for d in obs_shape)
    action_dim = action_shape[0]
    actor_module = DeterministicActor(tuple(cfg.hidden_sizes), cfg.activation, action_dim)
    critic_module = TwinCritic(tuple(cfg.hidden_sizes), cfg.activation)
    noise_std = jnp.float32(exploration_noise)

    def prepare(obs):
        # the MLP sees observations of any rank as flat feature vectors
        if len(obs_shape) == 1:
            return obs
        return obs.reshape(obs.shape[: obs.ndim - len(obs_shape)] + (-1,))

    def actor(actor_params, obs):
        return actor_module.apply(actor_params, prepare(obs))

    def critic(critic_params, obs, unit_action):
        return critic_module.apply(critic_params, prepare(obs), unit_action)

    def to_unit(action):
        return 2.0 * (action - low) / (high - low) - 1.0

    def init_critic(key):
        obs = prepare(jnp.zeros((1,) + obs_shape, jnp.float32))
        return critic_module.init(key, obs, jnp.zeros((1, action_dim), jnp.float32))

    def init(key):
        # a fresh policy acts uniformly at random; the learner switches that off once learning starts
        network = actor_module.init(key, prepare(jnp.zeros((1,) + obs_shape, jnp.float32)))
        return TD3Params(actor=network, random_actions=jnp.ones((), bool))

    def batch_shape(obs):
        return obs.shape[: obs.ndim - len(obs_shape)]

    def step(params: TD3Params, obs, carry):
        dist = NoisyDeterministic(actor(params.actor, obs), noise_std, low, high, params.random_actions)
        return dist, jnp.zeros(batch_shape(obs), jnp.float32), carry

    def value_step(params: TD3Params, obs, carry):
        return jnp.zeros(batch_shape(obs), jnp.float32)

    def unroll(params, obs, carry, reset):
        return step(params, obs, carry)

    policy = Policy(init, lambda batch_shape: (), step, value_step, unroll, replay_length=1,
                    obs_shape=obs_shape, discrete=False, action_shape=action_shape)
    return policy, TD3Nets(actor, critic, init_critic, to_unit, action_dim)
