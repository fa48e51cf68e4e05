"""When a run syncs with the host, evaluates and checkpoints: a pure function of the config.

The schedule is a list of host-sync points (updates done) fixed by the config, so
an interrupted and resumed run syncs, evaluates and checkpoints at exactly the
same updates as one that ran straight through, and writes the same metrics.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxrl_async.algorithms import TrainConfig

AUTO_SYNCS = 20  # host syncs per run when iterations_per_call is 'auto' ...
MAX_AUTO_ITERATIONS = 50  # ... but at most this many iterations between them
AUTO_EVALS = 10


def sync_every(num_updates: int, iterations_per_call: int | str) -> int:
    """Iterations between two host syncs (the log cadence): 'auto' about 20 syncs of at most 50
    iterations; 'all' one call for the whole run."""
    if iterations_per_call == "all":
        return num_updates
    k = iterations_per_call
    if k == "auto":
        k = min(max(1, math.ceil(num_updates / AUTO_SYNCS)), MAX_AUTO_ITERATIONS)
    return min(k, num_updates)


def chunk_plan(num_updates: int, iterations_per_call: int | str) -> list[int]:
    """Iterations of each call between host syncs: `sync_every`'s count each, the last call the
    rest. With 'auto' the first call is one iteration (then the rest of the first count), so the
    first metrics line comes after one iteration, not up to 50: a flagship preset's iteration takes
    a CPU a minute or more. The later syncs stay where they were; the count is traced, one program."""
    k = sync_every(num_updates, iterations_per_call)
    plan = [k] * (num_updates // k) + ([num_updates % k] if num_updates % k else [])
    if iterations_per_call == "auto" and k > 1:
        plan[:1] = [1, k - 1]
    return plan


def intervals(cfg: TrainConfig) -> tuple[int, int]:
    """(eval_interval, checkpoint_interval) in updates; 0 = only at the end.

    'auto' picks a multiple of the log cadence, so it adds no host syncs: about 10
    evaluations per run (none before the end with iterations_per_call='all').
    """
    k = sync_every(cfg.num_updates, cfg.iterations_per_call)
    syncs = math.ceil(cfg.num_updates / k)
    eval_every = cfg.eval_interval
    if eval_every == "auto":
        eval_every = 0 if syncs == 1 else k * max(1, round(syncs / AUTO_EVALS))
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


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A run's host syncs and which of them evaluate and checkpoint (the final one does both)."""

    num_updates: int
    sync_points: tuple[int, ...]
    eval_every: int  # 0: only at the end
    checkpoint_every: int  # 0: only at the end

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> "Schedule":
        eval_every, checkpoint_every = intervals(cfg)
        return cls(cfg.num_updates, tuple(sync_points(cfg)), eval_every, checkpoint_every)

    def remaining(self, updates_done: int) -> list[int]:
        """The sync points still ahead of a run that has done `updates_done` updates."""
        return [point for point in self.sync_points if point > updates_done]

    def is_eval_point(self, updates: int) -> bool:
        return updates == self.num_updates or bool(self.eval_every and updates % self.eval_every == 0)

    def is_checkpoint_point(self, updates: int) -> bool:
        return updates == self.num_updates or bool(self.checkpoint_every and updates % self.checkpoint_every == 0)

    def is_video_point(self, updates: int, video_interval: int) -> bool:
        """Every `video_interval`-th evaluation records a video, and so does the final one (0: none)."""
        if not video_interval or not self.is_eval_point(updates):
            return False
        return updates == self.num_updates or (updates // self.eval_every) % video_interval == 0
