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
    """Appends one JSON object per host sync to `metrics.jsonl`, flushed each time."""

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
    """One progress line per host sync: env steps, steps/s, episode return, ETA."""

    def __init__(self, total_env_steps: int, stream: TextIO | None = None):
        self.total = total_env_steps
        self.stream = stream or sys.stdout
        self.start = time.perf_counter()

    def write(self, record: dict) -> None:
        steps = record["env_steps"]
        frac = steps / max(self.total, 1)
        sps = record.get("steps_per_second")
        eta = (self.total - steps) / (sps / record.get("num_seeds", 1)) if sps else 0.0
        ret = record.get("episode_return_mean")
        parts = [f"[{100 * frac:5.1f}%]", f"steps {steps:,}/{self.total:,}",
                 f"sps {sps:,.0f}" if sps else "sps -",
                 f"return {ret:8.2f}" if ret is not None else "return    -",
                 f"loss {record['loss']:.3f}" if "loss" in record else "",
                 f"eta {_fmt_duration(eta)}"]
        print("  ".join(p for p in parts if p), file=self.stream, flush=True)

    def close(self) -> None:
        pass


def open_sinks(run_dir: str | None, total_env_steps: int, console: bool = True) -> list:
    sinks: list = []
    if console:
        sinks.append(ConsoleSink(total_env_steps))
    if run_dir is not None:
        sinks.append(JsonlSink(os.path.join(run_dir, "metrics.jsonl")))
    return sinks
