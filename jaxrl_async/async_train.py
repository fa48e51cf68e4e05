"""Async training: a rollout thread acts while the learner learns (`--mode async`).

The actor thread runs the jitted `rollout.collect` with the params the lag
policy allows and double-buffers the results; the learner runs the jitted
`algo.update` on each rollout and publishes the new params to the `ParamStore`.
The same `collect` and `update` as the fused mode, the same schedule of host
syncs, evaluations and checkpoints (`run.py`), so with `lag=0` the two modes
reach bit-identical params and write the same metrics lines in everything but
the timings (with several seeds a reduction such as explained variance may differ
in its last bits: XLA may order it differently inside the fused loop).
"""

from __future__ import annotations

import time

import jax
import numpy as np
from flax import serialization

from jaxrl_async import metrics as metrics_lib
from jaxrl_async.components import all_finite, over_seeds, warm_up
from jaxrl_async.pipeline import ParamStore, RolloutWorker
from jaxrl_async.run import Run, check_finite
from jaxrl_async.types import TrainState

# Per-iteration pipeline timings, averaged over each log window.
TIMING_FIELDS = ("policy_lag", "learner_wait_s", "actor_wait_s", "rollout_s", "update_s")


def compile_pipeline(run: Run, state: TrainState):
    """AOT-compile the actor's collect and the learner's update for this state's shapes and
    placement (both keep their state's shardings from call to call), and warm both up."""
    c, num_seeds = run.c, run.cfg.num_seeds
    shardings = run.placement.shardings(state)

    def collect_fn(params, rollout_state):
        rollout_state, trajectory = over_seeds(c.rollout.collect, num_seeds)(params, rollout_state)
        return jax.lax.with_sharding_constraint(rollout_state, shardings.rollout), trajectory

    def learn_fn(learner, trajectory):
        def learn_one(learner, trajectory):
            learner, update_metrics = c.algo.update(learner, trajectory)
            return learner, metrics_lib.iteration_metrics(trajectory, update_metrics), all_finite(learner.params)

        learner, metrics, finite = over_seeds(learn_one, num_seeds)(learner, trajectory)
        return jax.lax.with_sharding_constraint(learner, shardings.learner), metrics, finite

    collect = jax.jit(collect_fn).lower(state.learner.params, state.rollout).compile()
    # the learner is compiled for the trajectory exactly as collect lays it out
    _, trajectory = jax.eval_shape(collect_fn, state.learner.params, state.rollout)
    _, trajectory_shardings = collect.output_shardings
    trajectory = jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
                              trajectory, trajectory_shardings)
    # nothing is donated: the learner's params are published, and no output could reuse the trajectory
    learn = jax.jit(learn_fn).lower(state.learner, trajectory).compile()
    _, trajectory = warm_up(collect, state.learner.params, state.rollout)
    warm_up(learn, state.learner, trajectory)
    return collect, learn


def _param_store(state: TrainState, start: int, saved: dict | None) -> ParamStore:
    """Versions count updates. A resumed lag-1 run needs version start-1 too: its next rollout uses it."""
    behaviour = (saved or {}).get("extra", {}).get("behaviour_params")
    if start == 0:
        store = ParamStore()
    else:
        store = ParamStore(first_version=start - 1)
        # a fused-mode checkpoint holds no older params: the current ones stand in (not bit-exact)
        previous = state.learner.params if behaviour is None else \
            serialization.from_state_dict(state.learner.params, behaviour)
        store.publish(previous)
    store.publish(state.learner.params)
    return store


def train_async(run: Run, state: TrainState, saved: dict | None = None,
                stop_after: int | None = None) -> tuple[TrainState, dict]:
    cfg = run.cfg
    compile_start = time.perf_counter()
    collect, learn = compile_pipeline(run, state)
    compile_s = time.perf_counter() - compile_start

    start = run.start_update
    sync_at = set(run.remaining_points())
    warmup = start + min(2, cfg.num_updates - start - 1)  # the first rollouts wait on a pipeline still filling
    steady = dict.fromkeys(("rollout_s", "update_s", "learner_wait_s"), 0.0)
    steady_start, steady_host_s, lags, first_bad = None, 0.0, [], None
    store = _param_store(state, start, saved)
    learner, rollout_state, done = state.learner, state.rollout, start
    sums, timings, window_start, window_iterations = None, dict.fromkeys(TIMING_FIELDS, 0.0), None, 0
    train_start = time.perf_counter()
    with RolloutWorker(collect, rollout_state, store, lag=cfg.lag, num_rollouts=cfg.num_updates - start,
                       buffer_size=cfg.buffer_size, first_index=start) as worker:
        for k in range(start, cfg.num_updates):
            if k == warmup:
                steady_start, steady_host_s = time.perf_counter(), run.host_s
            window_start = window_start or time.perf_counter()
            wait_start = time.perf_counter()
            item = worker.get()
            learner_wait_s = time.perf_counter() - wait_start
            update_start = time.perf_counter()
            # only the metrics come to the host: the learner state stays on the device (fetching it
            # and sending it back every update was work on the learner's critical path for nothing)
            learner, iteration_metrics, params_finite = learn(learner, item.trajectory)
            iteration_metrics, params_finite = jax.device_get((iteration_metrics, params_finite))
            store.publish(learner.params)
            update_s = time.perf_counter() - update_start
            rollout_state, done = item.rollout_state, k + 1
            if first_bad is None and not (np.all(np.isfinite(iteration_metrics["loss"]))
                                          and np.all(np.isfinite(iteration_metrics["grad_norm"]))):
                first_bad = k
            sample = {"policy_lag": k - item.version, "learner_wait_s": learner_wait_s,
                      "actor_wait_s": item.actor_wait_s, "rollout_s": item.rollout_s, "update_s": update_s}
            lags.append(sample["policy_lag"])
            timings = {f: timings[f] + sample[f] for f in TIMING_FIELDS}
            sums = iteration_metrics if sums is None else jax.tree.map(np.add, sums, iteration_metrics)
            window_iterations += 1
            if k >= warmup:
                for f in steady:
                    steady[f] += sample[f]
            if done not in sync_at:
                continue
            check_finite({**sums, "params_finite": params_finite}, done, first_bad, run.last_checkpoint)
            elapsed = time.perf_counter() - window_start
            record = run.window_record(metrics_lib.finalize(sums, window_iterations), done,
                                       window_iterations, elapsed)
            record.update({f: timings[f] / window_iterations for f in TIMING_FIELDS})
            record["updates_per_second"] = window_iterations / elapsed
            record["samples_per_update"] = cfg.num_seeds * cfg.batch_size
            state = TrainState(learner=learner, rollout=rollout_state)
            stopping = run.should_stop(done, stop_after)
            run.eval_result = run.after_sync(
                state, done, record, stopping=stopping, counters={"params_version": store.version},
                # the next rollout (lag 1) is collected with the previous version: keep it for an exact resume
                extra_state={"behaviour_params": serialization.to_state_dict(store.get(done - 1))}
                if cfg.lag == "1" else None) or run.eval_result
            sums, timings, window_start, window_iterations = None, dict.fromkeys(TIMING_FIELDS, 0.0), None, 0
            if stopping:
                break
    end = time.perf_counter()
    # evaluation and checkpoints at host syncs are reported apart, as in the fused mode
    steady_wall = end - (steady_start or train_start) - (run.host_s - steady_host_s)
    extra = {
        "compile_s": compile_s,
        "train_s": end - train_start - run.host_s,
        "updates_done": done,
        "lag": cfg.lag,
        # (rollout + update) / wall over the steady state: 1.0 = no overlap, 2.0 = perfect overlap
        "overlap_efficiency": (steady["rollout_s"] + steady["update_s"]) / steady_wall,
        "learner_wait_fraction": steady["learner_wait_s"] / steady_wall,
        "policy_lag_mean": float(np.mean(lags)),
        "policy_lag_max": int(np.max(lags)),
        "params_version": store.version,
    }
    return TrainState(learner=learner, rollout=rollout_state), extra
