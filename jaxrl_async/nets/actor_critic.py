"""flax linen actor-critic: separate actor and critic towers, orthogonal init; optionally
a recurrent core (GRU or LSTM).

`make_policy(network_cfg, obs_shape, action_space)` returns a `Policy` of pure
functions over a params pytree. Every policy, feedforward or recurrent, has the same
interface around a recurrent state `carry` (the empty tuple for a feedforward policy,
which costs nothing to pass around):

- `initial_carry(batch_shape) -> carry`: the state at an episode's start, leaves `[*batch_shape, ...]`;
- `step(params, obs, carry) -> (distribution, value, carry)`: one time step, as the
  rollout and the evaluator act;
- `value_step(params, obs, carry) -> value`: the critic alone at one step;
- `unroll(params, obs [N, L, ...], carry, reset [N, L]) -> (distribution, value, carry_after)`:
  N sequences of L steps from their initial carries (leaves `[N, ...]`), the carry reset
  to its initial value wherever `reset` is true (an episode starts), as the learner
  replays them; outputs are `[N, L]` like `reset`, and `carry_after` (leaves `[N, L, ...]`)
  is the carry after each step, to value the step's next observation with `value_step`.
  Sequences come first, as the learner shuffles them (a feedforward policy applies its
  network to the array as laid out, and also takes single steps `[N, ...]`);
- `replay_length`: how many consecutive steps the learner must replay from one stored
  carry: 1 for a feedforward policy (every step stands alone), None for a recurrent one
  (the whole fragment, from the carry stored at its start). See `algorithms.sgd.replay_batch`.
- `critic_apart`: the value comes from a tower of its own that needs no carry (the feedforward
  actor-critic), so the device rollout values a fragment's observations in one call after its
  scan rather than at every step.

`obs` is `[..., *obs_shape]` float32, or for a Dict / Tuple observation space a dict / tuple
of such leaves (`obs_shape` is then a dict / tuple of shapes, and every leaf has its own
encoder: `LeafEncoders`, or with `NetworkConfig.policy_obs_key` each tower one entry of a dict:
`tower_inputs`); values are `[...]`. Actions: Discrete, `spaces.MultiDiscrete`
(independent categoricals, `MultiCategorical`) or a flat Box.

Action masks: where the observation is a Dict with an `spaces.ACTION_MASK` entry, `step` (and so
`unroll`) returns the masked distribution (`distributions.mask_scores`): illegal actions are never
sampled, and log-probabilities and entropies are over the legal actions. The encoders do not see
the mask: it already acts, exactly, on the head; an env's mask mostly follows from what the rest
of its observation shows (the board a move is legal on); and encoding it too would spend weights
on learning what the head enforces. So an env keeps the network it would have without a mask (the
price: a critic cannot use what only the mask tells).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxrl_async.config import NetworkConfig
from jaxrl_async.core.distributions import (Categorical, DiagGaussian, MultiCategorical, TanhGaussian, legal_actions,
                                            mask_scores)
from jaxrl_async.envs.spaces import (ACTION_MASK, SUPPORTED_ACTIONS, MultiDiscrete, action_mask, as_observation,
                                     check_action_mask, is_nested, shape_leaves, without_action_mask,
                                     zeros_observation)
from jaxrl_async.nets.orthogonal import orthogonal

_ACTIVATIONS: dict[str, Callable] = {
    "tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "swish": nn.swish, "elu": nn.elu,
}


def _dense(features: int, scale: float, name: str | None = None) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(scale),
                    bias_init=nn.initializers.zeros, name=name)


def _normalized(x, layer_norm: bool):
    """`x`, layer-normalised over its features where asked (PQN's Q-network: `nets/q.py`)."""
    return nn.LayerNorm()(x) if layer_norm else x


class MLPTorso(nn.Module):
    hidden_sizes: Sequence[int]
    activation: str
    layer_norm: bool = False  # LayerNorm between each layer and its nonlinearity

    @nn.compact
    def __call__(self, x):
        for width in self.hidden_sizes:
            x = _ACTIVATIONS[self.activation](_normalized(_dense(width, np.sqrt(2.0))(x), self.layer_norm))
        return x


# (features, kernel, stride) of Mnih et al. 2015's DQN, for images of at least this many pixels a side
STRIDED_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
STRIDED_FROM = 36  # the smallest side the three unpadded convs reduce to one pixel or more


def conv_layers(image_shape) -> tuple[tuple[int, int, int], ...]:
    """The conv stack `CNNTorso` applies to an `[H, W, C]` image: one 3x3 conv of 16 features for
    a small grid (MinAtar's 10x10, the gridworlds'); DQN's strided convs where the smaller side is
    at least `STRIDED_FROM` pixels. The one conv keeps every pixel, so its flattened features grow
    with H x W: on Craftax's 63x63 pixels or an 84x84 Atari frame its dense layer alone would hold
    4-7M weights, where the strided convs leave 1-3k features."""
    return STRIDED_CONVS if min(image_shape[:2]) >= STRIDED_FROM else ((16, 3, 1),)


class CNNTorso(nn.Module):
    """Convs over an `[..., H, W, C]` image (`conv_layers`: chosen by its size), then the MLP."""

    hidden_sizes: Sequence[int]
    activation: str
    layer_norm: bool = False  # LayerNorm between each layer and its nonlinearity, the convs' included

    @nn.compact
    def __call__(self, x):
        act = _ACTIVATIONS[self.activation]
        layers = conv_layers(x.shape[-3:])
        # the one small conv pads its borders (SAME), DQN's strided ones do not (VALID), as published
        padding = "SAME" if len(layers) == 1 else "VALID"
        for features, kernel, stride in layers:
            x = act(_normalized(nn.Conv(features, (kernel, kernel), (stride, stride), padding=padding,
                                        kernel_init=orthogonal(np.sqrt(2.0)))(x), self.layer_norm))
        x = x.reshape(x.shape[:-3] + (-1,))
        return MLPTorso(self.hidden_sizes, self.activation, self.layer_norm)(x)


class LeafEncoders(nn.Module):
    """One torso per observation leaf (the CNN for an image leaf, else the MLP), features joined.

    `leaves` names each leaf's encoder and says whether it is an image: `((name, use_cnn), ...)`,
    in the order of the observation list it is called with.
    """

    hidden_sizes: Sequence[int]
    activation: str
    leaves: tuple[tuple[str, bool], ...]
    layer_norm: bool = False  # each torso's (`MLPTorso`)

    @nn.compact
    def __call__(self, obs_leaves):
        features = [(CNNTorso if use_cnn else MLPTorso)(self.hidden_sizes, self.activation, self.layer_norm,
                                                        name=name)(x)
                    for (name, use_cnn), x in zip(self.leaves, obs_leaves)]
        return jnp.concatenate(features, axis=-1)


def make_torso(hidden_sizes, activation, use_cnn, leaves, name, layer_norm: bool = False):
    """The encoder: one torso for a plain observation, `LeafEncoders` for a nested one."""
    if leaves is not None:
        return LeafEncoders(hidden_sizes, activation, leaves, layer_norm, name=name)
    return (CNNTorso if use_cnn else MLPTorso)(hidden_sizes, activation, layer_norm, name=name)


def _head_size(module: nn.Module) -> int:
    """The actor head's outputs: a tanh-Gaussian's mean and std side by side, else one per action
    dimension (logits, or a Gaussian's mean)."""
    return 2 * module.action_dim if _squashed(module) else module.action_dim


def _squashed(module: nn.Module) -> bool:
    return not module.discrete and module.action_dist == "tanh_gaussian"


def _head(module: nn.Module, out):
    """The action distribution from the actor head's output."""
    if module.nvec is not None:
        return MultiCategorical(logits=out, nvec=module.nvec)
    if module.discrete:
        return Categorical(logits=out)
    if _squashed(module):
        # a state-dependent scale, floored (Brax's NormalTanhDistribution)
        mean, scale = jnp.split(out, 2, axis=-1)
        return TanhGaussian(mean=mean, std=jax.nn.softplus(scale) + module.min_std)
    log_std = module.param("log_std", nn.initializers.zeros, (module.action_dim,))
    return DiagGaussian(mean=out, log_std=jnp.broadcast_to(log_std, out.shape))


class ActorCritic(nn.Module):
    """Separate actor and critic towers, each of its own widths; the actor head is categorical,
    multi-categorical, diagonal Gaussian or tanh-squashed Gaussian (`action_dist`).

    (Stacking the two towers' weights to run each layer as one batched matmul was
    measured slower on the CPU end to end, so each tower is its own MLP.)
    """

    hidden_sizes: Sequence[int]  # the actor tower's
    activation: str
    use_cnn: bool
    discrete: bool
    action_dim: int  # number of actions (discrete), sum(nvec) (multi-discrete) or action dimensions
    nvec: tuple[int, ...] | None = None  # the sub-action sizes of a MultiDiscrete action
    leaves: tuple[tuple[str, bool], ...] | None = None  # a nested observation's encoders (`LeafEncoders`)
    value_hidden_sizes: Sequence[int] | None = None  # the critic tower's; None: hidden_sizes
    action_dist: str = "gaussian"  # a Box action's: "gaussian" | "tanh_gaussian" (`NetworkConfig`)
    min_std: float = 0.001  # tanh_gaussian: the std's floor
    split_obs: bool = False  # obs is (the actor's input, the critic's): `NetworkConfig.policy_obs_key`

    @nn.compact
    def __call__(self, obs):
        torso = functools.partial(make_torso, activation=self.activation, use_cnn=self.use_cnn, leaves=self.leaves)
        actor_obs, critic_obs = obs if self.split_obs else (obs, obs)
        actor_features = torso(self.hidden_sizes, name="actor_torso")(actor_obs)
        critic_features = torso(self.value_hidden_sizes or self.hidden_sizes, name="critic_torso")(critic_obs)
        # small final-layer scales: a near-uniform initial policy, a near-zero initial value
        out = _dense(_head_size(self), 0.01, name="actor_head")(actor_features)
        value = _dense(1, 1.0, name="critic_head")(critic_features)[..., 0]
        return _head(self, out), value


class RecurrentActorCritic(nn.Module):
    """Torso -> GRU/LSTM core -> actor and critic heads, one time step per call.

    Actor and critic share the torso and the core (one memory, not two); the heads
    are separate.
    """

    hidden_sizes: Sequence[int]
    activation: str
    use_cnn: bool
    discrete: bool
    action_dim: int
    core: str  # "gru" | "lstm"
    core_size: int
    nvec: tuple[int, ...] | None = None
    leaves: tuple[tuple[str, bool], ...] | None = None
    action_dist: str = "gaussian"
    min_std: float = 0.001

    @nn.compact
    def __call__(self, obs, carry):
        features = make_torso(self.hidden_sizes, self.activation, self.use_cnn, self.leaves, "torso")(obs)
        # flax's default recurrent init is jax's orthogonal: ours gives the same values, safely (nets/orthogonal.py)
        cell = nn.GRUCell(self.core_size, recurrent_kernel_init=orthogonal(), name="core") if self.core == "gru" else \
            nn.OptimizedLSTMCell(self.core_size, recurrent_kernel_init=orthogonal(), name="core")
        carry, features = cell(carry, features)
        out = _dense(_head_size(self), 0.01, name="actor_head")(features)
        value = _dense(1, 1.0, name="critic_head")(features)[..., 0]
        return _head(self, out), value, carry


class Policy(NamedTuple):
    """Pure functions over the params pytree of an actor-critic (see the module docstring)."""

    init: Callable[[jax.Array], Any]  # key -> params
    initial_carry: Callable[[tuple[int, ...]], Any]  # batch_shape -> carry
    step: Callable  # (params, obs, carry) -> (dist, value, carry)
    value_step: Callable  # (params, obs, carry) -> value
    unroll: Callable  # (params, obs [N, L, ...], carry [N], reset [N, L]) -> (dist, value, carry_after)
    replay_length: int | None  # steps replayed from one stored carry; None: the whole fragment
    obs_shape: Any  # a shape tuple, or a dict / tuple of them (`spaces.observation_shapes`)
    discrete: bool  # a categorical or multi-categorical head
    action_shape: tuple[int, ...]
    # a critic tower of its own, needing no carry (the module docstring); not a Q policy's value,
    # which is the acting Q's own maximum
    critic_apart: bool = False


def reset_carry(policy: Policy, carry: Any, reset: jax.Array) -> Any:
    """The carry with every env where `reset` is true set back to the initial state."""
    initial = policy.initial_carry(reset.shape)
    return jax.tree.map(lambda c0, c: jnp.where(reset.reshape(reset.shape + (1,) * (c.ndim - reset.ndim)), c0, c),
                        initial, carry)


def with_matmul_precision(policy: Policy, precision: str) -> Policy:
    """The policy with its matmuls traced at `precision` ('float32', 'tensorfloat32', 'bfloat16';
    'default' leaves JAX's setting). The setting is read when a function is traced, in whatever
    thread traces it (the async actor's too), so it travels with the functions themselves."""
    return policy._replace(**{name: at_matmul_precision(getattr(policy, name), precision)
                              for name in ("init", "step", "value_step", "unroll")})


def at_matmul_precision(fn: Callable, precision: str) -> Callable:
    """`fn` with its matmuls traced at `precision` ('default': JAX's setting, `fn` itself)."""
    if precision == "default":
        return fn

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision(precision):
            return fn(*args, **kwargs)
    return wrapped


def _action_head(action_space) -> tuple[int, tuple[int, ...], tuple[int, ...] | None]:
    """(head size, action shape, MultiDiscrete sizes or None) of a gymnax action space."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n), (), None
    if isinstance(action_space, MultiDiscrete):
        return sum(action_space.nvec), action_space.shape, action_space.nvec
    if isinstance(action_space, spaces.Box):
        action_shape = tuple(int(d) for d in action_space.shape) or (1,)
        if len(action_shape) != 1:
            raise ValueError(f"continuous action shape {action_shape} is not supported: "
                             "the Gaussian head expects a flat action vector [D]")
        return int(np.prod(action_shape)), action_shape, None
    raise ValueError(f"action space {action_space!r} is not supported: use {SUPPORTED_ACTIONS}")


def _leaf_name(path) -> str:
    return "obs_" + "_".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def _nested_encoders(torso: str, obs_shape) -> tuple[tuple[str, bool], ...]:
    """Each leaf's encoder name and kind: 'auto' gives image leaves `[H, W, C]` the CNN."""
    leaves = shape_leaves(obs_shape)
    images = [len(shape) == 3 for _, shape in leaves]
    if torso == "cnn" and not all(images):
        vectors = [jax.tree_util.keystr(p) for (p, _), image in zip(leaves, images) if not image]
        raise ValueError(f"torso='cnn' needs every observation leaf to be an image [H, W, C], but {vectors} "
                         "are not: use --torso auto (the CNN for image leaves, the MLP for the rest)")
    return tuple((_leaf_name(p), image and torso != "mlp") for (p, _), image in zip(leaves, images))


def flat_observations(obs_shape: Sequence[int]) -> Callable[[jax.Array], jax.Array]:
    """obs [..., *obs_shape] -> [..., prod(obs_shape)]: the MLP sees observations of any rank as
    flat feature vectors."""

    def prepare(obs):
        if len(obs_shape) == 1:
            return obs
        return obs.reshape(obs.shape[: obs.ndim - len(obs_shape)] + (-1,))

    return prepare


class EncoderInput(NamedTuple):
    """How observations reach the encoder (`encoder_input`)."""

    obs_shape: Any  # the observation's shape structure (a plain shape as a tuple of ints)
    prepare: Callable  # obs -> the torso's input: the array, or the list of leaves for `LeafEncoders`
    use_cnn: bool  # a plain image observation goes through the CNN
    leaves: tuple[tuple[str, bool], ...] | None  # a nested observation's encoders, else None


def encoder_input(torso: str, obs_shape) -> EncoderInput:
    """The encoder's input for an observation shape structure (`spaces.observation_shapes`).

    A nested observation gives every leaf its own encoder (`LeafEncoders`), an image leaf the CNN
    where `torso` is 'auto'; a plain one is fed as it is to the CNN, or flat to the MLP. An action
    mask is no part of the input (the module docstring says why).
    """
    if is_nested(obs_shape):
        encoded = without_action_mask(obs_shape)
        leaves = _nested_encoders(torso, encoded)
        # the leaves in the structure's order; an MLP leaf as flat features
        leaf_inputs = [(lambda x: x) if cnn else flat_observations(shape)
                       for (_, shape), (_, cnn) in zip(shape_leaves(encoded), leaves)]

        def prepare(obs):
            return [leaf_input(x) for leaf_input, x in zip(leaf_inputs, jax.tree.leaves(as_observation(encoded, obs)))]
        return EncoderInput(obs_shape, prepare, False, leaves)
    obs_shape = tuple(int(d) for d in obs_shape)
    is_image = len(obs_shape) == 3
    use_cnn = torso == "cnn" or (torso == "auto" and is_image)
    if use_cnn and not is_image:
        raise ValueError(f"torso='cnn' needs image observations [H, W, C], got shape {obs_shape}: "
                         "use --torso mlp")
    return EncoderInput(obs_shape, (lambda obs: obs) if use_cnn else flat_observations(obs_shape), use_cnn, None)


def tower_inputs(policy_key: str, value_key: str, obs_shape) -> Callable:
    """`obs -> (the actor's input, the critic's)` where each tower sees one entry of a dict
    observation (`NetworkConfig.policy_obs_key`, `value_obs_key`), as flat features for its MLP: as
    Brax's PPO networks take Playground's `state` and `privileged_state`."""
    if not isinstance(obs_shape, dict):
        raise ValueError(f"policy_obs_key={policy_key!r} and value_obs_key={value_key!r} pick entries of a dict "
                         f"observation, but this env's observation is {obs_shape}: leave them unset")
    for name, key in (("policy_obs_key", policy_key), ("value_obs_key", value_key)):
        if key not in obs_shape or key == ACTION_MASK or is_nested(obs_shape[key]):
            entries = sorted(k for k in obs_shape if k != ACTION_MASK and not is_nested(obs_shape[k]))
            raise ValueError(f"{name}={key!r} is not an array entry of this env's observation: choose one of {entries}")
    flatten = {key: flat_observations(tuple(obs_shape[key])) for key in (policy_key, value_key)}
    return lambda obs: tuple(flatten[key](obs[key]) for key in (policy_key, value_key))


def observed_legal_actions(obs, nvec: tuple[int, ...] | None = None) -> jax.Array | None:
    """`[..., A]` bool, the legal actions an observation's action mask gives (`legal_actions`), or
    None where the observation has no mask."""
    mask = action_mask(obs)
    return None if mask is None else legal_actions(mask, nvec)


def _masked(dist, obs, nvec):
    """The policy's distribution restricted to the observation's legal actions (itself where the
    observation has no mask)."""
    legal = observed_legal_actions(obs, nvec)
    return dist if legal is None else dist.replace(logits=mask_scores(dist.logits, legal))


def make_policy(cfg: NetworkConfig, obs_shape, action_space) -> Policy:
    """Build the actor-critic for an observation shape and a gymnax action space.

    `obs_shape` is a shape tuple, or for a Dict / Tuple observation space a dict / tuple of
    them (`spaces.observation_shapes`): then every leaf gets its own encoder (`LeafEncoders`),
    their features joined before the heads (or the recurrent core). A Dict with an
    `spaces.ACTION_MASK` entry masks the distribution (the module docstring).
    """
    action_dim, action_shape, nvec = _action_head(action_space)
    discrete = nvec is not None or isinstance(action_space, spaces.Discrete)
    check_action_mask(obs_shape, action_space)
    obs_shape, prepare, use_cnn, leaves = encoder_input(cfg.torso, obs_shape)
    shapes = dict(obs_shape=obs_shape, discrete=discrete, action_shape=action_shape)
    if cfg.action_dist != "gaussian" and not isinstance(action_space, spaces.Box):
        raise ValueError(f"action_dist={cfg.action_dist!r} is a distribution over Box actions, but this env's actions "
                         f"are {action_space!r}: use --action-dist gaussian (discrete actions get a categorical)")
    heads = dict(nvec=nvec, leaves=leaves, action_dist=cfg.action_dist, min_std=cfg.min_std)
    if cfg.core != "none":
        return _recurrent_policy(cfg, prepare, use_cnn, action_dim, heads, **shapes)
    split_obs = cfg.policy_obs_key is not None
    if split_obs:  # each tower one entry, through one MLP
        prepare, use_cnn = tower_inputs(cfg.policy_obs_key, cfg.value_obs_key, obs_shape), False
        heads["leaves"] = None
    module = ActorCritic(cfg.policy_sizes, cfg.activation, use_cnn, discrete, action_dim,
                         value_hidden_sizes=cfg.value_sizes, split_obs=split_obs, **heads)

    def init(key):
        return module.init(key, prepare(zeros_observation(obs_shape, (1,))))

    def step(params, obs, carry):
        dist, value = module.apply(params, prepare(obs))
        return _masked(dist, obs, nvec), value, carry

    def value_step(params, obs, carry):
        # the actor's tower and head are unused here, and XLA drops them
        return module.apply(params, prepare(obs))[1]

    def unroll(params, obs, carry, reset):
        # no memory, so no resets: the network on every step at once, as laid out ([N, L] or [N])
        return step(params, obs, carry)

    return Policy(init, lambda batch_shape: (), step, value_step, unroll, replay_length=1, critic_apart=True,
                  **shapes)


def _recurrent_policy(cfg: NetworkConfig, prepare, use_cnn, action_dim, heads, **shapes) -> Policy:
    obs_shape = shapes["obs_shape"]
    module = RecurrentActorCritic(tuple(cfg.hidden_sizes), cfg.activation, use_cnn, shapes["discrete"], action_dim,
                                  cfg.core, cfg.core_size, **heads)

    def initial_carry(batch_shape):
        zeros = jnp.zeros(tuple(batch_shape) + (cfg.core_size,), jnp.float32)
        return zeros if cfg.core == "gru" else (zeros, zeros)

    def init(key):
        return module.init(key, prepare(zeros_observation(obs_shape, (1,))), initial_carry((1,)))

    def step(params, obs, carry):
        dist, value, carry = module.apply(params, prepare(obs), carry)
        return _masked(dist, obs, heads["nvec"]), value, carry

    def value_step(params, obs, carry):
        return step(params, obs, carry)[1]

    def unroll(params, obs, carry, reset):
        def body(carry, inputs):
            obs_t, reset_t = inputs
            dist, value, carry = step(params, obs_t, reset_carry(policy, carry, reset_t))
            return carry, (dist, value, carry)

        # the scan runs along time: [N, L] sequences in, [L, N] through the scan, [N, L] out
        time_major = lambda x: jnp.swapaxes(x, 0, 1)
        _, outputs = jax.lax.scan(body, carry, jax.tree.map(time_major, (obs, reset)))
        return jax.tree.map(time_major, outputs)

    policy = Policy(init, initial_carry, step, value_step, unroll, replay_length=None, **shapes)
    return policy  # `unroll` resets the carry through it
