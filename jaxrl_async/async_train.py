"""Async training: a rollout thread acts while the learner learns (`--mode async`).

The actor thread runs the jitted `rollout.collect` with the params the lag
policy allows and double-buffers the results; the learner runs the jitted
`algo.update` on each rollout and publishes the new params to the `ParamStore`.
The same `collect` and `update` as the fused mode, the same config, metrics,
evaluation and summary; the host logs at the same iteration boundaries as the
fused mode, so with `lag=0` the two metrics streams match line for line in
everything but the timings.
"""

from __future__ import annotations

import functools
import time

import jax
import numpy as np

from jaxrl_async import metrics as metrics_lib
from jaxrl_async.pipeline import ParamStore, RolloutWorker
from jaxrl_async.train import Run, check_finite, chunk_plan, over_seeds, window_record
from jaxrl_async.types import TrainState

# Per-iteration pipeline timings, averaged over each log window.
TIMING_FIELDS = ("policy_lag", "learner_wait_s", "actor_wait_s", "rollout_s", "update_s")


def _learn(c, learner, trajectory):
    learner, update_metrics = c.algo.update(learner, trajectory)
    return learner, metrics_lib.iteration_metrics(trajectory, update_metrics)


def compile_pipeline(run: Run, state: TrainState):
    """AOT-compile the actor's collect and the learner's update for this state's shapes."""
    c, num_seeds = run.c, run.cfg.num_seeds
    collect = jax.jit(over_seeds(c.rollout.collect, num_seeds)).lower(
        state.learner.params, state.rollout).compile()
    _, trajectory = jax.eval_shape(over_seeds(c.rollout.collect, num_seeds), state.learner.params, state.rollout)
    # nothing is donated: the learner's params are published, and no output could reuse the trajectory
    learn = jax.jit(over_seeds(functools.partial(_learn, c), num_seeds)).lower(
        state.learner, trajectory).compile()
    return collect, learn


def train_async(run: Run, state: TrainState) -> tuple[TrainState, dict]:
    cfg = run.cfg
    compile_start = time.perf_counter()
    collect, learn = compile_pipeline(run, state)
    compile_s = time.perf_counter() - compile_start

    plan = chunk_plan(cfg.num_updates, cfg.iterations_per_call)
    log_after = set(np.cumsum(plan).tolist())
    warmup = min(2, cfg.num_updates - 1)  # the first rollouts wait on a pipeline still filling
    steady = {"start": None, "rollout_s": 0.0, "update_s": 0.0, "learner_wait_s": 0.0}
    lags: list[int] = []
    store = ParamStore()
    store.publish(state.learner.params)
    learner, rollout_state = state.learner, state.rollout
    sums, timings, window_start, window_iterations = None, dict.fromkeys(TIMING_FIELDS, 0.0), None, 0
    train_start = time.perf_counter()
    with RolloutWorker(collect, rollout_state, store, lag=cfg.lag, num_rollouts=cfg.num_updates,
                       buffer_size=cfg.buffer_size) as worker:
        for k in range(cfg.num_updates):
            if k == warmup:
                steady["start"] = time.perf_counter()
            window_start = window_start or time.perf_counter()
            wait_start = time.perf_counter()
            item = worker.get()
            learner_wait_s = time.perf_counter() - wait_start
            update_start = time.perf_counter()
            learner, iteration_metrics = learn(learner, item.trajectory)
            iteration_metrics = jax.device_get(iteration_metrics)
            store.publish(learner.params)
            update_s = time.perf_counter() - update_start
            rollout_state = item.rollout_state
            lags.append(k - item.version)  # learner's params version minus the behaviour version
            sample = {"policy_lag": k - item.version, "learner_wait_s": learner_wait_s,
                      "actor_wait_s": item.actor_wait_s, "rollout_s": item.rollout_s, "update_s": update_s}
            timings = {f: timings[f] + sample[f] for f in TIMING_FIELDS}
            sums = iteration_metrics if sums is None else jax.tree.map(np.add, sums, iteration_metrics)
            window_iterations += 1
            if k >= warmup:
                for f in ("rollout_s", "update_s", "learner_wait_s"):
                    steady[f] += sample[f]
            if k + 1 in log_after:
                check_finite(sums, k + 1)
                elapsed = time.perf_counter() - window_start
                record = window_record(cfg, metrics_lib.finalize(sums, window_iterations), k + 1,
                                       window_iterations, elapsed, run.wall_start)
                record.update({f: timings[f] / window_iterations for f in TIMING_FIELDS})
                record["updates_per_second"] = window_iterations / elapsed
                record["samples_per_update"] = cfg.num_seeds * cfg.batch_size
                run.log(record)
                sums, timings, window_start, window_iterations = None, dict.fromkeys(TIMING_FIELDS, 0.0), None, 0
    end = time.perf_counter()
    steady_wall = end - (steady["start"] or train_start)
    extra = {
        "compile_s": compile_s,
        "train_s": end - train_start,
        "lag": cfg.lag,
        # (rollout + update) / wall over the steady state: 1.0 = no overlap, 2.0 = perfect overlap
        "overlap_efficiency": (steady["rollout_s"] + steady["update_s"]) / steady_wall,
        "learner_wait_fraction": steady["learner_wait_s"] / steady_wall,
        "policy_lag_mean": float(np.mean(lags)),
        "policy_lag_max": int(np.max(lags)),
        "params_version": store.version,
    }
    return TrainState(learner=learner, rollout=rollout_state), extra
