"""Training: build the pieces once, then run them fused (K iterations per jit call).

    result = train(TrainConfig(env="CartPole-v1", total_timesteps=500_000))
    result.summary["final_eval_return_mean"]

Both modes call the same `rollout.collect` and `algo.update`; the fused mode puts
`K` of them in one `lax.scan`, vmapped over seeds (and, for sweeps, over
hyperparameters). The seed axis `S` is always the leading axis of the state the
host holds, also for one seed.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async import metrics as metrics_lib
from jaxrl_async import run_dir as run_dir_lib
from jaxrl_async.algorithms import make_algorithm
from jaxrl_async.config import TrainConfig
from jaxrl_async.envs import make_env
from jaxrl_async.evaluate import EvalResult, make_evaluator
from jaxrl_async.networks import Policy, make_policy
from jaxrl_async.rollout import Rollout, make_rollout
from jaxrl_async.types import Algorithm, TrainState


class Components(NamedTuple):
    """The pure functions a run is made of, built once from the config."""

    cfg: TrainConfig
    env: Any
    env_params: Any
    policy: Policy
    rollout: Rollout
    algo: Algorithm
    evaluate: Callable[..., EvalResult]


def build(cfg: TrainConfig) -> Components:
    env, env_params = make_env(cfg.env)
    obs_shape = env.observation_space(env_params).shape
    policy = make_policy(cfg.network, obs_shape, env.action_space(env_params))
    rollout = make_rollout(env, env_params, policy, num_envs=cfg.num_envs, num_steps=cfg.num_steps,
                           gamma=cfg.ppo.gamma, gae_lambda=cfg.ppo.gae_lambda,
                           normalize_obs=cfg.normalize_obs, unroll=cfg.scan_unroll)
    algo = make_algorithm(cfg, policy)
    evaluate = make_evaluator(env, env_params, policy, num_episodes=cfg.eval_episodes,
                              normalize_obs=cfg.normalize_obs)
    return Components(cfg, env, env_params, policy, rollout, algo, evaluate)


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """[S] keys; seed index i gets fold_in(PRNGKey(seed), i) whatever num_seeds is."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_seeds))


def init_state(c: Components, key: jax.Array, hparams: Any = None) -> TrainState:
    learner_key, rollout_key = jax.random.split(key)
    return TrainState(learner=c.algo.init(learner_key, hparams), rollout=c.rollout.init(rollout_key))


def iteration(c: Components, state: TrainState) -> tuple[TrainState, dict]:
    """One rollout with the current params, then one update: the unit both modes share."""
    rollout_state, trajectory = c.rollout.collect(state.learner.params, state.rollout)
    learner, update_metrics = c.algo.update(state.learner, trajectory)
    return TrainState(learner, rollout_state), metrics_lib.iteration_metrics(trajectory, update_metrics)


def run_iterations(c: Components, state: TrainState, num_iterations: int) -> tuple[TrainState, dict]:
    """`num_iterations` iterations in one `lax.scan`; returns the summed metrics (fixed size)."""
    step = functools.partial(iteration, c)
    zeros = metrics_lib.zeros_like_metrics(lambda s: step(s)[1], state)

    def body(carry, _):
        state, sums = carry
        state, m = step(state)
        return (state, metrics_lib.accumulate(sums, m)), None

    (state, sums), _ = jax.lax.scan(body, (state, zeros), None, length=num_iterations)
    return state, sums


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


def chunk_plan(num_updates: int, iterations_per_call: int | str) -> list[int]:
    """Iterations per jit call. 'auto': about 20 host syncs, preferring a divisor of
    `num_updates` so one compiled function serves every call; 'all': one call."""
    if iterations_per_call == "all":
        return [num_updates]
    k = iterations_per_call
    if k == "auto":
        target = max(1, round(num_updates / 20))
        divisors = [d for d in range(max(1, -(-target // 2)), 2 * target + 1) if num_updates % d == 0]
        k = min(divisors, key=lambda d: abs(d - target)) if divisors else target
    k = min(k, num_updates)
    plan = [k] * (num_updates // k)
    return plan + ([num_updates % k] if num_updates % k else [])


@dataclasses.dataclass
class TrainResult:
    summary: dict
    state: TrainState  # leading seed axis [S]
    run_dir: str | None
    eval_result: EvalResult | None = None


def check_finite(sums: dict, iteration_index: int) -> None:
    for name in ("loss", "grad_norm", "policy_loss", "value_loss"):
        if name in sums and not np.all(np.isfinite(np.asarray(sums[name]))):
            raise FloatingPointError(
                f"training diverged: {name} became non-finite in the updates up to iteration "
                f"{iteration_index}; lower --learning-rate or --max-grad-norm")


def final_evaluation(c: Components, state: TrainState, num_seeds: int, seed: int) -> EvalResult:
    keys = jax.vmap(lambda k: jax.random.fold_in(k, 0x5EED))(seed_keys(seed, num_seeds))
    evaluate = jax.jit(over_seeds(c.evaluate, num_seeds))
    return evaluate(state.learner.params, state.rollout.obs_stats, keys)


class Run:
    """The host side of one training run: its pieces, its directory and its metric sinks."""

    def __init__(self, cfg: TrainConfig, console: bool):
        self.wall_start = time.perf_counter()
        self.cfg = cfg
        self.c = build(cfg)  # bad input (an unknown env id, say) fails before anything is written
        self.run_dir = run_dir_lib.create_run_dir(cfg.run_dir or run_dir_lib.default_run_dir(cfg.env, cfg.algo))
        run_dir_lib.write_json(f"{self.run_dir}/{run_dir_lib.CONFIG_FILE}", cfg.to_dict())
        self.console = console
        self.sinks = metrics_lib.open_sinks(self.run_dir, cfg.env_steps, console)

    def log(self, record: dict) -> None:
        for sink in self.sinks:
            sink.write(record)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def train_fused(run: Run, state: TrainState) -> tuple[TrainState, dict]:
    """K iterations per jit call, donated state, metrics summed on the device."""
    cfg, num_seeds = run.cfg, run.cfg.num_seeds
    plan = chunk_plan(cfg.num_updates, cfg.iterations_per_call)
    compile_start = time.perf_counter()
    # ahead-of-time compile, so compile time is measured apart from steady-state time
    compiled = {k: jax.jit(over_seeds(functools.partial(run_iterations, run.c, num_iterations=k), num_seeds),
                           donate_argnums=0).lower(state).compile() for k in sorted(set(plan))}
    compile_s = time.perf_counter() - compile_start
    train_s, done = 0.0, 0
    for k in plan:
        start = time.perf_counter()
        state, sums = compiled[k](state)
        sums = jax.device_get(sums)
        elapsed = time.perf_counter() - start
        train_s += elapsed
        done += k
        check_finite(sums, done)
        run.log(window_record(cfg, metrics_lib.finalize(sums, k), done, k, elapsed, run.wall_start))
    return state, {"compile_s": compile_s, "train_s": train_s}


def train(cfg: TrainConfig, *, console: bool = True, hparams: Any = None) -> TrainResult:
    """Train `cfg.num_seeds` seeds; write the run directory; return the summary and final state.

    Args:
      cfg: the run's configuration (`cfg.mode` picks fused or async).
      console: print a progress line per host sync.
      hparams: optional algorithm hyperparameters with a leading `[S]` axis (a sweep
        vmapped inside one jit); default: the config's values for every seed.
    """
    run = Run(cfg, console)
    try:
        init_start = time.perf_counter()
        init = jax.jit(over_seeds(functools.partial(init_state, run.c), cfg.num_seeds))
        state = init(seed_keys(cfg.seed, cfg.num_seeds), hparams)
        init_s = time.perf_counter() - init_start
        if cfg.mode == "fused":
            state, timing = train_fused(run, state)
        else:
            from jaxrl_async.async_train import train_async  # the pipeline, only when asked for

            state, timing = train_async(run, state)
        timing["compile_s"] += init_s
        eval_result = jax.device_get(final_evaluation(run.c, state, cfg.num_seeds, cfg.seed))
    finally:
        run.close()
    summary = make_summary(cfg, state, eval_result, wall_s=time.perf_counter() - run.wall_start, **timing)
    run_dir_lib.write_json(f"{run.run_dir}/{run_dir_lib.SUMMARY_FILE}", summary)
    if console:
        print(f"final greedy return {summary['final_eval_return_mean']:.2f} "
              f"(per seed {[round(r, 2) for r in summary['final_eval_return']]}); run dir {run.run_dir}")
    return TrainResult(summary, state, run.run_dir, eval_result)


def window_record(cfg: TrainConfig, window: dict, updates_done: int, num_iterations: int,
                  elapsed: float, wall_start: float) -> dict:
    """One metrics.jsonl line: means over seeds (per-seed lists for the episode return)."""
    record = {"iteration": updates_done, "env_steps": updates_done * cfg.batch_size,
              "num_seeds": cfg.num_seeds,
              "steps_per_second": cfg.num_seeds * num_iterations * cfg.batch_size / elapsed,
              "wall_s": time.perf_counter() - wall_start}
    for name, value in window.items():
        record[name] = metrics_lib.seed_mean(value)
    if cfg.num_seeds > 1:
        record["episode_return_per_seed"] = np.asarray(window["episode_return_mean"]).tolist()
    return record


def make_summary(cfg: TrainConfig, state: TrainState, eval_result: EvalResult, *,
                 wall_s: float, compile_s: float, train_s: float, **extra) -> dict:
    returns = np.asarray(eval_result.returns)  # [S, N]
    complete = np.asarray(eval_result.complete)
    per_seed = [float(r[m].mean()) if m.any() else float("nan") for r, m in zip(returns, complete)]
    params = state.learner.params
    digests = [run_dir_lib.params_digest(jax.tree.map(lambda x: x[i], params)) for i in range(cfg.num_seeds)]
    return {
        "env_id": cfg.env,
        "algo": cfg.algo,
        "mode": cfg.mode,
        "num_seeds": cfg.num_seeds,
        "env_steps": cfg.env_steps,
        "num_updates": cfg.num_updates,
        "final_eval_return": per_seed,
        "final_eval_return_mean": float(np.nanmean(per_seed)),
        "final_eval_episodes": int(complete.sum(axis=-1).min()),
        "wall_s": wall_s,
        "compile_s": compile_s,
        "train_s": train_s,
        "steps_per_second": cfg.num_seeds * cfg.env_steps / train_s,
        "params_digest": digests,
        **extra,
    }
