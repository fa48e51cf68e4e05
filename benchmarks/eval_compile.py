"""The evaluation's compile against the training loop's, on the CPU: XLA's compile of each program
alone, in CPU seconds (issue #58: `eval_compile_s` at most half the loop's).

usage: python -m benchmarks.eval_compile ENV [ENV ...]   (each env at its preset; cache off)
prints one line per env: EVAL_COMPILE {"env": ..., "loop_cpu_s": ..., "eval_level2_cpu_s": ...,
"eval_level1_cpu_s": ..., "level1_over_loop": ...}

The loop is the fused program (`fused.fused_program`) at XLA's defaults; the evaluation is the run's
own (`run.evaluation_program`, compiled with `EVALUATION_CPU_OPTIONS`, LLVM's level 1) and the same
program at the defaults (level 2), as it compiled before. CPU seconds, not wall seconds: XLA's
compile of one program keeps more than one core busy, and the machine's other load moves the wall.
docs/benchmarks.md, "The evaluation at LLVM's level 1", has the figures.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "0")  # before JAX starts: every compile is a real one

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxrl_async.core.programs import seed_keys  # noqa: E402
from jaxrl_async.trainer import presets  # noqa: E402
from jaxrl_async.trainer.build import build, initial_states  # noqa: E402
from jaxrl_async.trainer.fused import fused_program  # noqa: E402
from jaxrl_async.trainer.run import evaluation_program  # noqa: E402


def _cpu_seconds(lowered) -> float:
    start = time.process_time()
    lowered.compile()
    return time.process_time() - start


def measure(env_id: str) -> dict:
    cfg = presets.config_for(env_id)
    c = build(cfg)
    state = initial_states(c)
    loop = _cpu_seconds(fused_program(c).lower(state, jnp.int32(1)))
    program = evaluation_program(c)
    args = (state.learner.params, state.rollout.obs_stats, np.asarray(seed_keys(cfg.seed, cfg.num_seeds)),
            jnp.uint32(1))
    level1 = _cpu_seconds(program.lower(*args, greedy=True))
    level2 = _cpu_seconds(jax.jit(program.__wrapped__, static_argnames="greedy").lower(*args, greedy=True))
    return {"env": env_id, "loop_cpu_s": round(loop, 2), "eval_level2_cpu_s": round(level2, 2),
            "eval_level1_cpu_s": round(level1, 2), "level1_over_loop": round(level1 / loop, 3)}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for env in sys.argv[1:]:
        print("EVAL_COMPILE", json.dumps(measure(env)), flush=True)
