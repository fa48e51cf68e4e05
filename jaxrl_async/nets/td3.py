"""TD3's deterministic actor as an `actor_critic.Policy`, acting with Gaussian exploration noise, and
its twin critics (`nets/twin_critic.py`, as SAC's).

`make_td3_policy(network_cfg, obs_shape, action_space, exploration_noise)` returns `(policy, nets)`:

- params are `box_policy.BoxActorParams(actor, random_actions)`, the actor network and the
  warm-up's switch (`nets/box_policy.py`, the frame TD3 shares with SAC);
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

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.config import NetworkConfig
from jaxrl_async.nets import box_policy
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.nets.twin_critic import make_twin_critic

_LOG_2PI = math.log(2.0 * math.pi)


@struct.dataclass
class NoisyDeterministic:
    """The deterministic action `unit_mean` explored with clipped Gaussian noise of std
    `noise_std`, mapped onto the env's Box (`box`); see the module docstring.

    In the warm-up (`box.uniform`) `sample` draws uniformly over the box instead.
    """

    unit_mean: jax.Array  # [..., D] the actor's action mu(s) in [-1, 1]
    noise_std: jax.Array  # [] the exploration noise's standard deviation, in unit-box units
    box: box_policy.UnitBox

    def _explored(self, noise: jax.Array) -> jax.Array:
        """clip(mu + sigma * noise, -1, 1): the unit action for a standard-normal `noise`."""
        return jnp.clip(self.unit_mean + self.noise_std * noise, -1.0, 1.0)

    def draw(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(the standard-normal exploration noise, a uniform point of [-1, 1]^D for the warm-up)."""
        return self.box.draw(key, self.unit_mean)

    def sample_from_draw(self, draw: tuple[jax.Array, jax.Array]) -> jax.Array:
        noise, random = draw
        return self.box.act(self._explored(noise), random)

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def sample_from_noise(self, noise: jax.Array) -> jax.Array:
        """The env action for a standard-normal `noise` [..., D] (`exploration.py` correlates it
        over time); in the warm-up, `box_policy.uniform_from_noise`'s."""
        return self.box.act(self._explored(noise), box_policy.uniform_from_noise(noise))

    def log_prob(self, action: jax.Array) -> jax.Array:
        """The Gaussian exploration density N(mu, sigma^2) at the unit action (the clip's point
        masses at the box's faces left out). The rollout records it; TD3 learns from none."""
        z = (self.box.to_unit(action) - self.unit_mean) / self.noise_std
        return jnp.sum(-0.5 * z * z - jnp.log(self.noise_std) - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        """The exploration Gaussian's entropy (before the clip), in unit-box units."""
        return jnp.sum(jnp.broadcast_to(jnp.log(self.noise_std) + 0.5 * (1.0 + _LOG_2PI), self.unit_mean.shape),
                       axis=-1)

    def mode(self) -> jax.Array:
        """The greedy action: the actor's own, mu(s), in the env's bounds."""
        return self.box.to_env(self.unit_mean)


class TD3Nets(NamedTuple):
    actor: Callable  # (actor_params, obs) -> [..., D] unit action mu(s)
    critic: Callable  # (critic_params, obs, unit_action) -> [2, ...] Q-values
    init_critic: Callable  # key -> critic params
    to_unit: Callable  # env action [..., D] -> unit action [..., D]
    action_dim: int


def make_td3_policy(cfg: NetworkConfig, obs_shape: Sequence[int], action_space,
                    exploration_noise: float) -> tuple[Policy, TD3Nets]:
    """The noisy deterministic policy and TD3's networks for a Box action space."""
    obs_shape, action_shape, low, high = box_policy.check_box_learner(cfg, obs_shape, action_space, "td3")
    action_dim = action_shape[0]
    critic, init_critic = make_twin_critic(cfg, obs_shape, action_dim)
    noise_std = jnp.float32(exploration_noise)

    def noisy_deterministic(actor_output, uniform):
        # the deterministic actor: mu(s) = tanh(the actor's output), in [-1, 1]^D
        return NoisyDeterministic(jnp.tanh(actor_output), noise_std, box_policy.UnitBox(low, high, uniform))

    policy, network = box_policy.make_box_policy(cfg, action_dim, noisy_deterministic, obs_shape, action_shape)

    def actor(actor_params, obs):
        return jnp.tanh(network(actor_params, obs))

    # the replay's env actions back in the unit box (the warm-up's switch plays no part in it)
    to_unit = box_policy.UnitBox(low, high, jnp.zeros((), bool)).to_unit
    return policy, TD3Nets(actor, critic, init_critic, to_unit, action_dim)
