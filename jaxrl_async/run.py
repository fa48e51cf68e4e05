"""The host side of a run, shared by both modes: when to sync, evaluate and checkpoint;
the metric sinks; the best params; Ctrl-C; divergence; the summary.

The schedule is a list of host-sync points (updates done) fixed by the config, so
an interrupted and resumed run syncs, evaluates and checkpoints at exactly the
same updates as one that ran straight through, and writes the same metrics.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time

import jax
import numpy as np

from jaxrl_async import checkpoint as ckpt
from jaxrl_async import metrics as metrics_lib
from jaxrl_async import run_dir as run_dir_lib
from jaxrl_async.config import TrainConfig
from jaxrl_async.evaluate import EvalResult
from jaxrl_async.sharding import Placement
from jaxrl_async.types import TrainState

AUTO_SYNCS = 20  # host syncs per run when iterations_per_call is 'auto' ...
MAX_AUTO_ITERATIONS = 50  # ... but at most this many iterations between them
AUTO_EVALS = 10
EVAL_STREAM = 0x5EED  # evaluation keys: fold_in(fold_in(seed key, EVAL_STREAM), update)


class TrainingDiverged(FloatingPointError):
    """A loss, gradient or parameter became NaN or infinite."""


def chunk_plan(num_updates: int, iterations_per_call: int | str) -> list[int]:
    """Iterations between host syncs (the log cadence): 'auto' about 20 syncs of at most
    50 iterations; 'all' one call for the whole run."""
    if iterations_per_call == "all":
        return [num_updates]
    k = iterations_per_call
    if k == "auto":
        k = min(max(1, math.ceil(num_updates / AUTO_SYNCS)), MAX_AUTO_ITERATIONS)
    k = min(k, num_updates)
    plan = [k] * (num_updates // k)
    return plan + ([num_updates % k] if num_updates % k else [])


def intervals(cfg: TrainConfig) -> tuple[int, int]:
    """(eval_interval, checkpoint_interval) in updates; 0 = only at the end.

    'auto' picks a multiple of the log cadence, so it adds no host syncs: about 10
    evaluations per run (none before the end with iterations_per_call='all').
    """
    plan = chunk_plan(cfg.num_updates, cfg.iterations_per_call)
    eval_every = cfg.eval_interval
    if eval_every == "auto":
        eval_every = 0 if len(plan) == 1 else plan[0] * max(1, round(len(plan) / AUTO_EVALS))
    ckpt_every = eval_every if cfg.checkpoint_interval == "auto" else cfg.checkpoint_interval
    return eval_every, ckpt_every


def sync_points(cfg: TrainConfig) -> list[int]:
    """Updates done at each host sync: the log cadence plus every eval and checkpoint point."""
    n = cfg.num_updates
    points = set(np.cumsum(chunk_plan(n, cfg.iterations_per_call)).tolist()) | {n}
    for every in intervals(cfg):
        if every:
            points |= set(range(every, n + 1, every))
    return sorted(points)


def check_finite(sums: dict, updates_done: int, first_bad: int | None = None,
                 last_good: str | None = None) -> None:
    """Raise TrainingDiverged naming the metric that went non-finite, the update and the last
    good checkpoint. `sums` may hold `params_finite` (False where the params are not finite)."""
    culprit = next((name for name in ("loss", "policy_loss", "value_loss", "grad_norm")
                    if name in sums and not np.all(np.isfinite(np.asarray(sums[name], np.float64)))), None)
    if culprit is None and "params_finite" in sums and not np.all(sums["params_finite"]):
        culprit = "the params"
    if culprit is None:
        return
    where = f"update {first_bad}" if first_bad is not None else f"the updates up to {updates_done}"
    tail = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint was written yet"
    raise TrainingDiverged(f"training diverged: {culprit} became NaN or infinite at {where}; {tail}; "
                           "lower --learning-rate or --max-grad-norm")


class StopRequest:
    """Ctrl-C asks the loop to stop at the next host sync (and checkpoint); a second Ctrl-C aborts."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame):
        self.requested = True
        print("\ninterrupt: finishing the current step, then writing a checkpoint "
              "(press Ctrl-C again to abort at once)", flush=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class Run:
    """One run's directory, sinks, schedule, best-so-far tracking and checkpoints."""

    def __init__(self, cfg: TrainConfig, c, *, console: bool, resume: dict | None = None,
                 placement: Placement | None = None):
        self.wall_start = time.perf_counter()
        self.cfg = cfg
        self.c = c
        self.console = console
        if resume is None:
            self.run_dir = run_dir_lib.create_run_dir(cfg.run_dir or run_dir_lib.default_run_dir(cfg.env, cfg.algo))
        else:
            self.run_dir = cfg.run_dir
        run_dir_lib.write_json(os.path.join(self.run_dir, run_dir_lib.CONFIG_FILE), cfg.to_dict())
        self.points = sync_points(cfg)
        self.eval_every, self.ckpt_every = intervals(cfg)
        counters = (resume or {}).get("counters", {})
        extra = (resume or {}).get("extra", {})
        self.start_update = int(counters.get("updates", 0))
        self.best_eval_return = extra.get("best_eval_return")
        self.last_checkpoint = resume.get("path") if resume else None
        self.stop = StopRequest()
        self.sinks = metrics_lib.open_sinks(self.run_dir, cfg.env_steps, console, start_steps=self.start_update
                                            * cfg.batch_size, tensorboard=cfg.tensorboard)
        self._evaluate = None
        # where the state lives (train() places the state before the run starts)
        self.placement = placement or Placement(cfg.devices, cfg.num_seeds, cfg.num_envs)
        self.eval_result: EvalResult | None = None
        self.host_s = 0.0  # evaluation, checkpoints and logging at host syncs

    # -- schedule --------------------------------------------------------
    def remaining_points(self) -> list[int]:
        return [p for p in self.points if p > self.start_update]

    def is_eval_point(self, updates: int) -> bool:
        return updates == self.cfg.num_updates or bool(self.eval_every and updates % self.eval_every == 0)

    def is_checkpoint_point(self, updates: int) -> bool:
        return updates == self.cfg.num_updates or bool(self.ckpt_every and updates % self.ckpt_every == 0)

    # -- evaluation ------------------------------------------------------
    def evaluate(self, state: TrainState, updates: int, greedy: bool = True) -> EvalResult:
        """Evaluate every seed on its own envs; the key depends only on the seed and the update."""
        from jaxrl_async.training import over_seeds, seed_keys

        if self._evaluate is None:
            self._evaluate = {
                mode: jax.jit(over_seeds(lambda p, s, k, g=mode: self.c.evaluate(p, s, k, greedy=g),
                                         self.cfg.num_seeds)) for mode in (True, False)}
        keys = jax.vmap(lambda k: jax.random.fold_in(jax.random.fold_in(k, EVAL_STREAM), updates))(
            seed_keys(self.cfg.seed, self.cfg.num_seeds))
        return jax.device_get(self._evaluate[greedy](state.learner.params, state.rollout.obs_stats, keys))

    # -- one host sync ---------------------------------------------------
    def should_stop(self, updates: int, stop_after: int | None) -> bool:
        """Ctrl-C was pressed, or the caller's stop point is reached (decided once per sync)."""
        return self.stop.requested or (stop_after is not None and updates >= stop_after)

    def after_sync(self, state: TrainState, updates: int, record: dict, *, stopping: bool = False,
                   extra_state: dict | None = None, counters: dict | None = None) -> EvalResult | None:
        """Evaluate, log and checkpoint as the schedule (or a stop request) says; the time it
        takes is counted in `host_s`, apart from the training loop's."""
        start = time.perf_counter()
        try:
            return self._after_sync(state, updates, record, stopping, extra_state, counters)
        finally:
            self.host_s += time.perf_counter() - start

    def _after_sync(self, state, updates, record, stopping, extra_state, counters) -> EvalResult | None:
        eval_result = None
        if self.is_eval_point(updates):
            eval_result = self.evaluate(state, updates)
            record.update(seed_means(eval_result.summary_per_seed("eval")))
            if self.cfg.eval_stochastic:
                record.update(seed_means(self.evaluate(state, updates, greedy=False).summary_per_seed("eval_stochastic")))
            score = record.get("eval_return_mean")
            if score is not None and (self.best_eval_return is None or score > self.best_eval_return):
                self.best_eval_return = score
                self.save(state, updates, os.path.join(ckpt.checkpoint_dir(self.run_dir), ckpt.BEST),
                          extra_state, counters)
            record["best_eval_return"] = self.best_eval_return
        for sink in self.sinks:
            sink.write(record)
        if self.is_checkpoint_point(updates) or stopping:
            self.last_checkpoint = self.save(state, updates, ckpt.numbered_path(self.run_dir, updates),
                                             extra_state, counters)
            ckpt.prune(self.run_dir, self.cfg.keep_checkpoints)
        return eval_result

    def save(self, state: TrainState, updates: int, path: str, extra_state: dict | None,
             counters: dict | None) -> str:
        counters = {"updates": updates, "env_steps": updates * self.cfg.batch_size, **(counters or {})}
        extra = {"best_eval_return": self.best_eval_return, **(extra_state or {})}
        return ckpt.save(path, state=state, config=metrics_lib.to_jsonable(self.cfg.to_dict()),
                         counters=counters, extra=extra)

    def window_record(self, window: dict, updates_done: int, num_iterations: int, elapsed: float) -> dict:
        """One metrics.jsonl line: means over seeds (per-seed lists for the episode return)."""
        cfg = self.cfg
        record = {"iteration": updates_done, "env_steps": updates_done * cfg.batch_size,
                  "num_seeds": cfg.num_seeds,
                  "steps_per_second": cfg.num_seeds * num_iterations * cfg.batch_size / elapsed,
                  "wall_s": time.perf_counter() - self.wall_start}
        for name, value in window.items():
            record[name] = metrics_lib.seed_mean(value)
        if cfg.num_seeds > 1:
            record["episode_return_per_seed"] = np.asarray(window["episode_return_mean"]).tolist()
        return record

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def seed_means(per_seed: dict) -> dict:
    """{name: [S] values} -> {name: mean over seeds}, plus the per-seed list of the mean return."""
    out = {name: metrics_lib.seed_mean(values) for name, values in per_seed.items()}
    for name, values in per_seed.items():
        if name.endswith("_return_mean") and np.size(values) > 1:
            out[name.replace("_mean", "_per_seed")] = np.asarray(values).tolist()
    return out
