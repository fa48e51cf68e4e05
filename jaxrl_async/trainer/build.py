"""The pure pieces of a run, built once from the config, and the iteration both modes share.

    c = build(cfg)          # env, policy, collector (device or host), learner, evaluator
    states = initial_states(c)

The seed axis `S` is always the leading axis of the state the host holds, also
for one seed (`rollout.collector.over_seeds`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_async import algorithms
from jaxrl_async.config import SpeedSettings, TrainConfig, host_env_kind, parse_env_kwargs, resolve_speed
from jaxrl_async.envs import make_env
from jaxrl_async.envs.host.gymnasium import make_host_env
from jaxrl_async.envs.spaces import observation_shapes
from jaxrl_async.nets.actor_critic import Policy, with_matmul_precision
from jaxrl_async.rollout.collector import Collector, seed_keys
from jaxrl_async.rollout.device import make_rollout
from jaxrl_async.rollout.host import HostRollout
from jaxrl_async.trainer import metrics as metrics_lib
from jaxrl_async.types import Algorithm, TrainState


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


def build(cfg: TrainConfig, backend: str | None = None) -> Components:
    """The run's pieces; the speed settings left at 'auto' take `backend`'s defaults
    (default: `jax.default_backend()`, where the programs will run)."""
    speed = resolve_speed(cfg, backend)
    if host_env_kind(cfg.env):  # stepped on the host (`envs/host/`): no env params
        env, env_params = make_host_env(cfg.env, **parse_env_kwargs(cfg.env_kwargs)), None
        obs_space, action_space = env.observation_space, env.action_space
    else:
        env, env_params = make_env(cfg.env, **parse_env_kwargs(cfg.env_kwargs))
        obs_space, action_space = env.observation_space(env_params), env.action_space(env_params)
    learner = algorithms.learner(cfg.algo)
    policy, nets = learner.networks(cfg, observation_shapes(obs_space), action_space)
    policy = with_matmul_precision(policy, cfg.matmul_precision)
    shared = dict(num_envs=cfg.num_envs, num_steps=cfg.num_steps, gamma=cfg.learner.gamma,
                  gae_lambda=cfg.learner.gae_lambda, normalize_obs=cfg.normalize_obs, gae_scan=speed.gae_scan,
                  noise_correlation=cfg.action_noise_correlation)
    if env_params is None:
        rollout = HostRollout(env, policy, env_groups=cfg.env_groups, **shared)
    else:
        rollout = make_rollout(env, env_params, policy, unroll=speed.scan_unroll, **shared)
    algo = learner.make(cfg, policy, nets, speed.update_unroll)
    evaluate = rollout.evaluator(cfg.eval_episodes, unroll=speed.eval_unroll)
    return Components(cfg, env, env_params, policy, rollout, algo, evaluate, speed)


def init_state(c: Components, key: jax.Array, hparams: Any = None) -> TrainState:
    learner_key, rollout_key = jax.random.split(key)
    return TrainState(learner=c.algo.init(learner_key, hparams), rollout=c.rollout.init(rollout_key))


def check_sweep(c: Components, hparams: Any) -> None:
    """A clear error for sweep hyperparameters that do not fit the config."""
    template = jax.eval_shape(c.algo.init, jax.random.PRNGKey(0)).hparams
    if jax.tree.structure(hparams) != jax.tree.structure(template):
        raise ValueError(f"hparams must be a {type(template).__name__} like the learner's own "
                         f"(see jaxrl_async.sweep_hparams), got {type(hparams).__name__}")
    for name, leaf in zip((f.name for f in dataclasses.fields(template)), jax.tree.leaves(hparams)):
        if jnp.shape(leaf) != (c.cfg.num_seeds,):
            raise ValueError(f"hparams.{name} has shape {jnp.shape(leaf)}; a sweep gives every seed its own "
                             f"value, so it must be [num_seeds] = ({c.cfg.num_seeds},)")


def initial_states(c: Components, hparams: Any = None) -> TrainState:
    """Every seed's initial state, `[S, ...]`.

    The seeds are initialised one after another (`lax.map`), not vmapped: the
    orthogonal initialiser's QR decomposition, batched over seeds, runs LAPACK in
    parallel batches on XLA's CPU thread pool, which can deadlock that pool (seen
    here: a hang in `lapack_sgeqrf` waiting on its own pool). Initialisation is
    cheap; the training itself is still vmapped.
    """
    if hparams is not None:
        check_sweep(c, hparams)
    # hparams=None is an empty pytree: every seed then takes the config's values
    init = jax.jit(lambda keys, hparams: jax.lax.map(lambda args: init_state(c, *args), (keys, hparams)))
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
