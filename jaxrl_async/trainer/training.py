"""Training: `train(cfg)` builds a run's pieces, opens its host side and runs the mode's loop.

    result = train(TrainConfig(env="CartPole-v1", total_timesteps=500_000))
    result.summary["final_eval_return_mean"]

The loops (`fused.train_fused`, `asynchronous.loop.train_async`) do only their mode's work and
hand each host sync to the run's one sync step (`run.Run.sync`): metrics, evaluation,
checkpoints, the stop request. This module picks the mode, restores a resumed run and
makes the summary (`run.Run.write_summary` writes `summary.json`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import jax
import numpy as np

from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.trainer import distributed
from jaxrl_async.trainer import run_dir as run_dir_lib
from jaxrl_async.trainer import videos as videos_lib
from jaxrl_async.trainer.build import Components, build, initial_states
from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.config import host_env_kind, parse_env_kwargs
from jaxrl_async.envs.registry import env_kwargs_blamed
from jaxrl_async.rollout.evaluate import EvalResult
from jaxrl_async.trainer.compile_phases import CompilePhases
from jaxrl_async.trainer.fused import train_fused
from jaxrl_async.trainer.run import Run, TrainingDiverged, evaluation_program, restore_training_state
from jaxrl_async.trainer.runtime import collector_paused, cores_to_spare
from jaxrl_async.trainer.sharding import Placement
from jaxrl_async.trainer.sinks import check_tensorboard
from jaxrl_async.trainer.trackers import check_tracker
from jaxrl_async.types import TrainState

__all__ = ["TrainResult", "TrainingDiverged", "load_resume", "make_summary", "train"]


@dataclasses.dataclass
class TrainResult:
    summary: dict
    state: TrainState  # leading seed axis [S]
    run_dir: str | None
    eval_result: EvalResult | None = None
    completed: bool = True  # False when stopped early (Ctrl-C or stop_after_updates)


def load_resume(cfg: TrainConfig, c: Components, template: TrainState,
                hparams_given: bool = False) -> tuple[TrainState, dict]:
    """The latest checkpoint of `cfg.run_dir`, checked against this config; `hparams_given`:
    the template's hyperparameters were passed to `train`, and replace the checkpoint's."""
    path = ckpt.latest_checkpoint(cfg.run_dir)
    if path is None:
        raise ckpt.CheckpointError(f"{cfg.run_dir!r} has no checkpoint to resume from "
                                   f"(looked in {ckpt.checkpoint_dir(cfg.run_dir)}); start a new run instead")
    saved = ckpt.load(path)
    saved_cfg = TrainConfig.from_dict(saved["config"])
    foreign = saved_cfg.state_shaping_difference(run_dir_lib.load_config(cfg.run_dir))
    if foreign is not None:  # not a flag's doing: the checkpoint disagrees with the run's own record
        field, theirs, ours = foreign
        raise ckpt.CheckpointError(f"checkpoint {path} was trained with {field}={theirs!r}, but the run's "
                                   f"config.json says {field}={ours!r}: one of the two was edited or copied in from "
                                   f"another run; put it back (another run's checkpoint: move it out of "
                                   f"{ckpt.checkpoint_dir(cfg.run_dir)})")
    saved_cfg.check_resumable_as(cfg)
    done = int(saved["counters"]["updates"])
    if done >= cfg.num_updates:
        raise ValueError(f"run {cfg.run_dir!r} already has {done} updates ({done * cfg.batch_size} env steps); "
                         "pass a larger --total-timesteps to extend it")
    # the config's state-shaping fields match the checkpoint's (checked above): a state that still
    # does not fit was written by another version
    state, summary_fields, note = restore_training_state(template, saved, path, c.algo.host, ckpt.VERSION_FIX)
    hparams = (template.learner.hparams if hparams_given else
               resumed_hparams(state.learner.hparams, template.learner.hparams, saved_cfg.learner, cfg.learner))
    state = state.replace(learner=state.learner.replace(hparams=hparams))
    return state, {**saved, "path": path, "summary_fields": summary_fields, "note": note}


def resumed_hparams(saved: Any, fresh: Any, saved_learner: Any, learner: Any) -> Any:
    """The hyperparameters a resumed run goes on with, field by field: the checkpoint's (`saved`,
    `[S]`: a sweep's own value for each seed) where the config kept the value it was saved with,
    the config's (`fresh`, from `learner`) where the resume changed it (`--learning-rate 1e-4`)."""
    return type(saved)(**{field.name: getattr(saved if getattr(saved_learner, field.name) == getattr(learner, field.name)
                                              else fresh, field.name)
                          for field in dataclasses.fields(saved)})


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

    Over several processes (after `distributed.initialize`) every process calls it with the
    same config; process 0 alone writes the run directory and prints, and every process
    returns the whole state.
    """
    with CompilePhases() as loop_phases:  # this thread's compilations until the loop's first iteration
        return _train(cfg, console, hparams, resume, stop_after_updates, loop_phases)


def _env_kwargs_blamed(cfg: TrainConfig):
    """`registry.env_kwargs_blamed` for a JAX env (a host env's constructor checks its own kwargs)."""
    if host_env_kind(cfg.env) is not None:
        return contextlib.nullcontext()
    return env_kwargs_blamed(cfg.env, parse_env_kwargs(cfg.env_kwargs))


def _train(cfg: TrainConfig, console: bool, hparams: Any, resume: bool, stop_after_updates: int | None,
           loop_phases: CompilePhases) -> TrainResult:
    wall_start = time.perf_counter()
    if distributed.is_writer():  # the one process that logs: a missing package fails before compiling
        check_tracker(cfg.tracker)
        if cfg.tensorboard:
            check_tensorboard()
    videos_lib.prepare(cfg)  # before the build: the encoder is there; MuJoCo, which the suites import, draws headless
    with collector_paused(), _env_kwargs_blamed(cfg):
        c = build(cfg)  # bad input (an unknown env id, say) fails before anything is written
    if resume and not cfg.run_dir:
        raise ValueError("resume needs the run directory: --resume RUN_DIR (from Python: the config's run_dir)")
    _agree(cfg, resume)
    console = console and distributed.is_writer()
    placement = Placement(cfg.devices, cfg.num_seeds, cfg.num_envs)
    if cfg.mode == "async":
        from jaxrl_async.trainer.asynchronous.loop import actor_device

        actor_device(cfg, placement)  # refused here, before the run directory is written (or, resumed, rewritten)
    setup_start = time.perf_counter()
    with collector_paused(), _env_kwargs_blamed(cfg):
        state = initial_states(c, hparams)  # an env's first reset: a bad --env-kwargs value may fail only here
    setup_compile_s = time.perf_counter() - setup_start
    saved = None
    if resume:
        state, saved = load_resume(cfg, c, state, hparams_given=hparams is not None)
        if saved["note"] and console:
            print(f"resume: {saved['path']}: {saved['note']}", flush=True)
    state = placement.place(state)
    if console and placement.num_devices > 1:
        print(f"placement: {placement.describe()}", flush=True)
    videos = videos_lib.Videos.create(c, writer=distributed.is_writer(), console=console)  # None: no videos
    with Run.create(cfg, evaluation_program(c), placement, console=console, resume=saved, stop_after=stop_after_updates,
                    wall_start=wall_start, learner_host=c.algo.host, loop_phases=loop_phases, videos=videos) as run:
        if cores_to_spare():  # else the loop compiles alone, the evaluation after the first sync
            run.start_compiling_evaluation(state)  # the loop waits for it at its first evaluation
        if cfg.mode == "fused":
            state, timing = train_fused(c, run, state)
        else:
            from jaxrl_async.trainer.asynchronous.loop import train_async  # the pipeline, only when asked for

            state, timing = train_async(c, run, state, saved)
        # inside the run: its sinks (a tracker's run) take the summary before they close
        return _finish(cfg, c, run, state, saved, timing, placement, wall_start, setup_compile_s, console)


def _finish(cfg: TrainConfig, c: Components, run: Run, state: TrainState, saved: dict | None, timing: dict,
            placement: Placement, wall_start: float, setup_compile_s: float, console: bool) -> TrainResult:
    """The result of the run's loop: a completed run's summary (summary.json, the sinks' summary),
    or a stopped run's checkpoint."""
    timing["compile_s"] += setup_compile_s
    done = timing.pop("updates_done")
    if distributed.is_multiprocess():
        state = distributed.fetch(state)  # the whole state, for the summary and the caller
    if done < cfg.num_updates:
        if console:
            print(f"stopped at update {done}; checkpoint {run.last_checkpoint}; continue with: "
                  f"jaxrl-async train --resume {run.run_dir}", flush=True)
        return TrainResult({"updates_done": done, "checkpoint": run.last_checkpoint}, state,
                           run.run_dir if distributed.is_writer() else None, completed=False)
    summary = make_summary(cfg, state, run.last_eval, stochastic_eval=run.last_eval_stochastic,
                           wall_s=time.perf_counter() - wall_start, updates_trained=done - run.start_update,
                           best_eval_return=run.best_eval_return, eval_checkpoint_s=run.host_s,
                           eval_compile_s=run.eval_compile_s, **run.compile_timings(), **run.timings(),
                           devices=placement.num_devices, processes=jax.process_count(),
                           sharding=placement.layout, speed=c.speed.as_dict(),
                           **timing)
    # the learner's own figures over this process's training (a replay learner's rates and fill)
    summary.update(c.algo.host.figures(run.totals, cfg.num_seeds * (done - run.start_update) * cfg.batch_size,
                                       timing["train_s"], final=state.learner))
    if saved is not None:
        summary.update(saved["summary_fields"])  # e.g. a replay buffer that refilled after the resume
    if not distributed.is_writer():
        return TrainResult(summary, state, None, run.last_eval)
    run.write_summary(summary)
    if console:
        stochastic = summary.get("final_eval_return_stochastic_mean")
        print(f"final greedy return {summary['final_eval_return_mean']:.2f} "
              f"(per seed {[round(r, 2) for r in summary['final_eval_return']]})"
              + ("" if stochastic is None else f", stochastic {stochastic:.2f}") + f"; run dir {run.run_dir}")
    return TrainResult(summary, state, run.run_dir, run.last_eval)


def _agree(cfg: TrainConfig, resume: bool) -> None:
    """Over several processes: the run's checks that span them, before anything is written
    (`distributed.agree`); in one process, nothing."""
    if not distributed.is_multiprocess():
        return
    if cfg.mode != "fused":
        raise ValueError(f"mode={cfg.mode!r} runs in one process: its actor and learner threads share one "
                         "host; over several processes use --mode fused")
    writer_error = None
    if distributed.is_writer() and not resume and cfg.run_dir:
        try:
            run_dir_lib.check_fresh(cfg.run_dir)
        except ValueError as error:
            writer_error = error
    distributed.agree(cfg.to_dict(), writer_error)


def make_summary(cfg: TrainConfig, state: TrainState, eval_result: EvalResult, *, wall_s: float,
                 compile_s: float, train_s: float, updates_trained: int,
                 stochastic_eval: EvalResult | None = None, **extra) -> dict:
    """summary.json; `steps_per_second` counts the steps trained in this process (all seeds).

    Where the time went: `wall_s` = `compile_s` (the time before the first iteration: initial
    states and the loop's programs, with the evaluation's compiled beside them in a thread, its own
    time `eval_compile_s`) + `train_s` + `eval_checkpoint_s` (the host syncs: `eval_s`,
    `checkpoint_s` in the loop's thread, the metrics line) + setup; `checkpoint_encode_s` and
    `checkpoint_write_s` are the checkpoint writer's, beside training. `eval_checkpoint_fraction`
    is `eval_checkpoint_s / train_s`, what evaluation and checkpoints add to training.

    `final_eval_return*` is the greedy policy's; with `stochastic_eval` (cfg.eval_stochastic) the
    sampling policy's return, the figure peers such as PureJaxRL report, is added beside it as
    `final_eval_return_stochastic*`.
    """
    per_seed = eval_result.summary_per_seed("eval")
    stochastic = {}
    if stochastic_eval is not None:
        returns = stochastic_eval.summary_per_seed("eval")["eval_return_mean"]
        stochastic = {"final_eval_return_stochastic": np.asarray(returns).tolist(),
                      "final_eval_return_stochastic_mean": float(np.nanmean(returns))}
    params = jax.device_get(state.learner.params)  # sliced on the host: no program per leaf shape
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
        **stochastic,
        "wall_s": wall_s,
        "compile_s": compile_s,
        "train_s": train_s,
        "steps_per_second": cfg.num_seeds * updates_trained * cfg.batch_size / train_s if train_s > 0 else None,
        "params_digest": digests,
        **extra,
        **({"eval_checkpoint_fraction": extra["eval_checkpoint_s"] / train_s}
           if "eval_checkpoint_s" in extra and train_s > 0 else {}),
    }

