"""The host side of a run, shared by every loop: one sync step that owns the bookkeeping at a
host sync — the finite check, the metrics line and its sinks, evaluation and the best
checkpoint, the schedule's checkpoints, and the stop request (Ctrl-C or a stop point).

    with Run.create(cfg, evaluation_program(c), placement, console=True) as run:
        for point in run.schedule.remaining(run.start_update):
            state, window = ...                     # the loop's own work up to `point`
            if run.sync(window, state):             # True: stop here (a checkpoint is written)
                break

A loop hands the sync step a `Window` (what happened since the last sync) and the state;
it reads what it needs from the run (`schedule`, `placement`, `start_update`, `host_s`) and
never writes the run's attributes.

Over several processes (`distributed.py`) every process runs the sync step: the evaluation, the
gathered checkpoint state and the stop request are collectives, taken by all at the same syncs;
process 0 alone writes (config.json, the metrics lines, the checkpoints).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.trainer import distributed
from jaxrl_async.trainer import metrics as metrics_lib
from jaxrl_async.trainer import sinks as sinks_lib
from jaxrl_async.trainer import run_dir as run_dir_lib
from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.core.programs import over_seeds, seed_keys
from jaxrl_async.rollout.evaluate import EvalResult
from jaxrl_async.trainer.schedule import Schedule
from jaxrl_async.trainer.compile_phases import CompilePhases
from jaxrl_async.trainer.compile_thread import CompileThread
from jaxrl_async.trainer.runtime import collector_paused
from jaxrl_async.trainer.sharding import Placement
from jaxrl_async.types import HostHooks, TrainState

EVAL_STREAM = 0x5EED  # evaluation keys: fold_in(fold_in(seed key, EVAL_STREAM), update)
TRAINING_LOOP, EVALUATION = "the training loop", "the evaluation"  # the programs `Run.compiling` names
RECORDING = "the recording"  # ... and the videos' (`videos.py`)


class TrainingDiverged(FloatingPointError):
    """A loss, gradient or parameter became NaN or infinite."""


def check_finite(sums: dict, updates_done: int, first_bad: int | None = None,
                 last_good: str | None = None) -> None:
    """Raise TrainingDiverged naming the metric that went non-finite, the update and the last
    good checkpoint. `sums` may hold `params_finite` (False where the params are not finite);
    `first_bad` is the first bad update's index, the updates done before it, and the message
    counts it from 1, as the metrics lines' `iteration` and the checkpoints' names do."""
    culprit = next((name for name in ("loss", "policy_loss", "value_loss", "grad_norm")
                    if name in sums and not np.all(np.isfinite(np.asarray(sums[name], np.float64)))), None)
    if culprit is None and "params_finite" in sums and not np.all(sums["params_finite"]):
        culprit = "the params"
    if culprit is None:
        return
    where = f"update {first_bad + 1}" if first_bad is not None else f"the updates up to {updates_done}"
    tail = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint was written yet"
    raise TrainingDiverged(f"training diverged: {culprit} became NaN or infinite at {where}; {tail}; "
                           "lower --learning-rate or --max-grad-norm")


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM asks the loop to stop at the next host sync (and checkpoint); a
    second signal aborts. SIGTERM is what a scheduler sends before it kills a job (SLURM's
    preemption and time limit, `kill`, a container's stop), so a preempted run keeps its progress."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = False
        self._previous: dict = {}

    def _handle(self, signum, frame):
        self.requested = True
        name = "interrupt" if signum == signal.SIGINT else signal.Signals(signum).name
        print(f"\n{name}: finishing the current step, then writing a checkpoint "
              "(press Ctrl-C again to abort at once)", flush=True)
        # the second signal, either one, aborts: a KeyboardInterrupt or SIGTERM's default, the exit
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, previous in self._previous.items():
            if previous is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(signum, previous)


@dataclasses.dataclass(frozen=True)
class Window:
    """What a loop hands the sync step: the iterations since the previous host sync.

    Attributes:
      updates_done: updates done at this sync (a point of the schedule).
      num_iterations: iterations in the window.
      elapsed_s: the loop's time for them (for steps/s).
      sums: every metric summed over the window, host arrays `[S]`.
      first_nonfinite_update: the index of the first update whose loss or gradient norm was not
        finite (the updates done before it), if any.
      params_finite: `[S]` bool, the params at the sync are finite.
      extra: mode-specific fields for the metrics line (the async pipeline's timings).
    """

    updates_done: int
    num_iterations: int
    elapsed_s: float
    sums: dict
    first_nonfinite_update: int | None
    params_finite: Any
    extra: dict = dataclasses.field(default_factory=dict)


class Run:
    """One run's directory, sinks, schedule, evaluations, best-so-far and checkpoints.

    Build it with `Run.create` and use it as a context manager (Ctrl-C handling, sinks
    closed at exit). Its state changes only inside `sync`.
    """

    def __init__(self, cfg: TrainConfig, evaluation, placement: Placement, *,
                 run_dir: str, sinks: list, start_update: int = 0, best_eval_return: float | None = None,
                 last_checkpoint: str | None = None, stop_after: int | None = None,
                 wall_start: float | None = None, learner_host: HostHooks = HostHooks(),
                 loop_phases: CompilePhases | None = None, console: bool = False, videos: Any = None):
        self.cfg = cfg
        self.placement = placement
        self.schedule = Schedule.from_config(cfg)
        self.run_dir = run_dir
        self.start_update = start_update
        self.best_eval_return = best_eval_return
        self.last_checkpoint = last_checkpoint
        self.last_eval: EvalResult | None = None
        self.last_eval_stochastic: EvalResult | None = None  # with cfg.eval_stochastic
        self.host_s = 0.0  # evaluation, checkpoints and logging at host syncs
        self.eval_s = 0.0  # ... of which evaluation
        self.checkpoint_s = 0.0  # ... of which checkpoints: the copy to the host, waits for the writer
        self._writer = ckpt.CheckpointWriter()  # serialises and writes them while training goes on
        self._sinks = sinks
        self._stop = StopRequest()
        self._stop_after = stop_after
        self._wall_start = time.perf_counter() if wall_start is None else wall_start
        self._learner_host = learner_host
        self.totals: dict = {}  # every metric summed over this process's windows, host arrays [S]
        self.eval_compile_s = 0.0  # compiling and first running the evaluation (`compile_evaluation`)
        self._eval_compiling: CompileThread | None = None  # the evaluation's compile, until waited for
        self._eval_compile_started = False
        self.eval_compile_phases: CompilePhases | None = None
        self._loop_phases = loop_phases
        self._console = console  # the compiles' lines (`compiling`) on stdout
        self._compiled: list[dict] = []  # compiles ended since the last metrics line (`compiling`)
        self._compiled_lock = threading.Lock()  # the evaluation's thread appends to it
        self._evaluate = evaluation
        self._seed_keys = np.asarray(seed_keys(cfg.seed, cfg.num_seeds))  # host data: any process passes it
        self._videos = videos  # `videos.Videos`, or None: no videos

    @classmethod
    def create(cls, cfg: TrainConfig, evaluation, placement: Placement, *,
               console: bool = True, resume: dict | None = None, stop_after: int | None = None,
               wall_start: float | None = None, extra_sinks: tuple = (),
               learner_host: HostHooks = HostHooks(), loop_phases: CompilePhases | None = None,
               videos: Any = None) -> "Run":
        """Open the run directory (a fresh one, or the resumed run's), write config.json, open
        the sinks (console, metrics.jsonl, TensorBoard, the tracker, and any `extra_sinks`).

        Args:
          evaluation: the run's evaluation program (`evaluation_program`).
          resume: the checkpoint a resumed run continues from (`checkpoint.load` plus its `path`).
          stop_after: stop (with a checkpoint) at the first sync at or after this many updates.
          learner_host: the learner's `HostHooks` (what its checkpoints keep, its own rates).
          loop_phases: the compile phases the caller records until the loop is compiled (`loop_compiled`).
          videos: the run's evaluation videos (`videos.Videos.create`; None: none).
        """
        start_update = int((resume or {}).get("counters", {}).get("updates", 0))
        if not distributed.is_writer():  # another process than 0: it writes nothing
            # its run_dir only names process 0's checkpoints (a default one is process 0's to pick)
            return cls(cfg, evaluation, placement, run_dir=cfg.run_dir or "", sinks=[], start_update=start_update,
                       best_eval_return=(resume or {}).get("extra", {}).get("best_eval_return"),
                       last_checkpoint=(resume or {}).get("path"), stop_after=stop_after, wall_start=wall_start,
                       learner_host=learner_host, loop_phases=loop_phases, videos=videos)
        run_dir = cfg.run_dir if resume is not None else \
            run_dir_lib.create_run_dir(cfg.run_dir or run_dir_lib.default_run_dir(cfg.env, cfg.algo))
        with run_dir_lib.writing(run_dir, fix="copy the run where you can write and resume the copy"
                                 if resume is not None else "choose another --run-dir"):
            if resume is not None:
                run_dir_lib.drop_metrics_after(run_dir, start_update)
                run_dir_lib.drop_summary(run_dir)
                lost_best = ckpt.drop_best_after(run_dir, start_update)
                if lost_best is not None and console:
                    print(f"resume: {ckpt.BEST} was written at update {lost_best}, past the checkpoint resumed "
                          f"(update {start_update}): removed with those updates; the resumed run's next best "
                          "evaluation writes it again", flush=True)
            run_dir_lib.write_config(run_dir, cfg.to_dict())
        # the tracker logs the config with the directory the run has (a default one is picked above)
        sinks = sinks_lib.open_sinks(run_dir, cfg.env_steps, console, tensorboard=cfg.tensorboard, tracker=cfg.tracker,
                                     config={**cfg.to_dict(), "run_dir": run_dir}) + list(extra_sinks)
        return cls(cfg, evaluation, placement, run_dir=run_dir, sinks=sinks, start_update=start_update,
                   best_eval_return=(resume or {}).get("extra", {}).get("best_eval_return"),
                   last_checkpoint=(resume or {}).get("path"), stop_after=stop_after, wall_start=wall_start,
                   learner_host=learner_host, loop_phases=loop_phases, console=console, videos=videos)

    def __enter__(self) -> "Run":
        self._stop.__enter__()
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self._stop.__exit__(exc_type, exc, traceback)
        if self._eval_compiling is not None:  # the loop failed before it waited (or before it began)
            self._eval_compiling.close()
            self._eval_compiling = None
        if self._videos is not None:  # a run that failed drops the videos not yet drawn
            self._videos.close(wait=exc is None)
        sinks_lib.close_sinks(self._sinks)
        try:
            self._writer.close()  # the checkpoint in flight lands before the run returns or raises
        except ckpt.CheckpointWriteError as error:
            if exc is None:
                raise
            exc.add_note(str(error))  # the error already on its way stays the one raised

    def write_summary(self, summary: dict) -> None:
        """Write summary.json and hand the summary, with the best checkpoint's path, to the sinks that
        take it (a tracker's: `sinks.write_summary`), before they close. Process 0 alone writes."""
        if not distributed.is_writer():
            return
        run_dir_lib.write_json(os.path.join(self.run_dir, run_dir_lib.SUMMARY_FILE), summary)
        best = os.path.join(ckpt.checkpoint_dir(self.run_dir), ckpt.BEST)  # on disk: the last sync waited for it
        sinks_lib.write_summary(self._sinks, summary, best if os.path.isfile(best) else None)

    def timings(self) -> dict:
        """The host syncs' time split (summary.json): `eval_s`, `checkpoint_s` (in the loop's
        thread), `checkpoint_encode_s` and `checkpoint_write_s` (in the writer's, beside training)."""
        return {"eval_s": self.eval_s, "checkpoint_s": self.checkpoint_s,
                "checkpoint_encode_s": self._writer.encode_s, "checkpoint_write_s": self._writer.write_s,
                **(self._videos.timings() if self._videos is not None else {})}

    # -- the sync step ---------------------------------------------------
    def sync(self, window: Window, state: TrainState, *, extra_state: dict | None = None,
             counters: dict | None = None) -> bool:
        """The bookkeeping at one host sync; returns True when the loop must stop here.

        Raises TrainingDiverged (naming the last good checkpoint, left intact) if the window
        saw a non-finite loss, gradient or params. Otherwise writes the metrics line with the
        evaluation the schedule asks for (keeping the best evaluation's state in best.ckpt),
        and a checkpoint where the schedule says or the run stops. `extra_state` and
        `counters` go into the checkpoints (what the loop needs to resume exactly).
        The time it takes is counted in `host_s`, apart from the loop's.
        """
        start = time.perf_counter()
        try:
            updates = window.updates_done
            check_finite({**window.sums, "params_finite": window.params_finite}, updates,
                         window.first_nonfinite_update, self.last_checkpoint)
            self.totals = {name: np.asarray(total, np.float64) + self.totals.get(name, 0.0)
                           for name, total in window.sums.items()}
            # a Ctrl-C seen by one process stops them all at this same sync
            stopping = distributed.any_process(self._stop.requested) or (
                self._stop_after is not None and updates >= self._stop_after)
            record = {**self._window_record(window), **window.extra}
            best = self.schedule.is_eval_point(updates) and self._evaluate_into(record, state, updates)
            if self._videos is not None:
                self._videos_into(record, state, updates, last=stopping or updates == self.schedule.num_updates)
            with self._compiled_lock:
                compiled, self._compiled = self._compiled, []
            if compiled:  # a field, not lines of their own: readers take every line for a sync's
                record["compiled"] = compiled
            for sink in self._sinks:
                sink.write(record)
            if not stopping and self._eval_compiling is not None:  # a run that stops here needs no evaluation
                self._eval_compiling.start()  # where it waited for the first sync (`loop_compiled`)
            numbered = self.schedule.is_checkpoint_point(updates) or stopping
            if best or numbered:
                paths = ([os.path.join(ckpt.checkpoint_dir(self.run_dir), ckpt.BEST)] if best else []) + (
                    [ckpt.numbered_path(self.run_dir, updates)] if numbered else [])
                # the last sync (the run's end or a stop) waits: its checkpoint is on disk when it returns
                self._save(state, updates, paths, extra_state, counters, numbered,
                           wait=stopping or updates == self.schedule.num_updates)
                if numbered:
                    self.last_checkpoint = paths[-1]
            return stopping
        finally:
            self.host_s += time.perf_counter() - start

    def evaluate(self, state: TrainState, updates: int, greedy: bool = True) -> EvalResult:
        """Evaluate every seed on its own envs; the key depends only on the seed and the update."""
        self._evaluation_compiled()  # the evaluation's first compile, if still in flight
        return self._evaluation(state.learner.params, state.rollout.obs_stats, updates, greedy)

    def _evaluation(self, params: Any, obs_stats: Any, updates: int, greedy: bool) -> EvalResult:
        return distributed.fetch(self._evaluate(params, obs_stats, self._seed_keys, jnp.uint32(updates), greedy=greedy))

    @contextlib.contextmanager
    def compiling(self, program: str) -> Iterator[None]:
        """Name a compile as it starts and, with its seconds, as it ends: on the console, and in the
        next metrics line's `compiled` list (`{"program": ..., "seconds": ...}`). No compile passes
        silently: a suite's programs take minutes on a small CPU."""
        self._say(f"compiling {program}...")
        start = time.perf_counter()
        yield
        seconds = time.perf_counter() - start
        with self._compiled_lock:
            self._compiled.append({"program": program, "seconds": seconds})
        self._say(f"compiled {program} in {seconds:.1f} s")

    def _say(self, line: str) -> None:
        """One console line in one write: `print` writes the text and its newline apart, so two
        threads' lines ran together."""
        if self._console:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def compile_evaluation(self, state: TrainState) -> None:
        """Compile the evaluation programs the run will use and run each once (results dropped):
        one-time work that otherwise lands in the first evaluation's host time (even with the
        persistent cache), so callers count it as compilation (`eval_compile_s`)."""
        self._compile_evaluation(state.learner.params, state.rollout.obs_stats)

    def _compile_evaluation(self, params: Any, obs_stats: Any) -> None:
        start = time.perf_counter()
        with self.compiling(EVALUATION), collector_paused(), CompilePhases() as self.eval_compile_phases:
            for greedy in (True, False) if self.cfg.eval_stochastic else (True,):
                self._evaluation(params, obs_stats, self.start_update, greedy)
        self.eval_compile_s = time.perf_counter() - start
        if self._videos is not None:  # the recording program, after the evaluation's, in the same thread
            with self.compiling(RECORDING), collector_paused():
                self._videos.warm_up(params, obs_stats, self._seed_keys, self.start_update)

    def start_compiling_evaluation(self, state: TrainState, *, after_first_sync: bool = False) -> None:
        """`compile_evaluation` in a thread, beside the training loop (its compile, where the host
        has cores to spare, `runtime.cores_to_spare`; else, from `loop_compiled`, its iterations
        from the first metrics line on: `after_first_sync`): XLA compiles without holding the GIL,
        and the loop waits for it only at the first evaluation (`evaluate`). Its first run takes
        copies of the params and statistics, made here, as the loop then gives them away (donates).
        Over several processes it compiles here and now: its first run gathers every process's
        results, and collectives must run in the same order in every process."""
        if self._eval_compile_started:
            return
        self._eval_compile_started = True
        if distributed.is_multiprocess():
            self.compile_evaluation(state)
            return
        # copied before the loop donates them; `device_put` keeps each array's placement, so the
        # program compiled for the copies is the one the evaluations find
        copies = jax.tree.map(lambda x: jax.device_put(x, may_alias=False),
                              (state.learner.params, state.rollout.obs_stats))
        # JAX's matmul precision is per thread: the thread compiles under the caller's, so that the
        # evaluations at the syncs, in the caller's thread, find this program rather than compile anew
        precision = jax.config.jax_default_matmul_precision

        def compile_():
            with jax.default_matmul_precision(precision):
                self._compile_evaluation(*copies)

        self._eval_compiling = CompileThread(compile_, name="compile-evaluation")
        if not after_first_sync:
            self._eval_compiling.start()

    def loop_compiled(self, state: TrainState) -> None:
        """The loop's programs are compiled: close the account of its compile phases (begun by the
        caller before it built anything), and have the evaluation compile where it has not begun
        (`start_compiling_evaluation`) from the first metrics line on: on a host without cores to
        spare, the loop's first iterations, which that line waits for, then have the cores alone."""
        if self._loop_phases is not None:
            self._loop_phases.stop()
        self.start_compiling_evaluation(state, after_first_sync=True)

    def compile_timings(self) -> dict:
        """summary.json's split of the compile time: `compile_{trace,lower,xla}_s`, the loop's
        thread from the start of the run to its first iteration, and `eval_compile_{...}_s`, the
        evaluation's (`compile_phases.py`; xla: compiling, or loading from the persistent cache)."""
        figures = {}
        for prefix, phases in (("compile", self._loop_phases), ("eval_compile", self.eval_compile_phases)):
            if phases is not None:
                figures.update({f"{prefix}_{phase}": seconds for phase, seconds in phases.seconds().items()})
        return figures

    def _evaluation_compiled(self) -> None:
        """Wait for `start_compiling_evaluation`'s thread (started now, if it waits for the first
        sync and an evaluation comes first); raise its error, if any."""
        if self._eval_compiling is not None:
            compiling, self._eval_compiling = self._eval_compiling, None
            compiling.wait()

    def _evaluate_into(self, record: dict, state: TrainState, updates: int) -> bool:
        """Evaluate into the metrics record; True when it is the best evaluation so far."""
        start = time.perf_counter()
        self.last_eval = self.evaluate(state, updates)
        record.update(seed_means(self.last_eval.summary_per_seed("eval")))
        if self.cfg.eval_stochastic:
            self.last_eval_stochastic = self.evaluate(state, updates, greedy=False)
            record.update(seed_means(self.last_eval_stochastic.summary_per_seed("eval_stochastic")))
        score = record.get("eval_return_mean")
        best = score is not None and (self.best_eval_return is None or score > self.best_eval_return)
        if best:
            self.best_eval_return = score
        record["best_eval_return"] = self.best_eval_return
        self.eval_s += time.perf_counter() - start
        return best

    def _videos_into(self, record: dict, state: TrainState, updates: int, last: bool) -> None:
        """Record seed 0's evaluation episode where the schedule asks for a video; the videos written
        since the last sync go to the sinks and into the metrics record (`videos`); the last sync
        waits for its video to be written."""
        if self._videos.due(updates):
            self._evaluation_compiled()  # the recording compiles in the evaluation's thread, after it
            self._videos.record(state.learner.params, state.rollout.obs_stats, self._seed_keys, updates, self.run_dir)
        if last:
            self._videos.wait()
        written = self._videos.finished(self.run_dir)
        for video in written:
            sinks_lib.write_video(self._sinks, os.path.join(self.run_dir, video["path"]), video["env_steps"])
        if written:
            record["videos"] = written

    def _save(self, state: TrainState, updates: int, paths: list[str], extra_state: dict | None,
              counters: dict | None, prune: bool, wait: bool) -> None:
        """Copy the checkpoint to the host and hand it to the writer (which prunes the numbered
        checkpoints once it is written, where `prune`); with `wait`, until it is on disk."""
        start = time.perf_counter()
        counters = {"updates": updates, "env_steps": updates * self.cfg.batch_size, **(counters or {})}
        extra = {"best_eval_return": self.best_eval_return, **(extra_state or {})}
        learner, learner_extra = self._learner_host.for_checkpoint(state.learner)
        state, extra = state.replace(learner=learner), {**extra, **learner_extra}
        if distributed.is_multiprocess():
            # every process takes part in gathering the whole state; process 0 writes it
            state = distributed.fetch(state)
            if not distributed.is_writer():
                self.checkpoint_s += time.perf_counter() - start
                return
        content = ckpt.host_content(state=state, config=run_dir_lib.config_record(self.cfg.to_dict()),
                                    counters=counters, extra=extra)
        keep, run_dir = self.cfg.keep_checkpoints, self.run_dir
        self._writer.submit(paths, content, then=(lambda: ckpt.prune(run_dir, keep)) if prune else None)
        if wait:
            self._writer.wait()
        self.checkpoint_s += time.perf_counter() - start

    def _window_record(self, window: Window) -> dict:
        """One metrics.jsonl line: means over seeds (per-seed lists for the episode return)."""
        cfg = self.cfg
        means = metrics_lib.finalize(window.sums, window.num_iterations)
        record = {"iteration": window.updates_done, "env_steps": window.updates_done * cfg.batch_size,
                  "num_seeds": cfg.num_seeds,
                  "steps_per_second": cfg.num_seeds * window.num_iterations * cfg.batch_size / window.elapsed_s,
                  "wall_s": time.perf_counter() - self._wall_start}
        for name, value in means.items():
            record[name] = metrics_lib.seed_mean(value)
        if cfg.num_seeds > 1:
            record["episode_return_per_seed"] = np.asarray(means["episode_return_mean"]).tolist()
        record.update(self._learner_host.figures(window.sums, cfg.num_seeds * window.num_iterations * cfg.batch_size,
                                                 window.elapsed_s))
        return record


def restore_training_state(template: TrainState, saved: dict, path: str, learner_host: HostHooks = HostHooks(),
                           fix: str = ckpt.CONFIG_FIX) -> tuple[TrainState, dict, str | None]:
    """The checkpoint's state in `template`'s structure, as the learner restores it
    (`HostHooks.restore`: a replay learner saved without its buffer refills it), with the
    learner's fields for summary.json and its note for the console (or None). A state that does
    not fit raises a CheckpointError ending with `fix` (`checkpoint.restore_state`)."""
    return learner_host.restore(template, saved,
                                lambda target, state_dict: ckpt.restore_state(target, state_dict, path, fix))


def evaluation_program(c) -> Callable[..., EvalResult]:
    """`(params, obs_stats, seed keys, updates, greedy=) -> EvalResult`: every seed's evaluation
    after `updates` updates, staged by the collector's evaluator (jitted, or plain Python where it
    steps host envs) once for the run's pieces (`build.Components.program`). The seed keys are an
    argument, so that runs that differ only in their seed share the program. With
    `cfg.eval_stochastic`, `greedy` is an argument too: one program serves the greedy and the
    sampling evaluations (each picks its actions from both), so a run compiles one evaluation."""
    evaluate, num_seeds, both = c.evaluate, c.cfg.num_seeds, c.cfg.eval_stochastic
    return c.program(("evaluation", num_seeds, both), lambda: evaluate.stage(
        functools.partial(_evaluate_at, evaluate, num_seeds), static_argnames=() if both else "greedy"))


def _evaluate_at(evaluate: Callable[..., EvalResult], num_seeds: int, params, obs_stats, keys_of_seeds: jax.Array,
                 updates: jax.Array, greedy: bool) -> EvalResult:
    """The evaluation keys derived inside the program: deriving them outside it ran a few eager
    ops, each dispatched on its own, at every evaluation."""
    keys = jax.vmap(lambda k: jax.random.fold_in(jax.random.fold_in(k, EVAL_STREAM), updates))(keys_of_seeds)
    return over_seeds(lambda p, s, k: evaluate(p, s, k, greedy=greedy), num_seeds)(params, obs_stats, keys)


def seed_means(per_seed: dict) -> dict:
    """{name: [S] values} -> {name: mean over seeds}, plus the per-seed list of the mean return."""
    out = {name: metrics_lib.seed_mean(values) for name, values in per_seed.items()}
    for name, values in per_seed.items():
        if name.endswith("_return_mean") and np.size(values) > 1:
            out[name.replace("_mean", "_per_seed")] = np.asarray(values).tolist()
    return out
