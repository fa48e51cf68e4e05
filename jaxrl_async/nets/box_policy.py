"""A policy over a Box action space's unit box [-1, 1]^D that acts uniformly at random until learning
starts: the frame that SAC's squashed Gaussian and TD3's noisy deterministic actor share
(`nets/sac.py`, `nets/td3.py`; their twin critics are `nets/twin_critic.py`).

`make_box_policy(network_cfg, num_outputs, distribution, obs_shape, action_shape)` returns
`(policy, actor)`, the actor an `ActorMLP`:

- params are `BoxActorParams(actor, random_actions)`: the actor network and whether the rollout
  acts uniformly at random (the warm-up before `learning_starts`, which the learner switches
  off), so the rollout, the evaluator and the checkpoints use the one policy interface;
- `step` returns the learner's action distribution (`distribution(actor_output, uniform)`) and a
  zero value: these learners value actions with their critics, which the learner calls itself,
  so the rollout's GAE is unused;
- `actor(actor_params, obs)` is the actor network's output `[..., num_outputs]`, for the learner.

Actions: the actor acts in the unit box, mapped affinely onto the env's Box, low + (a + 1)
(high - low) / 2 (`UnitBox.to_env`; `UnitBox.to_unit` maps an env action back), so the critics see
the same range, and a noise scale means the same fraction of it, whatever the bounds. Each
learner's action distribution holds a `UnitBox`, which also draws the warm-up's uniform actions.
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces

from jaxrl_async.config import NetworkConfig
from jaxrl_async.nets.actor_critic import MLPTorso, Policy, flat_observations
from jaxrl_async.nets.orthogonal import orthogonal


@struct.dataclass
class BoxActorParams:
    actor: dict  # the actor network's flax params
    random_actions: jax.Array  # [] bool: the rollout acts uniformly over the Box (the warm-up)


class ActorMLP(nn.Module):
    """MLP torso -> a linear head of `num_outputs`, initialised small (a fresh actor's outputs are
    near 0, the middle of the box), which each learner reads as its distribution's parameters."""

    hidden_sizes: Sequence[int]
    activation: str
    num_outputs: int

    @nn.compact
    def __call__(self, obs):
        features = MLPTorso(self.hidden_sizes, self.activation, name="torso")(obs)
        return nn.Dense(self.num_outputs, kernel_init=orthogonal(0.01),
                        bias_init=nn.initializers.zeros, name="head")(features)


def check_box_learner(cfg: NetworkConfig, obs_shape, action_space,
                      algo: str) -> tuple[tuple[int, ...], tuple[int, ...], jax.Array, jax.Array]:
    """(obs shape, action shape, low, high) for a learner of this frame: a one-dimensional Box
    with finite bounds, a single-array observation, an MLP without a core; else a ValueError that
    says what to use instead (the learners for discrete actions, the flag)."""
    if not isinstance(action_space, spaces.Box):
        raise ValueError(f"algo={algo!r} needs a continuous Box action space, got {action_space!r}")
    action_shape = tuple(int(d) for d in action_space.shape)
    action_dim = int(np.prod(action_shape))
    low = jnp.broadcast_to(jnp.asarray(action_space.low, jnp.float32), action_shape).reshape(-1)
    high = jnp.broadcast_to(jnp.asarray(action_space.high, jnp.float32), action_shape).reshape(-1)
    if action_shape != (action_dim,) or not bool(jnp.all(jnp.isfinite(low) & jnp.isfinite(high) & (high > low))):
        raise ValueError(f"algo={algo!r} needs a one-dimensional Box with finite bounds low < high, got shape "
                         f"{action_shape}, low {low}, high {high}")
    if cfg.core != "none":
        raise ValueError(f"core={cfg.core!r} is not supported with algo={algo!r} (the replay holds single "
                         "transitions, not sequences): use --core none")
    if cfg.torso == "cnn":
        raise ValueError(f"torso='cnn' is not supported with algo={algo!r} (its critics take the observation and "
                         "the action together through the MLP): use --torso mlp or auto")
    if not isinstance(obs_shape, tuple) or not all(isinstance(d, (int, np.integer)) for d in obs_shape):
        raise ValueError(f"algo={algo!r} needs a single-array observation, got a Dict / Tuple observation of "
                         f"shapes {obs_shape!r}")
    return tuple(int(d) for d in obs_shape), action_shape, low, high


@struct.dataclass
class UnitBox:
    """The env's Box seen from the unit box [-1, 1]^D, and the warm-up's switch.

    `low`, `high` `[D]` broadcast against the action `[..., D]`; while `uniform` (`[]` bool) is on,
    `act` takes the warm-up's uniform action over the box instead of the actor's.
    """

    low: jax.Array  # [D]
    high: jax.Array  # [D]
    uniform: jax.Array  # [] bool

    def to_env(self, unit_action: jax.Array) -> jax.Array:
        """The unit action a in [-1, 1]^D as the env's action, low + (a + 1) (high - low) / 2."""
        return self.low + (unit_action + 1.0) * 0.5 * (self.high - self.low)

    def to_unit(self, action: jax.Array) -> jax.Array:
        """The env's action back in the unit box: `to_env`'s inverse."""
        return 2.0 * (action - self.low) / (self.high - self.low) - 1.0

    def draw(self, key: jax.Array, like: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(standard-normal noise, a uniform point of [-1, 1]^D for the warm-up), each of `like`'s
        shape and dtype: what a distribution's `sample_from_draw` turns into its action."""
        gauss_key, uniform_key = jax.random.split(key)
        return (jax.random.normal(gauss_key, like.shape, like.dtype),
                jax.random.uniform(uniform_key, like.shape, like.dtype, -1.0, 1.0))

    def act(self, unit_action: jax.Array, warm_up_action: jax.Array) -> jax.Array:
        """The env action: the actor's unit action, or in the warm-up the uniform one."""
        return self.to_env(jnp.where(self.uniform, warm_up_action, unit_action))


def uniform_from_noise(noise: jax.Array) -> jax.Array:
    """The warm-up's unit action for a standard-normal `noise` (`exploration.py` correlates it over
    time): its normal CDF mapped onto [-1, 1], uniform as a `UnitBox.draw`'s and correlated as the
    noise (white warm-up actions explore as little as white noise)."""
    return 2.0 * jax.scipy.special.ndtr(noise) - 1.0


def make_box_policy(cfg: NetworkConfig, num_outputs: int, distribution: Callable, obs_shape: tuple[int, ...],
                    action_shape: tuple[int, ...]) -> tuple[Policy, Callable]:
    """The policy acting with `distribution(actor output, uniform)`, and the learner's
    `actor(actor_params, obs)`; see the module docstring."""
    actor_module = ActorMLP(tuple(cfg.hidden_sizes), cfg.activation, num_outputs)
    prepare = flat_observations(obs_shape)

    def actor(actor_params, obs):
        return actor_module.apply(actor_params, prepare(obs))

    def init(key):
        # a fresh policy acts uniformly at random; the learner switches that off once learning starts
        network = actor_module.init(key, prepare(jnp.zeros((1,) + obs_shape, jnp.float32)))
        return BoxActorParams(actor=network, random_actions=jnp.ones((), bool))

    def batch_shape(obs):
        return obs.shape[: obs.ndim - len(obs_shape)]

    def step(params: BoxActorParams, obs, carry):
        dist = distribution(actor(params.actor, obs), params.random_actions)
        return dist, jnp.zeros(batch_shape(obs), jnp.float32), carry

    def value_step(params: BoxActorParams, obs, carry):
        return jnp.zeros(batch_shape(obs), jnp.float32)

    def unroll(params, obs, carry, reset):
        return step(params, obs, carry)

    policy = Policy(init, lambda batch_shape: (), step, value_step, unroll, replay_length=1,
                    obs_shape=obs_shape, discrete=False, action_shape=action_shape)
    return policy, actor
