"""The fused mode (`--mode fused`): the iterations between two host syncs run as one jit call.

Each call is one jitted loop over `rollout.collect` + `algo.update` (`build.run_iterations`),
vmapped over seeds (and, for sweeps, over hyperparameters), with the metrics summed on the
device; the state is donated from call to call. At each sync the run's one sync step
(`Run.sync`) does the host's bookkeeping.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.core.programs import over_seeds, put_empty_leaves, warm_up
from jaxrl_async.trainer import distributed
from jaxrl_async.trainer.build import Components, run_iterations
from jaxrl_async.trainer.run import TRAINING_LOOP, Run, Window
from jaxrl_async.trainer.runtime import collector_paused
from jaxrl_async.types import TrainState


def fused_program(c: Components, shardings: Any = None):
    """The jitted `state, n -> (state, metric sums, diagnostics)` for any iteration count n, the
    state donated; with `shardings` the state keeps that placement from call to call. Made once
    per placement for the same pieces (`Components.program`)."""
    leaves, structure = jax.tree.flatten(shardings)
    return c.program(("fused", tuple(leaves), structure), lambda: _fused_program(c, shardings))


def _fused_program(c: Components, shardings: Any):
    def run_chunk(state, num_iterations):
        state, sums, diagnostics = over_seeds(lambda s: run_iterations(c, s, num_iterations),
                                              c.cfg.num_seeds)(state)
        if shardings is not None:
            state = jax.lax.with_sharding_constraint(state, shardings)
        return state, sums, diagnostics

    return jax.jit(run_chunk, donate_argnums=0)


def compile_fused(c: Components, state: TrainState, shardings: Any):
    """AOT-compile `fused_program` and warm it up with one iteration on a copy of the state."""
    with collector_paused():
        compiled = fused_program(c, shardings).lower(state, jnp.int32(1)).compile()
    warm_up(compiled, state, jnp.int32(1))
    return compiled


def first_nonfinite(per_seed_first_bad) -> int | None:
    """The earliest update any seed flagged non-finite (-1: none), or None."""
    bad = np.asarray(per_seed_first_bad)
    return int(bad[bad >= 0].min()) if (bad >= 0).any() else None


def train_fused(c: Components, run: Run, state: TrainState) -> tuple[TrainState, dict]:
    """Train from `run.start_update` to the end of the schedule (or a stop); returns the state
    and the loop's timings (`compile_s`, `train_s`) and `updates_done`."""
    compile_start = time.perf_counter()
    shardings = run.placement.shardings(state)
    with run.compiling(TRAINING_LOOP):
        run_chunk = compile_fused(c, state, shardings)
    run.loop_compiled(state)  # the evaluation compiles on copies: the first call gives the state away
    compile_s = time.perf_counter() - compile_start
    train_s, done = 0.0, run.start_update
    for point in run.schedule.remaining(done):
        start = time.perf_counter()
        state, sums, diagnostics = run_chunk(state, jnp.int32(point - done))
        state = put_empty_leaves(state, shardings)  # where the next call was compiled to find them
        sums, diagnostics = distributed.fetch((sums, diagnostics))  # all processes' seeds
        elapsed = time.perf_counter() - start
        train_s += elapsed
        window = Window(updates_done=point, num_iterations=point - done, elapsed_s=elapsed, sums=sums,
                        first_nonfinite_update=first_nonfinite(diagnostics["first_nonfinite_update"]),
                        params_finite=diagnostics["params_finite"])
        done = point
        if run.sync(window, state):
            break
    return state, {"compile_s": compile_s, "train_s": train_s, "updates_done": done}
