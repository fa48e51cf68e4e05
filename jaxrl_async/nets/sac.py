"""SAC's actor as an `actor_critic.Policy` (a tanh-squashed Gaussian), and its twin critics.

`make_sac_policy(network_cfg, obs_shape, action_space)` returns `(policy, nets)`:

- params are `box_policy.BoxActorParams(actor, random_actions)`, the actor network and the
  warm-up's switch (`nets/box_policy.py`, the frame SAC shares with TD3);
- `step` returns a `SquashedGaussian` whose `sample` is the env action (its `mode()`, the
  squashed mean, is what the evaluator takes) and a zero value: SAC values actions with its
  critics, which the learner calls itself (`nets.critic`), so the rollout's GAE is unused;
- `nets.actor(actor_params, obs) -> SquashedGaussian` and `nets.critic(critic_params, obs,
  unit_action) -> [2, ...]` (both critics' Q, `nets/twin_critic.py`) are the learner's.

Actions: the actor's Gaussian sample u is squashed, a = tanh(u) in [-1, 1]^D, then mapped
affinely onto the env's Box, low + (a + 1) (high - low) / 2. The critics take the unit action
a (the replay stores the env action; `UnitBox.to_unit` maps it back), so the critics see the same
range whatever the bounds. `log_prob` is the density of the unit action a, with the tanh
correction (Haarnoja et al. 2018, appendix C; `distributions.tanh_log_det`):

    log pi(a|s) = sum_d [ log N(u_d; mean_d, std_d) - log(1 - tanh(u_d)^2) ]

The affine map to the bounds would add the constant -sum_d log((high - low) / 2), which moves
no gradient; leaving it out makes the default target entropy -|A| mean the same for every
bound (as Stable-Baselines3, which also acts in [-1, 1] and rescales).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.config import NetworkConfig
from jaxrl_async.core.distributions import tanh_log_det
from jaxrl_async.nets import box_policy
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.nets.twin_critic import make_twin_critic

_LOG_2PI = math.log(2.0 * math.pi)
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # the actor's log-std is clipped to this range (as SB3)


@struct.dataclass
class SquashedGaussian:
    """tanh(N(mean, std)) mapped onto the env's Box (`box`); see the module docstring.

    In the warm-up (`box.uniform`) `sample` draws uniformly over the box instead (log_prob and
    mode are the Gaussian's either way).
    """

    mean: jax.Array  # [..., D]
    log_std: jax.Array  # [..., D]
    box: box_policy.UnitBox

    def _pre_squash(self, noise: jax.Array) -> jax.Array:
        """u = mean + std * noise, the Gaussian sample the tanh squashes."""
        return self.mean + jnp.exp(self.log_std) * noise

    def sample_unit(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A reparameterised sample: (unit action tanh(u) [..., D], its log-density [...])."""
        noise = jax.random.normal(key, self.mean.shape, self.mean.dtype)
        u = self._pre_squash(noise)
        log_prob = jnp.sum(-0.5 * noise * noise - self.log_std - 0.5 * _LOG_2PI - tanh_log_det(u), axis=-1)
        return jnp.tanh(u), log_prob

    def draw(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(the Gaussian's standard-normal noise, a uniform point of [-1, 1]^D for the warm-up)."""
        return self.box.draw(key, self.mean)

    def sample_from_draw(self, draw: tuple[jax.Array, jax.Array]) -> jax.Array:
        noise, random = draw
        unit = jnp.tanh(self._pre_squash(noise))  # `sample_unit`'s action for this noise
        return self.box.act(unit, random)

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def sample_from_noise(self, noise: jax.Array) -> jax.Array:
        """The env action for a standard-normal `noise` [..., D] (`exploration.py` correlates it
        over time); in the warm-up, `box_policy.uniform_from_noise`'s."""
        return self.box.act(jnp.tanh(self._pre_squash(noise)), box_policy.uniform_from_noise(noise))

    def log_prob(self, action: jax.Array) -> jax.Array:
        """The unit action's log-density, from the env action (clipped inside the open box to
        invert the tanh: the rollout records it; the learner uses `sample_unit`'s)."""
        unit = jnp.clip(self.box.to_unit(action), -1.0 + 1e-6, 1.0 - 1e-6)
        u = jnp.arctanh(unit)
        z = (u - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z * z - self.log_std - 0.5 * _LOG_2PI - tanh_log_det(u), axis=-1)

    def entropy(self) -> jax.Array:
        """The pre-squash Gaussian's entropy (the squashed one has no closed form; SAC's own
        estimate is -log pi of its samples, the learner's `entropy` metric)."""
        return jnp.sum(self.log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)

    def mode(self) -> jax.Array:
        """The deterministic action: the squashed mean, in the env's bounds."""
        return self.box.to_env(jnp.tanh(self.mean))


def gaussian_head(actor_output: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The actor's `[..., 2D]` output as the pre-squash Gaussian's mean and log-std (clipped)."""
    mean, log_std = jnp.split(actor_output, 2, axis=-1)
    return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)


class SACNets(NamedTuple):
    actor: Callable  # (actor_params, obs) -> SquashedGaussian (uniform off)
    critic: Callable  # (critic_params, obs, unit_action) -> [2, ...] Q-values
    init_critic: Callable  # key -> critic params
    action_dim: int


def make_sac_policy(cfg: NetworkConfig, obs_shape: Sequence[int], action_space) -> tuple[Policy, SACNets]:
    """The squashed-Gaussian policy and SAC's networks for a Box action space."""
    obs_shape, action_shape, low, high = box_policy.check_box_learner(cfg, obs_shape, action_space, "sac")
    action_dim = action_shape[0]
    critic, init_critic = make_twin_critic(cfg, obs_shape, action_dim)

    def squashed_gaussian(actor_output, uniform):
        mean, log_std = gaussian_head(actor_output)
        return SquashedGaussian(mean, log_std, box_policy.UnitBox(low, high, jnp.asarray(uniform, bool)))

    policy, network = box_policy.make_box_policy(cfg, 2 * action_dim, squashed_gaussian, obs_shape, action_shape)

    def actor(actor_params, obs, uniform=False):
        return squashed_gaussian(network(actor_params, obs), uniform)

    return policy, SACNets(actor, critic, init_critic, action_dim)
