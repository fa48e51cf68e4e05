"""Training: `train(cfg)` runs the fused or the async mode over the shared host loop.

    result = train(TrainConfig(env="CartPole-v1", total_timesteps=500_000))
    result.summary["final_eval_return_mean"]

Fused mode: the iterations between two host syncs run as one jitted loop over
`rollout.collect` + `algo.update`, vmapped over seeds (and, for sweeps, over
hyperparameters); metrics are summed on the device. At each sync the host logs,
evaluates and checkpoints as the schedule says (`run.py`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async import checkpoint as ckpt
from jaxrl_async import metrics as metrics_lib
from jaxrl_async import run_dir as run_dir_lib
from jaxrl_async.components import (Components, build, init_state, initial_states, iteration, over_seeds,
                                    run_iterations, seed_keys, warm_up)
from jaxrl_async.config import TrainConfig
from jaxrl_async.evaluate import EvalResult
from jaxrl_async.run import Run, TrainingDiverged, check_finite, chunk_plan, sync_points
from jaxrl_async.sharding import Placement
from jaxrl_async.types import TrainState

__all__ = ["Components", "Run", "TrainResult", "TrainingDiverged", "build", "check_finite", "chunk_plan",
           "init_state", "iteration", "over_seeds", "run_iterations", "seed_keys", "sync_points", "train"]


@dataclasses.dataclass
class TrainResult:
    summary: dict
    state: TrainState  # leading seed axis [S]
    run_dir: str | None
    eval_result: EvalResult | None = None
    completed: bool = True  # False when stopped early (Ctrl-C or stop_after_updates)


def compile_fused(c: Components, state: TrainState, shardings: Any):
    """AOT-compile `state, n -> (state, metric sums, diagnostics)` for any iteration count n
    and warm it up with one iteration on a copy of the state; the state keeps its
    placement (`shardings`) from call to call."""
    def run_chunk(state, num_iterations):
        state, sums, diagnostics = over_seeds(lambda s: run_iterations(c, s, num_iterations),
                                              c.cfg.num_seeds)(state)
        return jax.lax.with_sharding_constraint(state, shardings), sums, diagnostics

    compiled = jax.jit(run_chunk, donate_argnums=0).lower(state, jnp.int32(1)).compile()
    warm_up(compiled, state, jnp.int32(1))
    return compiled


def train_fused(run: Run, state: TrainState, stop_after: int | None = None) -> tuple[TrainState, dict]:
    """Run the iterations between host syncs as single jit calls; donate the state between them."""
    compile_start = time.perf_counter()
    run_chunk = compile_fused(run.c, state, run.placement.shardings(state))
    compile_s = time.perf_counter() - compile_start
    train_s, done = 0.0, run.start_update
    for point in run.remaining_points():
        start = time.perf_counter()
        new_state, sums, diagnostics = run_chunk(state, jnp.int32(point - done))
        sums, diagnostics = jax.device_get((sums, diagnostics))
        elapsed = time.perf_counter() - start
        bad = np.asarray(diagnostics["first_nonfinite_update"])
        check_finite({**sums, "params_finite": diagnostics["params_finite"]}, point,
                     int(bad[bad >= 0].min()) if (bad >= 0).any() else None, run.last_checkpoint)
        state, train_s = new_state, train_s + elapsed
        record = run.window_record(metrics_lib.finalize(sums, point - done), point, point - done, elapsed)
        done = point
        stopping = run.should_stop(done, stop_after)
        run.eval_result = run.after_sync(state, done, record, stopping=stopping) or run.eval_result
        if stopping:
            break
    return state, {"compile_s": compile_s, "train_s": train_s, "updates_done": done}


def load_resume(cfg: TrainConfig, c: Components, template: TrainState) -> tuple[TrainState, dict]:
    """The latest checkpoint of `cfg.run_dir`, checked against this config."""
    path = ckpt.latest_checkpoint(cfg.run_dir)
    if path is None:
        raise ckpt.CheckpointError(f"{cfg.run_dir!r} has no checkpoint to resume from "
                                   f"(looked in {ckpt.checkpoint_dir(cfg.run_dir)}); start a new run instead")
    saved = ckpt.load(path)
    TrainConfig.from_dict(saved["config"]).check_resumable_as(cfg)
    done = int(saved["counters"]["updates"])
    if done >= cfg.num_updates:
        raise ValueError(f"run {cfg.run_dir!r} already has {done} updates ({done * cfg.batch_size} env steps); "
                         "pass a larger --total-timesteps to extend it")
    state = ckpt.restore_state(template, saved["state"], path)
    # the hyperparameters are this config's (a resume may change them), not the checkpoint's
    state = state.replace(learner=state.learner.replace(hparams=template.learner.hparams))
    return state, {**saved, "path": path}


def train(cfg: TrainConfig, *, console: bool = True, hparams: Any = None, resume: bool = False,
          stop_after_updates: int | None = None) -> TrainResult:
    """Train `cfg.num_seeds` seeds; write the run directory; return the summary and final state.

    Args:
      cfg: the run's configuration (`cfg.mode` picks fused or async).
      console: print progress lines.
      hparams: optional algorithm hyperparameters with a leading `[S]` axis (a sweep
        vmapped inside one jit); default: the config's values for every seed.
      resume: continue the run in `cfg.run_dir` from its latest checkpoint.
      stop_after_updates: stop (with a checkpoint) at the first host sync at or after
        this many updates, as Ctrl-C does; `--resume` continues exactly from there.
    """
    wall_start = time.perf_counter()
    c = build(cfg)  # bad input (an unknown env id, say) fails before anything is written
    if resume and not cfg.run_dir:
        raise ValueError("resume needs the run directory: --resume RUN_DIR")
    placement = Placement(cfg.devices, cfg.num_seeds, cfg.num_envs)
    init_start = time.perf_counter()
    state = initial_states(c, hparams)
    init_s = time.perf_counter() - init_start
    saved = None
    if resume:
        state, saved = load_resume(cfg, c, state)
    state = placement.place(state)
    run = Run(cfg, c, console=console, resume=saved, placement=placement)
    if console and placement.num_devices > 1:
        print(f"placement: {placement.describe()}", flush=True)
    run.wall_start = wall_start
    try:
        with run.stop:
            if cfg.mode == "fused":
                state, timing = train_fused(run, state, stop_after_updates)
            else:
                from jaxrl_async.async_train import train_async  # the pipeline, only when asked for

                state, timing = train_async(run, state, saved, stop_after_updates)
    finally:
        run.close()
    timing["compile_s"] += init_s
    done = timing.pop("updates_done")
    if done < cfg.num_updates:
        if console:
            print(f"stopped at update {done}; checkpoint {run.last_checkpoint}; continue with: "
                  f"jaxrl-async train --resume {run.run_dir}", flush=True)
        return TrainResult({"updates_done": done, "checkpoint": run.last_checkpoint}, state, run.run_dir,
                           completed=False)
    summary = make_summary(cfg, state, run.eval_result, wall_s=time.perf_counter() - wall_start,
                           updates_trained=done - run.start_update, best_eval_return=run.best_eval_return,
                           eval_checkpoint_s=run.host_s, devices=placement.num_devices,
                           sharding=placement.layout, **timing)
    run_dir_lib.write_json(os.path.join(run.run_dir, run_dir_lib.SUMMARY_FILE), summary)
    if console:
        print(f"final greedy return {summary['final_eval_return_mean']:.2f} "
              f"(per seed {[round(r, 2) for r in summary['final_eval_return']]}); run dir {run.run_dir}")
    return TrainResult(summary, state, run.run_dir, run.eval_result)


def make_summary(cfg: TrainConfig, state: TrainState, eval_result: EvalResult, *, wall_s: float,
                 compile_s: float, train_s: float, updates_trained: int, **extra) -> dict:
    """summary.json; `steps_per_second` counts the steps trained in this process (all seeds)."""
    per_seed = eval_result.summary_per_seed("eval")
    params = state.learner.params
    digests = [run_dir_lib.params_digest(jax.tree.map(lambda x: x[i], params)) for i in range(cfg.num_seeds)]
    return {
        "env_id": cfg.env,
        "algo": cfg.algo,
        "mode": cfg.mode,
        "num_seeds": cfg.num_seeds,
        "env_steps": cfg.env_steps,
        "num_updates": cfg.num_updates,
        "final_eval_return": np.asarray(per_seed["eval_return_mean"]).tolist(),
        "final_eval_return_mean": float(np.nanmean(per_seed["eval_return_mean"])),
        "final_eval_episodes": int(np.min(per_seed["eval_episodes"])),
        "wall_s": wall_s,
        "compile_s": compile_s,
        "train_s": train_s,
        "steps_per_second": cfg.num_seeds * updates_trained * cfg.batch_size / train_s if train_s > 0 else None,
        "params_digest": digests,
        **extra,
    }

