"""Metrics: fixed-size on-device reductions, and the host-side sinks (console, JSONL).

On the device every iteration is reduced to a dict of scalars (`iteration_metrics`),
and a window of iterations is summed into one dict of the same size
(`accumulate`), so memory stays flat however long training runs. On the host
`finalize` turns the sums into means; episode statistics are averaged over
completed episodes only (the validity mask), and are absent when none completed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.types import Trajectory

METRICS_FILE = "metrics.jsonl"  # one JSON line per host sync, in the run directory

# Summed over a window, then divided by the number of completed episodes.
EPISODE_SUMS = ("episode_return_sum", "episode_length_sum")


def iteration_metrics(trajectory: Trajectory, update_metrics: dict) -> dict:
    """One iteration's fixed-size summary: update metrics plus episode sums and counts."""
    done = trajectory.episode_done.astype(jnp.float32)
    return {
        **update_metrics,
        "episodes": jnp.sum(done),
        "episode_return_sum": jnp.sum(trajectory.episode_return * done),
        "episode_length_sum": jnp.sum(trajectory.episode_length.astype(jnp.float32) * done),
        "reward_mean": jnp.mean(trajectory.reward),
    }


def update_is_finite(metrics: dict) -> jax.Array:
    """The divergence rule, on the device: the update's loss and gradient norm are finite.
    Every learner reports these two; other metrics may be NaN by definition (explained
    variance of a constant target)."""
    return jnp.isfinite(metrics["loss"]) & jnp.isfinite(metrics["grad_norm"])


def zeros_like_metrics(metric_fn, *args) -> dict:
    """Zero sums shaped like `metric_fn(*args)`, without running it."""
    shapes = jax.eval_shape(metric_fn, *args)
    return jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float32), shapes)


def accumulate(total: dict, metrics: dict) -> dict:
    return jax.tree.map(lambda a, b: a + b.astype(jnp.float32), total, metrics)


def finalize(sums: dict[str, Any], num_iterations: int) -> dict[str, Any]:
    """Host side: per-window sums -> means. Works on scalars or per-seed arrays `[S]`."""
    sums = {k: np.asarray(v, np.float64) for k, v in sums.items()}
    episodes = sums.pop("episodes")
    out: dict[str, Any] = {}
    for name, total in sums.items():
        if name in EPISODE_SUMS:
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = np.where(episodes > 0, total / np.maximum(episodes, 1), np.nan)
            out[name.replace("_sum", "_mean")] = mean
        else:
            out[name] = total / num_iterations
    out["episodes"] = episodes
    return out


def to_jsonable(value):
    """numpy scalars/arrays -> floats/lists; NaN -> None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        value = np.asarray(value)
        if value.ndim == 0:
            value = value.item()
        else:
            return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def seed_mean(value) -> float | None:
    """Mean over the seed axis, ignoring seeds with no completed episode."""
    arr = np.asarray(value, np.float64)
    if arr.size == 0 or np.all(np.isnan(arr)):
        return None
    return float(np.nanmean(arr))


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
    `min_interval_s` except for evaluations and the final line."""

    def __init__(self, total_env_steps: int, start_steps: int = 0, stream: TextIO | None = None,
                 min_interval_s: float = 1.0):
        self.total = total_env_steps
        self.stream = stream or sys.stdout
        self.min_interval_s = min_interval_s
        self._last_print = -math.inf
        self._start_steps = start_steps
        self._start = time.perf_counter()

    def write(self, record: dict) -> None:
        now = time.perf_counter()
        steps = record["env_steps"]
        final = steps >= self.total
        if not (final or "eval_return_mean" in record or now - self._last_print >= self.min_interval_s):
            return
        self._last_print = now
        rate = (steps - self._start_steps) / max(now - self._start, 1e-9)  # per seed, wall clock
        eta = (self.total - steps) / rate if rate > 0 else 0.0
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

    def close(self) -> None:
        pass


class TensorBoardSink:
    """Every numeric metric as a TensorBoard scalar, against env steps (tensorboardX)."""

    def __init__(self, log_dir: str):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ValueError("--tensorboard needs the tensorboardX package: pip install 'jaxrl_async[tensorboard]'") from None
        self._writer = SummaryWriter(log_dir)

    def write(self, record: dict) -> None:
        step = int(record["env_steps"])
        for name, value in record.items():
            if isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and math.isfinite(value):
                self._writer.add_scalar(name, float(value), step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def open_sinks(run_dir: str | None, total_env_steps: int, console: bool = True, *,
               start_steps: int = 0, tensorboard: bool = False) -> list:
    sinks: list = []
    if tensorboard:
        sinks.append(TensorBoardSink(os.path.join(run_dir, "tensorboard")))
    if console:
        sinks.append(ConsoleSink(total_env_steps, start_steps))
    if run_dir is not None:
        sinks.append(JsonlSink(os.path.join(run_dir, METRICS_FILE)))
    return sinks
