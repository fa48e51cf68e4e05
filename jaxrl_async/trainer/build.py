"""The pure pieces of a run, built once from the config, and the iteration both modes share.

    c = build(cfg)          # env, policy, collector (device or host), learner, evaluator
    states = initial_states(c)

The seed axis `S` is always the leading axis of the state the host holds, also
for one seed (`core.programs.over_seeds`).

A process builds a config's pieces once: `build` keeps the last few device-env builds, by every
config field a program sees (`program_key`: not the run directory, the seed, the intervals, ...).
The jitted programs made from them are kept with them (`Components.program`), so a second run of
the same config in the process — a resume, another seed, another run directory or schedule —
reuses their traces and executables: JAX caches a jitted function's trace and
executable per function object, and the pieces are the same objects. `forget_builds()` drops
them (a benchmark that times cold compiles, a caller that changed XLA's options in between).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxrl_async import algorithms
from jaxrl_async.config import host_env_kind, parse_env_kwargs
from jaxrl_async.speed import SpeedSettings, resolve_speed
from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.envs import make_env
from jaxrl_async.envs.host.gymnasium import make_host_env
from jaxrl_async.envs.spaces import observation_shapes
from jaxrl_async.envs.wrappers import SquashAction
from jaxrl_async.nets.actor_critic import Policy, with_matmul_precision
from jaxrl_async.core.programs import seed_keys
from jaxrl_async.rollout.collector import Collector
from jaxrl_async.rollout.device import make_rollout
from jaxrl_async.rollout.host import HostRollout
from jaxrl_async.trainer import metrics as metrics_lib
from jaxrl_async.trainer import presets
from jaxrl_async.types import Algorithm, TrainState


class Programs:
    """The jitted programs made from one build's pieces, by name, and what they were made from."""

    def __init__(self, key: tuple, pieces: tuple):
        self.key = key  # `program_key(cfg)` of the build
        self.pieces = pieces  # `Components.pieces()` of the build
        self.made: dict = {}


class Components(NamedTuple):
    """The pure functions a run is made of."""

    cfg: TrainConfig
    env: Any  # the gymnax-API env, or a host env's `HostEnvSpec`
    env_params: Any  # the env's params (None for a host env)
    policy: Policy
    rollout: Collector  # `DeviceRollout` or `HostRollout`
    algo: Algorithm
    evaluate: Any  # the collector's evaluator (`rollout.evaluate`)
    speed: SpeedSettings  # the resolved speed settings
    programs: Programs  # the jitted programs made from these pieces (`program`)

    def pieces(self) -> tuple:
        return self.env, self.env_params, self.policy, self.rollout, self.algo, self.evaluate, self.speed

    def program(self, name: Any, make: Callable[[], Callable]) -> Callable:
        """The program `make()` gives, made once for these pieces: a second run of the same config
        in this process gets the same jitted function, hence its trace and executable.

        Made anew at each call where a piece or the config was replaced since the build
        (`c._replace(algo=...)`: the kept programs are the old pieces'), or where `name` does not
        hash."""
        kept = self.programs
        if program_key(self.cfg) != kept.key or any(
                mine is not theirs for mine, theirs in zip(self.pieces(), kept.pieces)):
            return make()
        try:
            made = kept.made.get(name)
        except TypeError:
            return make()
        return made if made is not None else kept.made.setdefault(name, make())


# The config's fields that no program sees: the run's directory and logs, its host-side schedule
# (the chunk sizes are arguments of the fused program), which evaluations run, the async pipeline's
# host policy, the preset's label (its settings are the other fields) and the seed, which reaches
# the programs only through the keys they take as arguments. The videos' fields shape only the recording
# program, made apart from the pieces and named by them (`videos.Videos.create`).
HOST_SIDE_FIELDS = frozenset({"run_dir", "tensorboard", "tracker", "eval_interval", "checkpoint_interval",
                              "keep_checkpoints", "iterations_per_call", "eval_stochastic", "lag", "buffer_size",
                              "sync_interval", "preset", "seed", "video_interval", "video_max_frames"})


def program_key(cfg: TrainConfig) -> tuple:
    """What of the config the programs see: every field but `HOST_SIDE_FIELDS`, by name."""
    return tuple((field.name, getattr(cfg, field.name)) for field in dataclasses.fields(cfg)
                 if field.name not in HOST_SIDE_FIELDS)


_BUILDS_KEPT = 4  # a few configs' pieces: a resumed run or a test's twin run follows its first closely
_builds: collections.OrderedDict = collections.OrderedDict()  # (program key, backend) -> Components
_builds_lock = threading.Lock()


def build(cfg: TrainConfig, backend: str | None = None) -> Components:
    """The run's pieces; the speed settings left at 'auto' take `backend`'s defaults
    (default: `jax.default_backend()`, where the programs will run). A device env's pieces are
    those of the last build of the same `program_key`, where one is kept; a host env's are new
    each time (its envs are live simulators, one set per run)."""
    backend = backend or jax.default_backend()
    if host_env_kind(cfg.env):
        return _build(cfg, backend)
    key = (program_key(cfg), backend)
    try:
        hash(key)
    except TypeError:  # a field holding a list or a dict, say: built anew
        return _build(cfg, backend)
    with _builds_lock:
        built = _builds.pop(key, None) or _build(cfg, backend)
        _builds[key] = built  # the most recent last
        while len(_builds) > _BUILDS_KEPT:
            _builds.popitem(last=False)
    return built._replace(cfg=cfg)


def forget_builds() -> None:
    """Drop the kept builds and their programs: the next run of any config traces and compiles
    anew (from the persistent compilation cache, where it is on)."""
    with _builds_lock:
        _builds.clear()


def _build(cfg: TrainConfig, backend: str) -> Components:
    speed = resolve_speed(cfg, backend)
    if host_env_kind(cfg.env):  # stepped on the host (`envs/host/`): no env params
        env, env_params = make_host_env(cfg.env, **parse_env_kwargs(cfg.env_kwargs)), None
        obs_space, action_space = env.observation_space, env.action_space
    else:
        env, env_params = make_env(cfg.env, **parse_env_kwargs(cfg.env_kwargs))
        if cfg.network.action_dist == "tanh_gaussian":  # the policy's actions are unsquashed (`SquashAction`)
            space = env.action_space(env_params)
            if not isinstance(space, spaces.Box):
                raise ValueError(f"action_dist='tanh_gaussian' squashes a continuous Box action, but {cfg.env} acts "
                                 f"in {space!r}: use --action-dist gaussian (a discrete space takes a categorical "
                                 "policy whatever this flag says)")
            env = SquashAction(env)
        obs_space, action_space = env.observation_space(env_params), env.action_space(env_params)
    try:
        algorithms.check_action_space(cfg.algo, action_space)
    except ValueError as error:
        raise ValueError(f"{error}{presets.preset_learner_note(cfg)}") from None
    learner = algorithms.learner(cfg.algo)
    policy, nets = learner.networks(cfg, observation_shapes(obs_space), action_space)
    policy = with_matmul_precision(policy, cfg.matmul_precision)
    shared = dict(num_envs=cfg.num_envs, num_steps=cfg.num_steps, gamma=cfg.learner.gamma,
                  gae_lambda=cfg.learner.gae_lambda, reward_scale=cfg.learner.reward_scale,
                  normalize_obs=cfg.normalize_obs, gae_scan=speed.gae_scan, noise_correlation=cfg.action_noise_correlation,
                  # a replay learner stores the env's observations and normalises what it samples
                  record_raw_obs=cfg.learner_spec.replay)
    if env_params is None:
        rollout = HostRollout(env, policy, env_groups=cfg.env_groups, **shared)
    else:
        rollout = make_rollout(env, env_params, policy, unroll=speed.scan_unroll, **shared)
    algo = learner.make(cfg, policy, nets, speed)
    evaluate = rollout.evaluator(cfg.eval_episodes, unroll=speed.eval_unroll)
    pieces = (env, env_params, policy, rollout, algo, evaluate, speed)
    return Components(cfg, *pieces, programs=Programs(program_key(cfg), pieces))


def init_state(c: Components, key: jax.Array, hparams: Any = None) -> TrainState:
    learner_key, rollout_key = jax.random.split(key)
    return TrainState(learner=c.algo.init(learner_key, hparams), rollout=c.rollout.init(rollout_key))


def check_sweep(c: Components, hparams: Any) -> None:
    """A clear error for sweep hyperparameters that do not fit the config."""
    template = jax.eval_shape(c.algo.init, jax.random.PRNGKey(0)).hparams
    if jax.tree.structure(hparams) != jax.tree.structure(template):
        raise ValueError(f"hparams must be a {type(template).__name__} like the learner's own "
                         f"(see jaxrl_async.sweep_hparams), got {type(hparams).__name__}")
    read = c.cfg.learner_spec.hparams_read
    for name, leaf in zip((f.name for f in dataclasses.fields(template)), jax.tree.leaves(hparams)):
        if jnp.shape(leaf) != (c.cfg.num_seeds,):
            raise ValueError(f"hparams.{name} has shape {jnp.shape(leaf)}; a sweep gives every seed its own "
                             f"value, so it must be [num_seeds] = ({c.cfg.num_seeds},)")
        values = sorted(set(np.asarray(jax.device_get(leaf)).tolist()))
        if name not in read and len(values) > 1:
            raise ValueError(f"hparams.{name} varies over the seeds ({values}), but algo={c.cfg.algo!r} does not "
                             f"read {name}: every point would train alike; sweep {', '.join(read)}")


def initial_states(c: Components, hparams: Any = None) -> TrainState:
    """Every seed's initial state, `[S, ...]`.

    The seeds are initialised one after another (`lax.map`), not vmapped: a QR
    decomposition batched over seeds can deadlock XLA's CPU thread pool (seen here: a
    hang in `lapack_sgeqrf` waiting on its own pool). `nets/orthogonal.py` now takes
    every QR one matrix at a time, under any vmap; the seeds' loop stays, as
    initialisation is cheap and its draws are the ones the digests record. The
    training itself is still vmapped.
    """
    if hparams is not None:
        check_sweep(c, hparams)
    # hparams=None is an empty pytree: every seed then takes the config's values
    init = c.program("initial_states", lambda: jax.jit(
        lambda keys, hparams: jax.lax.map(lambda args: init_state(c, *args), (keys, hparams))))
    keys = seed_keys(c.cfg.seed, c.cfg.num_seeds)
    return compile_once_run(init.lower(keys, hparams))(keys, hparams)


# A program that runs once needs no optimised machine code: XLA:CPU without LLVM's optimisations and
# with its loop emitters compiles the initial states in half the time or less, most of it the
# initialisers' normal draws (docs/benchmarks.md, "Compile time"). The values are the same draws
# from the same keys, but may differ from an optimised program's in the last bits.
ONCE_RUN_CPU_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}


def compile_once_run(lowered):
    """Compile a lowered program that runs once: fast (`ONCE_RUN_CPU_OPTIONS`) on the CPU."""
    if jax.default_backend() == "cpu":
        try:
            return lowered.compile(compiler_options=ONCE_RUN_CPU_OPTIONS)
        except jax.errors.JaxRuntimeError:  # a jaxlib without one of the options: compile as usual
            pass
    return lowered.compile()


def iteration(c: Components, state: TrainState) -> tuple[TrainState, dict]:
    """One rollout with the current params, then one update: the unit both modes share."""
    rollout_state, trajectory = c.rollout.collect(state.learner.params, state.rollout)
    learner, update_metrics = c.algo.update(state.learner, trajectory)
    return TrainState(learner, rollout_state), metrics_lib.iteration_metrics(trajectory, update_metrics)


def all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def run_iterations(c: Components, state: TrainState, num_iterations) -> tuple[TrainState, dict, dict]:
    """`num_iterations` iterations in one loop (the count may be traced: one compiled
    function serves every chunk length). Returns the state, the summed metrics (fixed
    size however many iterations ran) and diagnostics: the first update whose metrics
    were not finite (-1 if none) and whether the final params are finite."""
    # jitted so that its one trace serves both the metrics' shapes and the loop's body (JAX caches
    # a jitted function's trace per argument shapes); XLA inlines the call
    step = jax.jit(functools.partial(iteration, c))
    zeros = metrics_lib.zeros_like_metrics(lambda s: step(s)[1], state)

    def body(_, carry):
        state, sums, first_bad = carry
        update_index = state.learner.update_count
        state, metrics = step(state)
        bad = ~metrics_lib.update_is_finite(metrics)
        first_bad = jnp.where((first_bad < 0) & bad, update_index, first_bad)
        return state, metrics_lib.accumulate(sums, metrics), first_bad

    state, sums, first_bad = jax.lax.fori_loop(0, num_iterations, body,
                                               (state, zeros, jnp.full((), -1, jnp.int32)))
    return state, sums, {"first_nonfinite_update": first_bad, "params_finite": all_finite(state.learner.params)}
