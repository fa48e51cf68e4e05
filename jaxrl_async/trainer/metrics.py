"""Metrics: fixed-size on-device reductions, and their means on the host (the sinks that write
them: `sinks.py`).

On the device every iteration is reduced to a dict of scalars (`iteration_metrics`),
and a window of iterations is summed into one dict of the same size
(`accumulate`), so memory stays flat however long training runs. On the host
`finalize` turns the sums into means; episode statistics are averaged over
completed episodes only (the validity mask), and are absent when none completed.
"""

from __future__ import annotations

import math
from typing import Any

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


def to_jsonable(value, *, keep_non_finite: bool = False):
    """numpy scalars/arrays -> floats/lists, tuples -> lists; NaN and infinities -> None (JSON has
    neither), unless `keep_non_finite`: a config's `inf` ("no clipping") must read back as itself."""
    if isinstance(value, dict):
        return {k: to_jsonable(v, keep_non_finite=keep_non_finite) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, keep_non_finite=keep_non_finite) for v in value]
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        value = np.asarray(value)
        if value.ndim == 0:
            value = value.item()
        else:
            return [to_jsonable(v, keep_non_finite=keep_non_finite) for v in value.tolist()]
    if isinstance(value, float) and not math.isfinite(value) and not keep_non_finite:
        return None
    return value


def seed_mean(value) -> float | None:
    """Mean over the seed axis, ignoring seeds with no completed episode."""
    arr = np.asarray(value, np.float64)
    if arr.size == 0 or np.all(np.isnan(arr)):
        return None
    return float(np.nanmean(arr))
