"""The action distributions the policies emit, as small pytrees: the actor-critic's four, and
the Q-network's epsilon-greedy one.

Each offers `sample(key)`, `log_prob(action)`, `entropy()` and `mode()` (the greedy
action). `sample(key)` is `sample_from_draw(draw(key))`: `draw` makes the sample's randomness
from the key and the distribution's shapes alone (never its parameters), so a host actor can
draw a whole fragment's in one call before it (`rollout/host.py`) and pay no random-number work
in each step's act. The Gaussians also offer `sample_from_noise(eps)`, the action for a given
standard-normal draw (`exploration.py`); `TanhGaussian`'s actions are unsquashed (its
docstring). Batch shapes follow the parameters: logits `[..., A]`, mean `[..., D]`,
multi-categorical logits `[..., sum(nvec)]`.

Action masks (an env's legal actions, `legal_actions`): a masked categorical is the categorical
of `mask_scores(logits, legal)`, whose illegal logits are the dtype's lowest finite number. Their
probabilities are then exactly 0 (`exp` underflows; in sampling the Gumbel noise, at most ~17,
never lifts one above a legal logit), so they are never sampled, and log-probabilities and
entropies are those of the distribution over the legal actions alone. A finite number rather than
-inf keeps every term finite: the entropy's 0 * log 0 is 0 * (-3.4e38) = 0 (with -inf it is NaN),
and the gradient through `where` reaches the legal logits only. `EpsilonGreedy` takes `legal` too:
greedy and random actions both among the legal ones.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

_LOG_2PI = math.log(2.0 * math.pi)
# Gauss-Hermite nodes and weights for E[f(u)], u ~ N(mean, std): sum_i w_i f(mean + sqrt(2) std x_i) / sqrt(pi)
_HERMITE_NODES, _HERMITE_WEIGHTS = (np.asarray(a, np.float32) for a in np.polynomial.hermite.hermgauss(16))


def legal_actions(action_mask: jax.Array, nvec: tuple[int, ...] | None = None) -> jax.Array:
    """`[..., A]` bool, the legal actions of an env's action mask `[..., A]` (1 legal, 0 illegal).

    A (sub-)action with no legal choice at all counts every choice legal: an env may show an
    all-zero mask on an observation no action is taken from (an episode's last), and a
    distribution over nothing is no distribution. `nvec`: a MultiDiscrete's sub-action sizes, whose
    masks lie side by side (A = sum(nvec)); each sub-action is checked on its own.
    """
    legal = jnp.asarray(action_mask) > 0.5
    if nvec is None:
        return legal | ~jnp.any(legal, axis=-1, keepdims=True)
    bounds = list(itertools.accumulate(nvec))[:-1]
    return jnp.concatenate([legal_actions(part) for part in jnp.split(legal, bounds, axis=-1)], axis=-1)


def mask_scores(scores: jax.Array, legal: jax.Array | None) -> jax.Array:
    """`scores` `[..., A]` (logits or Q-values) with each illegal action's set to the dtype's lowest
    finite number, so that no softmax, argmax or max picks it; `scores` itself where `legal` is None
    (an env without a mask)."""
    if legal is None:
        return scores
    return jnp.where(legal, scores, jnp.finfo(scores.dtype).min)


def pick(values: jax.Array, index: jax.Array) -> jax.Array:
    """`values[..., index]` `[...]` from `values` `[..., A]` and int `index` `[...]`: the one chosen
    entry of each row, kept by a select and summed with the zeros beside it (the same number:
    x + 0 is x). A gather's gradient is a scatter-add, a loop of its own on a CPU; a select's is a
    select that fuses with its neighbours (PPO's minibatch step: one op fewer, and a faster one)."""
    chosen = index[..., None].astype(jnp.int32) == jnp.arange(values.shape[-1], dtype=jnp.int32)
    return jnp.sum(jnp.where(chosen, values, jnp.zeros_like(values)), axis=-1)


@struct.dataclass
class Categorical:
    logits: jax.Array  # [..., A] unnormalised log-probabilities

    def draw(self, key: jax.Array) -> jax.Array:
        """Gumbel noise `[..., A]`: `sample_from_draw` is then `jax.random.categorical(key, logits)`."""
        return jax.random.gumbel(key, self.logits.shape, self.logits.dtype)

    def sample_from_draw(self, gumbel: jax.Array) -> jax.Array:
        return jnp.argmax(gumbel + self.logits, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def log_prob(self, action: jax.Array) -> jax.Array:
        return pick(jax.nn.log_softmax(self.logits, axis=-1), action)

    def entropy(self) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits, axis=-1)
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1)


@struct.dataclass
class MultiCategorical:
    """Independent categoricals, one per sub-action (a MultiDiscrete action space).

    The logits of all sub-actions lie side by side, `[..., sum(nvec)]`; an action is
    `[..., len(nvec)]` int32. log-prob and entropy are the sums over the sub-actions.
    """

    logits: jax.Array  # [..., sum(nvec)]
    nvec: tuple[int, ...] = struct.field(pytree_node=False)

    def _parts(self) -> list[Categorical]:
        bounds = list(itertools.accumulate(self.nvec))[:-1]
        return [Categorical(logits=part) for part in jnp.split(self.logits, bounds, axis=-1)]

    def draw(self, key: jax.Array) -> tuple[jax.Array, ...]:
        keys = jax.random.split(key, len(self.nvec))
        batch = self.logits.shape[:-1]  # shapes only (`_parts` splits the values): each part's own draw
        return tuple(Categorical(jax.ShapeDtypeStruct((*batch, n), self.logits.dtype)).draw(k)
                     for n, k in zip(self.nvec, keys))

    def sample_from_draw(self, draw: tuple[jax.Array, ...]) -> jax.Array:
        return jnp.stack([part.sample_from_draw(d) for part, d in zip(self._parts(), draw)], axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def log_prob(self, action: jax.Array) -> jax.Array:
        return sum(part.log_prob(action[..., i]) for i, part in enumerate(self._parts()))

    def entropy(self) -> jax.Array:
        return sum(part.entropy() for part in self._parts())

    def mode(self) -> jax.Array:
        return jnp.stack([part.mode() for part in self._parts()], axis=-1)


@struct.dataclass
class DiagGaussian:
    mean: jax.Array  # [..., D]
    log_std: jax.Array  # [..., D] (broadcast from a state-independent [D] parameter)

    def draw(self, key: jax.Array) -> jax.Array:
        return jax.random.normal(key, self.mean.shape, self.mean.dtype)

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def sample_from_noise(self, noise: jax.Array) -> jax.Array:
        """The action for a standard-normal `noise` [..., D] (`exploration.py` correlates it)."""
        return self.mean + jnp.exp(self.log_std) * noise

    sample_from_draw = sample_from_noise  # the draw is that noise

    def log_prob(self, action: jax.Array) -> jax.Array:
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z * z - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(self.log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)

    def mode(self) -> jax.Array:
        return self.mean


def tanh_log_det(u: jax.Array) -> jax.Array:
    """log |d tanh(u) / du| = log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), exact and finite
    for large |u| (where 1 - tanh(u)^2 rounds to 0)."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


@struct.dataclass
class TanhGaussian:
    """a = tanh(u), u ~ N(mean, std^2) per dimension: a Gaussian squashed into (-1, 1)^D, with a
    state-dependent scale (Brax's `NormalTanhDistribution`: std = softplus(.) + min_std).

    Its actions are the Gaussian's u, unsquashed: the env applies the tanh (`envs.wrappers.
    SquashAction`), as `ClipAction` applies the clip to `DiagGaussian`'s. The rollout records u, so
    the learner's ratio compares densities of the same u; recovering u as atanh(a) from a stored
    squashed action loses it wherever tanh(u) rounds to +-1 (|u| > ~9 in float32).

    `log_prob(u)` and `entropy()` are those of the squashed action a, by the change of variables:

        log pi(a) = sum_d [ log N(u_d; mean_d, std_d) - log(1 - tanh(u_d)^2) ]
        H[a]      = sum_d [ H[N(mean_d, std_d)] + E_u log(1 - tanh(u_d)^2) ]

    The expectation has no closed form; it is computed by 16-point Gauss-Hermite quadrature, a
    deterministic estimate (Brax's is one sampled u per state): within 0.003 nats a dimension of
    the exact integral for stds up to 1.5, 0.02 at std 3, where the tanh folds most of the mass onto
    the bounds (and the entropy it costs keeps a policy from going there); beyond, the error grows
    (up to 0.1 at std 5, 0.35 at std 10, over means in [-3, 3]), and nothing caps the std. The
    affine map from (-1, 1) to the env's bounds adds a constant to both, which moves no gradient
    and is left out (as SAC's).
    """

    mean: jax.Array  # [..., D]
    std: jax.Array  # [..., D] > 0

    def draw(self, key: jax.Array) -> jax.Array:
        return jax.random.normal(key, self.mean.shape, self.mean.dtype)

    def sample_from_noise(self, noise: jax.Array) -> jax.Array:
        """The (unsquashed) action u for a standard-normal `noise` [..., D]."""
        return self.mean + self.std * noise

    sample_from_draw = sample_from_noise  # the draw is that noise

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def log_prob(self, action: jax.Array) -> jax.Array:
        """The log-density of the squashed action tanh(`action`), from the unsquashed `action` u."""
        z = (action - self.mean) / self.std
        return jnp.sum(-0.5 * z * z - jnp.log(self.std) - 0.5 * _LOG_2PI - tanh_log_det(action), axis=-1)

    def entropy(self) -> jax.Array:
        nodes = self.mean[..., None] + math.sqrt(2.0) * self.std[..., None] * _HERMITE_NODES
        expected_log_det = jnp.sum(tanh_log_det(nodes) * _HERMITE_WEIGHTS, axis=-1) / math.sqrt(math.pi)
        return jnp.sum(jnp.log(self.std) + 0.5 * (1.0 + _LOG_2PI) + expected_log_det, axis=-1)

    def mode(self) -> jax.Array:
        """The Gaussian's mean, whose tanh is the deterministic action (Brax's mode)."""
        return self.mean


@struct.dataclass
class EpsilonGreedy:
    """The greedy action of `q_values` with probability 1 - epsilon, else a uniform one; with
    `legal`, both among the legal actions only."""

    q_values: jax.Array  # [..., A]
    epsilon: jax.Array  # [] (or broadcastable to the batch shape)
    legal: jax.Array | None = None  # [..., A] bool (`legal_actions`); None: every action is legal

    def _probs(self) -> jax.Array:
        num_actions = self.q_values.shape[-1]
        greedy = jax.nn.one_hot(self.mode(), num_actions, dtype=self.q_values.dtype)
        epsilon = jnp.asarray(self.epsilon, self.q_values.dtype)[..., None]
        if self.legal is None:
            return (1.0 - epsilon) * greedy + epsilon / num_actions
        legal = self.legal.astype(self.q_values.dtype)
        return (1.0 - epsilon) * greedy + epsilon * legal / jnp.sum(legal, axis=-1, keepdims=True)

    def draw(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(a uniform number per state, a uniformly drawn action per state); with `legal`, a uniform
        number per action in place of the action (the random action is the legal one whose number
        is largest: uniform over the legal ones, and the draw still needs only the shapes)."""
        explore_key, action_key = jax.random.split(key)
        batch_shape = self.q_values.shape[:-1]
        if self.legal is None:
            return (jax.random.uniform(explore_key, batch_shape),
                    jax.random.randint(action_key, batch_shape, 0, self.q_values.shape[-1]))
        return jax.random.uniform(explore_key, batch_shape), jax.random.uniform(action_key, self.q_values.shape)

    def sample_from_draw(self, draw: tuple[jax.Array, jax.Array]) -> jax.Array:
        explore_number, drawn = draw
        random_action = drawn if self.legal is None else jnp.argmax(jnp.where(self.legal, drawn, -1.0), axis=-1)
        return jnp.where(explore_number < self.epsilon, random_action, self.mode())

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_draw(self.draw(key))

    def log_prob(self, action: jax.Array) -> jax.Array:
        return jnp.log(pick(self._probs(), action))

    def entropy(self) -> jax.Array:
        probs = self._probs()
        return -jnp.sum(jnp.where(probs > 0, probs * jnp.log(jnp.where(probs > 0, probs, 1.0)), 0.0), axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(mask_scores(self.q_values, self.legal), axis=-1)
