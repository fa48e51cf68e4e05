"""The evaluation's compile against the training loop's, on the CPU: XLA's compile of each program
alone, in CPU seconds (issue #58: `eval_compile_s` at most half the loop's).

usage: python -m benchmarks.eval_compile ENV [ENV ...]   (each env at its preset; cache off)
prints one line per env: EVAL_COMPILE {"env": ..., "loop_cpu_s": ..., "eval_level2_cpu_s": ...,
"eval_level1_cpu_s": ..., "env_only_cpu_s": ..., "env_obs_cpu_s": ..., "level1_over_loop": ...,
"level1_over_env_only": ..., "level1_over_env_obs": ...}

The loop is the fused program (`fused.fused_program`) at XLA's defaults; the evaluation is the run's
own (`run.evaluation_program`, compiled with `EVALUATION_CPU_OPTIONS`, LLVM's level 1) and the same
program at the defaults (level 2), as it compiled before. CPU seconds, not wall seconds: XLA's
compile of one program keeps more than one core busy, and the machine's other load moves the wall.
`env_only` is the bound under the evaluation: the env alone, as any evaluation of complete episodes
must hold it (its reset, then a `while_loop` of its step on actions sampled from its action space
until every env's episode ended) with no policy, no observation handling and no restart select,
compiled with the same options; `env_obs` is that program with each step's observation kept, as a
policy needs it. docs/benchmarks.md, "The evaluation at LLVM's level 1" and after, has the figures.
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
from jaxrl_async.envs.suites.autoreset import without_reset  # noqa: E402
from jaxrl_async.rollout.evaluate import EVALUATION_CPU_OPTIONS  # noqa: E402
from jaxrl_async.trainer import presets  # noqa: E402
from jaxrl_async.trainer.build import build, initial_states  # noqa: E402
from jaxrl_async.trainer.fused import fused_program  # noqa: E402
from jaxrl_async.trainer.run import evaluation_program  # noqa: E402


def _cpu_seconds(lowered) -> float:
    start = time.process_time()
    lowered.compile()
    return time.process_time() - start


def env_only_program(env, env_params, num_episodes: int, num_seeds: int, keep_obs: bool = False):
    """The env's own part of an evaluation, per seed: reset `num_episodes` envs, then step them on
    sampled actions until each one's first episode ended (or the time limit); the undiscounted
    returns, and the last observations summed (0 without `keep_obs`). What stays when the policy
    and the restart of finished envs are taken out.

    Without `keep_obs` no one reads the observations, so XLA drops their computation from the
    step; with it, each step computes them, as it must where a policy acts on them."""
    max_steps = int(getattr(env_params, "max_steps_in_episode", 0)) or 10_000
    sample = jax.vmap(env.action_space(env_params).sample)
    reset_env = jax.vmap(env.reset, in_axes=(0, None))
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def one_seed(key):
        key, reset_key = jax.random.split(key)
        obs, env_state = reset_env(jax.random.split(reset_key, num_episodes), env_params)

        def body(loop):
            env_state, obs, key, done, t, returns = loop
            key, act_key, step_key = jax.random.split(key, 3)
            action = sample(jax.random.split(act_key, num_episodes))
            with without_reset():
                obs, env_state, reward, terminated, truncated, _ = step_env(
                    jax.random.split(step_key, num_episodes), env_state, action, env_params)
            returns = returns + jnp.where(done, 0.0, reward.astype(jnp.float32))
            return env_state, obs if keep_obs else (), key, done | terminated | truncated, t + 1, returns

        loop = (env_state, obs if keep_obs else (), key, jnp.zeros((num_episodes,), bool), jnp.int32(0),
                jnp.zeros((num_episodes,)))
        loop = jax.lax.while_loop(lambda loop: ~jnp.all(loop[3]) & (loop[4] < max_steps), body, loop)
        return loop[5], sum(jnp.sum(leaf.astype(jnp.float32)) for leaf in jax.tree.leaves(loop[1]))

    return jax.jit(jax.vmap(one_seed), compiler_options=EVALUATION_CPU_OPTIONS)


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
    env_only, env_obs = (_cpu_seconds(env_only_program(c.env, c.env_params, cfg.eval_episodes, cfg.num_seeds,
                                                       keep_obs=keep_obs).lower(args[2]))
                         for keep_obs in (False, True))
    return {"env": env_id, "loop_cpu_s": round(loop, 2), "eval_level2_cpu_s": round(level2, 2),
            "eval_level1_cpu_s": round(level1, 2), "env_only_cpu_s": round(env_only, 2),
            "env_obs_cpu_s": round(env_obs, 2), "level1_over_loop": round(level1 / loop, 3),
            "level1_over_env_only": round(level1 / env_only, 3), "level1_over_env_obs": round(level1 / env_obs, 3)}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for env in sys.argv[1:]:
        print("EVAL_COMPILE", json.dumps(measure(env)), flush=True)
