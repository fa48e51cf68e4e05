"""Frozen, validated configuration sections that every learner shares: the network, the learner's
hyperparameters, the replay buffer; and the one validation rule they all follow (`require`).

A training run's config, `TrainConfig`, holds them as fields (`train_config.py`). The CLI is
generated from these classes (see `cli/main.py`), so every field is a flag and its comment is the
flag's help text. Derived sizes are properties, never written back. Invalid values raise
`ValueError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import types
import typing
from typing import Any, Callable, Literal



def require(condition: bool, field: str, value, allowed: str) -> None:
    """The configs' one validation rule: an invalid value raises `ValueError` naming the field,
    the value and what is allowed."""
    if not condition:
        raise ValueError(f"{field}={value!r} is invalid: {allowed}")


_PLAIN_KINDS: dict[type, tuple[Callable[[Any], bool], str, str]] = {  # the check, the kind, its plural
    bool: (lambda v: isinstance(v, bool), "True or False", "booleans"),
    int: (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool), "an integer", "integers"),
    float: (lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool), "a number", "numbers"),
    str: (lambda v: isinstance(v, str), "a string", "strings"),
    type(None): (lambda v: v is None, "None", "Nones"),
}


def _kind(hint) -> tuple[Callable[[Any], bool], str]:
    """Whether a value is of the annotation `hint`'s kind, and the kind in words. A Literal's
    values are its own field's rule to check (with the choices named), so here only their type is."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _PLAIN_KINDS:
        fits, words, _ = _PLAIN_KINDS[hint]
        return fits, words
    if origin is Literal:
        literal_types = tuple({type(arg) for arg in args})
        return (lambda v: isinstance(v, literal_types) and (bool in literal_types or not isinstance(v, bool)),
                " or ".join(repr(arg) for arg in args))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _PLAIN_KINDS:
        fits, _, plural = _PLAIN_KINDS[args[0]]
        return (lambda v: isinstance(v, (tuple, list)) and all(fits(x) for x in v)), f"a tuple of {plural}"
    if origin in (typing.Union, types.UnionType):
        kinds = [_kind(arg) for arg in args]
        return (lambda v: any(fits(v) for fits, _ in kinds)), ", or ".join(words for _, words in kinds)
    if isinstance(hint, type):
        return (lambda v: isinstance(v, hint)), f"a {hint.__name__}"
    return (lambda v: True), "anything"


@functools.cache
def _field_kinds(cls: type) -> tuple[tuple[str, Callable[[Any], bool], str], ...]:
    """Each field of the dataclass `cls` with its annotation's kind (`_kind`), read once a class."""
    hints = typing.get_type_hints(cls)
    return tuple((field.name, *_kind(hints[field.name])) for field in dataclasses.fields(cls))


def require_field_types(config) -> None:
    """A ValueError naming the first field of the dataclass `config` whose value is not of its
    annotated type (`num_envs=4.5`, `learning_rate='fast'`), before the field's own rules compare
    it: they would fail on it with a TypeError naming no field, or pass it on to fail in a run."""
    for name, fits, words in _field_kinds(type(config)):
        value = getattr(config, name)
        require(fits(value), name, value, f"must be {words}")


# Host environments (`envs/host/`): stepped on the host, not JAX functions.
GYMNASIUM_PREFIX = "gymnasium:"
ENVPOOL_PREFIX = "envpool:"
HOST_ENV_PREFIXES = (GYMNASIUM_PREFIX, ENVPOOL_PREFIX)


def parse_env_kwargs(pairs: tuple[str, ...]) -> dict:
    """`--env-kwargs KEY=VALUE ...` as the keyword arguments of the env's constructor: each VALUE
    read as JSON where it is JSON (`500`, `0.5`, `true`, `"x"`, `[1, 2]`), else as the string itself."""
    kwargs = {}
    for pair in pairs:
        key, sep, text = str(pair).partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"env_kwargs entry {pair!r} is invalid: write KEY=VALUE with KEY a Python name, "
                             "e.g. --env-kwargs backend=mjx episode_length=500")
        if key in kwargs:
            raise ValueError(f"env_kwargs gives {key!r} twice ({pairs!r}): give each key once")
        try:
            kwargs[key] = json.loads(text)
        except json.JSONDecodeError:
            kwargs[key] = text
    return kwargs


def refused_env_kwargs(env_id: str, env_kwargs: dict, error: Exception) -> ValueError:
    """The error for `env_kwargs` that the env's constructor would not take (`error`, its TypeError)."""
    return ValueError(f"env {env_id!r} does not take env_kwargs {env_kwargs}: {error} "
                      "(--env-kwargs KEY=VALUE passes keyword arguments to the env's constructor)")


def host_env_kind(env_id: str) -> str | None:
    """The host env prefix `env_id` starts with ('gymnasium:' / 'envpool:'), None for a JAX env."""
    return next((prefix for prefix in HOST_ENV_PREFIXES if str(env_id).startswith(prefix)), None)


ACTIVATIONS = ("tanh", "relu", "gelu", "swish", "elu")
ACTION_DISTS = ("gaussian", "tanh_gaussian")
MATMUL_PRECISIONS = ("default", "float32", "tensorfloat32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The actor-critic network."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the hidden layers of the actor and the critic towers (MLP)."""
    policy_hidden_sizes: tuple[int, ...] | None = None
    """Widths of the actor tower's hidden layers where they differ from hidden_sizes (e.g. Brax's 32 32 32 32); None: hidden_sizes. Feedforward actor-critics (ppo, a2c, reinforce, impala) only."""
    value_hidden_sizes: tuple[int, ...] | None = None
    """Widths of the critic tower's hidden layers where they differ from hidden_sizes (e.g. Brax's 256 256 256 256 256); None: hidden_sizes. Feedforward actor-critics only."""
    policy_obs_key: str | None = None
    """A dict observation's entry that the actor tower alone sees, through one MLP (e.g. Playground's 'state'); None: every entry, each through its own encoder. Set with value_obs_key; feedforward actor-critics (ppo, a2c, reinforce, impala) only."""
    value_obs_key: str | None = None
    """A dict observation's entry that the critic tower alone sees, through one MLP (e.g. Playground's 'privileged_state', which its actor never gets); set with policy_obs_key."""
    action_dist: Literal["gaussian", "tanh_gaussian"] = "gaussian"
    """Box actions (ppo, a2c, reinforce, impala): 'gaussian', a Gaussian with a learned state-independent log-std, clipped to the bounds; 'tanh_gaussian', a Gaussian whose std is a state-dependent output (softplus + min_std) squashed by tanh into the bounds, its log-prob and entropy those of the squashed action (Brax's and Playground's PPO policy)."""
    min_std: float = 0.001
    """tanh_gaussian: the floor added to the softplus std (Brax's min_std)."""
    activation: Literal["tanh", "relu", "gelu", "swish", "elu"] = "tanh"
    """Nonlinearity between layers."""
    torso: Literal["auto", "mlp", "cnn"] = "auto"
    """Observation encoder: 'auto' picks the CNN for image observations [H, W, C] (one 3x3 conv for a small grid like MinAtar's; DQN's three strided convs from 36 pixels a side, as Atari's 84x84 frames), else the MLP. A Dict / Tuple observation gets one encoder per leaf ('auto': the CNN for [H, W, C] leaves, the MLP for the rest; 'mlp': the MLP for all; 'cnn': every leaf must be an image), their features joined before the heads or the core."""
    core: Literal["none", "gru", "lstm"] = "none"
    """Recurrent core after the torso (shared by actor and critic), for partially observable tasks."""
    core_size: int = 64
    """Units of the recurrent core."""

    def __post_init__(self):
        require_field_types(self)
        require(len(self.hidden_sizes) >= 1 and all(h >= 1 for h in self.hidden_sizes),
                "hidden_sizes", self.hidden_sizes, "give one or more positive layer widths, e.g. 64 64")
        require(self.activation in ACTIVATIONS, "activation", self.activation, f"choose one of {ACTIVATIONS}")
        require(self.torso in ("auto", "mlp", "cnn"), "torso", self.torso, "choose auto, mlp or cnn")
        require(self.core in ("none", "gru", "lstm"), "core", self.core, "choose none, gru or lstm")
        require(self.core_size >= 1, "core_size", self.core_size, "must be >= 1")
        for name in ("policy_hidden_sizes", "value_hidden_sizes"):
            sizes = getattr(self, name)
            require(sizes is None or (len(sizes) >= 1 and all(h >= 1 for h in sizes)), name, sizes,
                    "give one or more positive layer widths, e.g. 32 32 32 32, or leave it unset (hidden_sizes)")
            require(sizes is None or self.core == "none", name, sizes,
                    f"a recurrent core (core={self.core!r}) shares one torso between the actor and the critic: "
                    "set hidden_sizes, not separate towers")
        require((self.policy_obs_key is None) == (self.value_obs_key is None), "policy_obs_key",
                self.policy_obs_key, f"set it with value_obs_key (now {self.value_obs_key!r}): each tower its own "
                "entry of the observation, or neither")
        require(self.policy_obs_key is None or self.core == "none", "policy_obs_key", self.policy_obs_key,
                f"a recurrent core (core={self.core!r}) shares one torso between the actor and the critic: "
                "leave policy_obs_key and value_obs_key unset")
        require(self.action_dist in ACTION_DISTS, "action_dist", self.action_dist, f"choose one of {ACTION_DISTS}")
        require(math.isfinite(self.min_std) and self.min_std > 0, "min_std", self.min_std,
                "must be a finite number > 0 (Brax's: 0.001)")

    @property
    def policy_sizes(self) -> tuple[int, ...]:
        """The actor tower's widths."""
        return tuple(self.policy_hidden_sizes or self.hidden_sizes)

    @property
    def value_sizes(self) -> tuple[int, ...]:
        """The critic tower's widths."""
        return tuple(self.value_hidden_sizes or self.hidden_sizes)


def check_minibatches(num_minibatches: int, batch_size: int, *, whole_sequences: bool = False) -> None:
    """The one minibatch rule, which the config and the learners both apply: `num_minibatches`
    splits the learner's batch evenly. That batch is the rollout's `num_envs*num_steps`
    transitions, or with `whole_sequences` (IMPALA and recurrent policies replay time in order)
    its `num_envs` env sequences; `batch_size` is their count.
    """
    if batch_size % num_minibatches == 0:
        return
    if whole_sequences:
        name, why = "num_envs", "impala and recurrent policies learn from whole env sequences, as many per minibatch"
    else:
        name, why = "num_envs*num_steps", "each minibatch is an equal share of the rollout's transitions"
    raise ValueError(f"num_minibatches={num_minibatches} must divide {name}={batch_size}: {why}; "
                     f"choose a divisor of {batch_size}")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Learner hyperparameters: those every algorithm (ppo, a2c, reinforce, impala) shares, plus the few
    specific to one of them."""

    update_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches per epoch; must divide num_envs * num_steps (num_envs for impala or a recurrent core)."""
    learning_rate: float = 2.5e-4
    """Adam step size (the starting value when annealed)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly towards zero over the run, once per update (update k of N takes 1 - k/N of it, as CleanRL's PPO does)."""
    gamma: float = 0.99
    """Discount factor."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before the learner sees them (its returns, advantages and metrics' reward_mean; Brax's reward_scaling); episode returns and evaluations stay the env's own."""
    gae_lambda: float = 0.95
    """GAE lambda (impala: V-trace's lambda; pqn: the lambda of its Q(lambda) returns, 0 one-step Q-learning, 1 Monte-Carlo returns)."""
    clip_eps: float = 0.2
    """PPO ratio clipping range (also the value clipping range)."""
    clip_value_loss: bool = True
    """Clip the value-function update around the behaviour values."""
    normalize_advantages: bool = True
    """Normalise advantages within each minibatch."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clipping threshold."""
    importance_weights: bool = True
    """A2C / REINFORCE: weight the policy gradient by min(1, pi/mu) against the behaviour policy."""
    reinforce_baseline: bool = True
    """REINFORCE: subtract the learned value from the Monte-Carlo return."""
    clip_rho_threshold: float = 1.0
    """IMPALA: V-trace's clipping of the importance ratio in the value targets (rho-bar)."""
    clip_pg_rho_threshold: float = 1.0
    """IMPALA: V-trace's clipping of the importance ratio in the policy gradient."""

    def __post_init__(self):
        require_field_types(self)
        require(self.update_epochs >= 1, "update_epochs", self.update_epochs, "must be >= 1")
        require(self.num_minibatches >= 1, "num_minibatches", self.num_minibatches, "must be >= 1")
        require(math.isfinite(self.learning_rate) and self.learning_rate > 0,
                "learning_rate", self.learning_rate, "must be a finite number > 0")
        require(0.0 <= self.gamma <= 1.0, "gamma", self.gamma, "must be in [0, 1]")
        require(math.isfinite(self.reward_scale) and self.reward_scale > 0, "reward_scale", self.reward_scale,
                "must be a finite number > 0 (1: the env's own rewards)")
        require(0.0 <= self.gae_lambda <= 1.0, "gae_lambda", self.gae_lambda, "must be in [0, 1]")
        require(self.clip_eps > 0, "clip_eps", self.clip_eps, "must be > 0 (inf: no clipping)")
        # a coefficient of inf makes the loss inf, then NaN: refused here, not at the first update
        require(math.isfinite(self.ent_coef) and self.ent_coef >= 0, "ent_coef", self.ent_coef,
                "must be a finite number >= 0")
        require(math.isfinite(self.vf_coef) and self.vf_coef >= 0, "vf_coef", self.vf_coef,
                "must be a finite number >= 0")
        require(self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm, "must be > 0 (inf: no clipping)")
        require(self.clip_rho_threshold > 0, "clip_rho_threshold", self.clip_rho_threshold, "must be > 0")
        require(self.clip_pg_rho_threshold > 0, "clip_pg_rho_threshold", self.clip_pg_rho_threshold, "must be > 0")


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The replay buffer of the learners that learn from one (`train_config.LearnerSpec.replay`:
    dqn, sac, td3): one buffer, one set of flags for all."""

    replay_capacity: int = 100_000
    """Transitions the replay buffer holds per seed (rounded down to whole rows of num_envs)."""
    learning_starts: int = 10_000
    """Transitions in the buffer before the first gradient step (a resume without the buffer waits again)."""
    replay_ratio: int = 1
    """Gradient steps per iteration, i.e. per num_envs*num_steps env steps added to the buffer."""
    replay_batch_size: int = 128
    """Transitions sampled (uniformly, or by priority: priority_exponent) per gradient step."""
    n_step: int = 1
    """Steps in the return before bootstrapping (cut at terminations and time limits)."""
    checkpoint_replay: bool = False
    """Save the replay buffer in checkpoints (a resume is then bit-identical; without it the buffer refills)."""
    priority_exponent: float = 0.0
    """Prioritised replay's alpha: transitions are drawn in proportion to (|TD error| + priority_epsilon)^alpha (Schaul et al. 2016, proportional; 0.6 is the paper's); 0 draws uniformly, exactly as without prioritised replay."""
    priority_weight_exponent: float = 0.4
    """Prioritised replay's beta, the importance-sampling exponent at the start of the run, annealed linearly to 1 at its end; the loss of each sampled transition is weighted by (N P)^-beta / max over the batch (unused when priority_exponent is 0)."""
    priority_epsilon: float = 1e-6
    """Added to |TD error| before the exponent, so no written transition's priority is 0 (unused when priority_exponent is 0)."""

    def __post_init__(self):
        require_field_types(self)
        require(self.replay_capacity >= 1, "replay_capacity", self.replay_capacity, "must be >= 1")
        require(self.learning_starts >= 1, "learning_starts", self.learning_starts,
                "must be >= 1 (the first gradient step needs a transition to sample)")
        require(self.replay_ratio >= 1, "replay_ratio", self.replay_ratio, "must be >= 1 gradient step per iteration")
        require(self.replay_batch_size >= 1, "replay_batch_size", self.replay_batch_size, "must be >= 1")
        require(self.n_step >= 1, "n_step", self.n_step, "must be >= 1")
        require(math.isfinite(self.priority_exponent) and self.priority_exponent >= 0, "priority_exponent",
                self.priority_exponent, "must be a finite number >= 0 (0: uniform replay; 0.6: the paper's)")
        require(0.0 <= self.priority_weight_exponent <= 1.0, "priority_weight_exponent",
                self.priority_weight_exponent, "must be in [0, 1] (it is annealed from there to 1; 0.4: the paper's)")
        require(math.isfinite(self.priority_epsilon) and self.priority_epsilon > 0, "priority_epsilon",
                self.priority_epsilon, "must be a finite number > 0, so no transition's priority is 0 (e.g. 1e-6)")

    @property
    def prioritised(self) -> bool:
        """Whether the replay draws by priority (priority_exponent > 0)."""
        return self.priority_exponent > 0


REPLAY_FIELDS = tuple(field.name for field in dataclasses.fields(ReplayConfig))
