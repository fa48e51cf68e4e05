"""The pure pieces of a run, built once from the config, and the iteration both modes share.

The seed axis `S` is always the leading axis of the state the host holds, also
for one seed (`over_seeds`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_async.trainer import metrics as metrics_lib
from jaxrl_async.algorithms import make_algorithm
from jaxrl_async.config import TrainConfig
from jaxrl_async.config import host_env_kind
from jaxrl_async.envs import make_env
from jaxrl_async.envs.host.gymnasium import make_host_env
from jaxrl_async.rollout.evaluate import EvalResult, make_evaluator
from jaxrl_async.rollout.host import HostEvaluator, HostRollout
from jaxrl_async.nets.actor_critic import Policy, at_matmul_precision, make_policy, with_matmul_precision
from jaxrl_async.nets.q import make_q_policy
from jaxrl_async.rollout.device import Rollout, make_rollout
from jaxrl_async.nets.sac import make_sac_policy
from jaxrl_async.envs.spaces import observation_shapes
from jaxrl_async.config import SpeedSettings
from jaxrl_async.config import resolve_speed
from jaxrl_async.types import Algorithm, TrainState


class Components(NamedTuple):
    """The pure functions a run is made of."""

    cfg: TrainConfig
    env: Any
    env_params: Any
    policy: Policy
    rollout: Rollout
    algo: Algorithm
    evaluate: Callable[..., EvalResult]
    speed: SpeedSettings  # the resolved speed settings


def build(cfg: TrainConfig, backend: str | None = None) -> Components:
    """The run's pieces; the speed settings left at 'auto' take `backend`'s defaults
    (default: `jax.default_backend()`, where the programs will run)."""
    if host_env_kind(cfg.env):
        return _build_host(cfg, backend)
    env, env_params = make_env(cfg.env)
    obs_shape = observation_shapes(env.observation_space(env_params))
    policy, q_values, sac_nets = _policy(cfg, obs_shape, env.action_space(env_params))
    speed = resolve_speed(cfg, backend)
    rollout = make_rollout(env, env_params, policy, num_envs=cfg.num_envs, num_steps=cfg.num_steps,
                           gamma=cfg.learner.gamma, gae_lambda=cfg.learner.gae_lambda,
                           normalize_obs=cfg.normalize_obs, unroll=speed.scan_unroll, gae_scan=speed.gae_scan,
                           noise_correlation=cfg.action_noise_correlation)
    algo = make_algorithm(cfg, policy, q_values, unroll=speed.update_unroll, sac_nets=sac_nets)
    evaluate = make_evaluator(env, env_params, policy, num_episodes=cfg.eval_episodes,
                              normalize_obs=cfg.normalize_obs, unroll=speed.eval_unroll)
    return Components(cfg, env, env_params, policy, rollout, algo, evaluate, speed)


def _policy(cfg: TrainConfig, obs_shape, action_space) -> tuple[Policy, Callable | None, Any]:
    """The algorithm's policy, and its learner's own networks: the Q-network (dqn) or SAC's nets."""
    q_values = sac_nets = None
    if cfg.algo == "dqn":
        policy, q_values = make_q_policy(cfg.network, obs_shape, action_space)
        q_values = at_matmul_precision(q_values, cfg.matmul_precision)
    elif cfg.algo == "sac":
        policy, sac_nets = make_sac_policy(cfg.network, obs_shape, action_space)
        sac_nets = sac_nets._replace(actor=at_matmul_precision(sac_nets.actor, cfg.matmul_precision),
                                     critic=at_matmul_precision(sac_nets.critic, cfg.matmul_precision))
    else:
        policy = make_policy(cfg.network, obs_shape, action_space)
    return with_matmul_precision(policy, cfg.matmul_precision), q_values, sac_nets


def _build_host(cfg: TrainConfig, backend: str | None) -> Components:
    """A host env's pieces (`envs/host.py`): `env` is its `HostEnvSpec`, `rollout` a `HostRollout`
    (stepped by the async mode's actor thread), `evaluate` a `HostEvaluator` on envs of its own."""
    spec = make_host_env(cfg.env)
    policy, q_values, sac_nets = _policy(cfg, observation_shapes(spec.observation_space), spec.action_space)
    speed = resolve_speed(cfg, backend)
    rollout = HostRollout(spec, policy, num_envs=cfg.num_envs, num_steps=cfg.num_steps, gamma=cfg.learner.gamma,
                          gae_lambda=cfg.learner.gae_lambda, gae_scan=speed.gae_scan, normalize_obs=cfg.normalize_obs,
                          noise_correlation=cfg.action_noise_correlation)
    algo = make_algorithm(cfg, policy, q_values, unroll=speed.update_unroll, sac_nets=sac_nets)
    return Components(cfg, spec, None, policy, rollout, algo, HostEvaluator(rollout, cfg.eval_episodes), speed)


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """[S] keys; seed index i gets fold_in(PRNGKey(seed), i) whatever num_seeds is."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_seeds))


def over_seeds(fn: Callable, num_seeds: int) -> Callable:
    """vmap `fn` over the leading seed axis of every argument and output.

    With one seed the axis is squeezed and re-added instead, so the single-seed
    program is exactly the unbatched one.
    """
    if num_seeds > 1:
        return jax.vmap(fn)

    def single(*args):
        out = fn(*jax.tree.map(lambda x: x[0], args))
        return jax.tree.map(lambda x: x[None], out)

    return single


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
    return init(seed_keys(c.cfg.seed, c.cfg.num_seeds), hparams)


def iteration(c: Components, state: TrainState) -> tuple[TrainState, dict]:
    """One rollout with the current params, then one update: the unit both modes share."""
    rollout_state, trajectory = c.rollout.collect(state.learner.params, state.rollout)
    learner, update_metrics = c.algo.update(state.learner, trajectory)
    return TrainState(learner, rollout_state), metrics_lib.iteration_metrics(trajectory, update_metrics)


def warm_up(compiled: Callable, *args) -> Any:
    """Run a compiled program once on copies of `args` (donated buffers stay untouched); return
    its outputs, which are not part of the run.

    XLA:CPU does one-time work at a program's first execution: for the reference config
    the first iteration of the compiled loop took ~45 ms against ~3 ms for every later
    one. Callers time this with the compilation, so `compile_s` holds all of it and the
    first host-sync window's steps/s is steady state like the others.
    """
    return jax.block_until_ready(compiled(*jax.tree.map(lambda x: x.copy(), args)))


def all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def run_iterations(c: Components, state: TrainState, num_iterations) -> tuple[TrainState, dict, dict]:
    """`num_iterations` iterations in one loop (the count may be traced: one compiled
    function serves every chunk length). Returns the state, the summed metrics (fixed
    size however many iterations ran) and diagnostics: the first update whose metrics
    were not finite (-1 if none) and whether the final params are finite."""
    step = functools.partial(iteration, c)
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
