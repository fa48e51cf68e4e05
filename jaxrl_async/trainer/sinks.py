"""Where a run's metrics lines go: the console, `metrics.jsonl`, TensorBoard, an experiment
tracker (`open_sinks`).

Each sink takes the record a host sync writes (`run.Run.sync`): means over seeds, a JSON-able dict.
A tracker's sink (`trackers.py`) also takes the run's videos and its summary.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
from typing import TextIO

import numpy as np

from jaxrl_async.trainer.metrics import to_jsonable
from jaxrl_async.trainer.trackers import open_tracker

METRICS_FILE = "metrics.jsonl"  # one JSON line per host sync, in the run directory


class JsonlSink:
    """Appends one JSON object per host sync to the run's `METRICS_FILE`, flushed each time."""

    def __init__(self, path: str):
        self.path = path
        self._file = open(path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(to_jsonable(record)) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _fmt_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ConsoleSink:
    """A progress line (env steps, steps/s, episode return, evaluation, ETA), at most one per
    `min_interval_s` except for evaluations and the final line.

    The ETA is the wall clock's rate since the first record (evaluations and checkpoints
    included); at the first record, whose window began before the programs compiled, it is that
    window's training rate (`steps_per_second` over its seeds), so a long compile does not pass
    for slow training."""

    def __init__(self, total_env_steps: int, stream: TextIO | None = None, min_interval_s: float = 1.0):
        self.total = total_env_steps
        self.stream = stream or sys.stdout
        self.min_interval_s = min_interval_s
        self._last_print = -math.inf
        self._first: tuple[float, int] | None = None  # (time, env steps) of the first record

    def write(self, record: dict) -> None:
        now = time.perf_counter()
        steps = record["env_steps"]
        if self._first is None:
            self._first = (now, steps)
        final = steps >= self.total
        if not (final or "eval_return_mean" in record or now - self._last_print >= self.min_interval_s):
            return
        self._last_print = now
        eta = (self.total - steps) / rate if (rate := self._rate(now, steps, record)) > 0 else 0.0
        ret = record.get("episode_return_mean")
        evaluation = record.get("eval_return_mean")
        sps = record.get("steps_per_second")
        parts = [f"[{100 * steps / max(self.total, 1):5.1f}%]", f"steps {steps:,}/{self.total:,}",
                 f"sps {sps:,.0f}" if sps else "",
                 f"return {ret:8.2f}" if ret is not None else "return    -",
                 f"eval {evaluation:8.2f}" if evaluation is not None else "",
                 f"loss {record['loss']:.3f}" if record.get("loss") is not None else "",
                 f"eta {_fmt_duration(eta)}"]
        print("  ".join(p for p in parts if p), file=self.stream, flush=True)

    def _rate(self, now: float, steps: int, record: dict) -> float:
        """Env steps per second of one seed (`env_steps` counts one seed's)."""
        first_time, first_steps = self._first
        if steps > first_steps:
            return (steps - first_steps) / max(now - first_time, 1e-9)
        window_rate = record.get("steps_per_second")
        return window_rate / record.get("num_seeds", 1) if window_rate else 0.0

    def close(self) -> None:
        pass


def check_tensorboard() -> None:
    """Raise ValueError, with the pip line, where tensorboardX is not installed; imports nothing, so a
    run asked for `--tensorboard` without it fails before it builds or writes anything."""
    if importlib.util.find_spec("tensorboardX") is None:
        raise ValueError("--tensorboard needs the tensorboardX package: pip install 'jaxrl_async[tensorboard]'")


class TensorBoardSink:
    """Every numeric metric as a TensorBoard scalar, against env steps (tensorboardX)."""

    def __init__(self, log_dir: str):
        check_tensorboard()
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(log_dir)

    def write(self, record: dict) -> None:
        step = int(record["env_steps"])
        for name, value in record.items():
            if isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and math.isfinite(value):
                self._writer.add_scalar(name, float(value), step)
        self._writer.flush()

    def write_video(self, path: str, env_steps: int) -> None:
        # the video's path as text: tensorboardX's add_video would need moviepy and the frames again
        self._writer.add_text("video", path, env_steps)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def write_video(sinks: list, path: str, env_steps: int) -> None:
    """Hand a video just written (an MP4 file) to each sink with a `write_video(path, env_steps)` method."""
    for sink in sinks:
        take = getattr(sink, "write_video", None)  # the console and metrics.jsonl take none
        if take is not None:
            take(path, env_steps)


def write_summary(sinks: list, summary: dict, best_checkpoint: str | None) -> None:
    """Hand a completed run's summary, and its best checkpoint's path (None: no evaluation scored), to
    each sink with a `write_summary(summary, best_checkpoint)` method (a tracker's, `trackers.py`)."""
    for sink in sinks:
        take = getattr(sink, "write_summary", None)  # the console and the files take none
        if take is not None:
            _told_on_stderr(take, summary, best_checkpoint, failed=f"{type(sink).__name__} could not log the summary")


def close_sinks(sinks: list) -> None:
    """Close every sink, each even where one before it fails: a tracker's error is told on stderr,
    not raised. The run's own files (summary.json, metrics.jsonl, its checkpoints) are written
    by then; a tracker's outage at the end is no reason to fail a finished run, nor to leave the
    other sinks (or the checkpoint writer after them) open."""
    for sink in sinks:
        _told_on_stderr(sink.close, failed=f"{type(sink).__name__} did not close")


def _told_on_stderr(call, *args, failed: str) -> None:
    try:
        call(*args)
    except Exception as error:  # a tracker's own errors, whatever its backend's
        print(f"warning: {failed}: {type(error).__name__}: {error} (the run directory has it all)",
              file=sys.stderr, flush=True)


def open_sinks(run_dir: str | None, total_env_steps: int, console: bool = True, *,
               tensorboard: bool = False, tracker: str = "none", config: dict | None = None) -> list:
    """The run's sinks; `tracker` (`trackers.TRACKERS`) logs the run, its `config` too. The tracker
    opens first: one that cannot start leaves no metrics.jsonl, so the same --run-dir can start again."""
    sinks: list = []
    if tracker != "none":
        sinks.append(open_tracker(tracker, run_dir, config or {}))
    if tensorboard:
        sinks.append(TensorBoardSink(os.path.join(run_dir, "tensorboard")))
    if console:
        sinks.append(ConsoleSink(total_env_steps))
    if run_dir is not None:
        sinks.append(JsonlSink(os.path.join(run_dir, METRICS_FILE)))
    return sinks
