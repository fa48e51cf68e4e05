"""How every benchmark measures: compile apart, warm up, repeat, report median and spread."""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from typing import Any, Callable

import jax


@dataclasses.dataclass
class Timing:
    """Seconds per call over `repeats` calls after `warmup` calls; compile time measured apart."""

    times: list[float]
    compile_s: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def rate(self, items_per_call: float) -> dict[str, float]:
        """items/s: median, and the spread as min/max over the repeats."""
        return {"median": items_per_call / self.median, "min": items_per_call / max(self.times),
                "max": items_per_call / min(self.times)}

    def as_dict(self, items_per_call: float | None = None, unit: str = "steps_per_second") -> dict[str, Any]:
        out: dict[str, Any] = {"median_s": self.median, "min_s": min(self.times), "max_s": max(self.times),
                               "repeats": len(self.times)}
        if self.compile_s is not None:
            out["compile_s"] = self.compile_s
        if items_per_call is not None:
            out[unit] = self.rate(items_per_call)
        return out


def time_jitted(fn: Callable, *args, warmup: int = 1, repeats: int = 5, static_argnums=()) -> Timing:
    """AOT-compile `fn` for `args` (timed), then time `repeats` blocking calls after `warmup`."""
    start = time.perf_counter()
    compiled = jax.jit(fn, static_argnums=static_argnums).lower(*args).compile()
    compile_s = time.perf_counter() - start
    return Timing(time_calls(lambda: compiled(*args), warmup=warmup, repeats=repeats), compile_s)


def time_alternately(programs: dict[str, tuple[Callable, tuple]], *, warmup: int = 1,
                     repeats: int = 5) -> dict[str, Timing]:
    """`{name: (fn, args)}`: AOT-compile each (timed), then time them in turns, one call of each per
    round for `repeats` rounds after `warmup`, so that the machine's slow and fast stretches fall on
    every program alike. Each program must leave its arguments alive (no donation)."""
    compiled, compile_s = {}, {}
    for name, (fn, args) in programs.items():
        start = time.perf_counter()
        compiled[name] = jax.jit(fn).lower(*args).compile()
        compile_s[name] = time.perf_counter() - start
    calls = {name: functools.partial(compiled[name], *programs[name][1]) for name in programs}
    for call in calls.values():
        for _ in range(warmup):
            jax.block_until_ready(call())
    times: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name] += time_calls(call, warmup=0, repeats=1)
    return {name: Timing(times[name], compile_s[name]) for name in programs}


def time_calls(call: Callable[[], Any], *, warmup: int = 1, repeats: int = 5) -> list[float]:
    for _ in range(warmup):
        jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return times
