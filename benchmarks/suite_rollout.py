"""A JAX suite's env: our rollout's steps/s against the suite's raw `vmap(step)`, alternated in one process.

    python -m benchmarks.suite_rollout --env brax:inverted_pendulum --num-envs 2048 --env-kwargs backend=mjx
    python -m benchmarks.suite_rollout --env playground:CartpoleBalance --num-envs 256

- raw: the suite's own env (no adapter, no auto-reset), `num_steps` steps of `num_envs` vmapped envs
  in one jitted `lax.scan`, uniform random actions in [-1, 1]. Without resets the envs drift into
  the states after their termination (a fallen pendulum lying on its joint limit), whose physics
  may cost more or less than the task's own states, so beside it:
- suite: the same under the suite's own training wrappers (Brax's `training.wrap`, Playground's
  `wrap_for_brax_training`: the time limit, and the auto-reset to each env's cached first state),
  the env as the suite's own trainer steps it: the fair limit for a rollout;
- ours: `build(cfg).rollout.collect` (act + step with auto-reset + record + GAE) for the env's
  preset (its network and settings; `--preset none`: the defaults), once with each `auto_reset`.

Each program is compiled first, then the three are timed in turn `--rounds` times (so drift in a
shared machine's speed hits each alike); the figures are medians, and `X_to_Y` is X's steps/s over Y's.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import sys

import jax

from jaxrl_async.cli.flags import parse
from jaxrl_async.config import parse_env_kwargs
from jaxrl_async.envs.suites import make_suite_env
from jaxrl_async.trainer.build import build, init_state
from jaxrl_async.trainer.presets import config_for
from jaxrl_async.cli.bench.measure import time_calls


@dataclasses.dataclass(frozen=True)
class Args:
    env: str = "brax:inverted_pendulum"
    """A suite's env id, SUITE:ID."""
    env_kwargs: tuple[str, ...] = ()
    """The env's KEY=VALUE keywords (auto_reset is set by the script)."""
    num_envs: int = 2048
    """Envs stepped together, both sides."""
    num_steps: int = 32
    """Steps per timed call."""
    rounds: int = 5
    """Timed calls per program, alternated."""
    preset: str = "auto"
    """Whose settings ours uses ('auto': the env's preset; 'none': the defaults)."""


def raw_program(env_id: str, env_kwargs: dict, num_envs: int, num_steps: int, wrapped: bool):
    """The suite's own env, bare under `vmap` or under its training wrappers; random actions:
    (compiled fn, its args)."""
    adapted = make_suite_env(env_id, **env_kwargs)
    suite_env = adapted.unwrapped_suite_env
    action_size = int(suite_env.action_size)
    if wrapped:
        limit = adapted.default_params.max_steps_in_episode
        if env_id.startswith("brax:"):
            from brax.envs.wrappers.training import wrap
            batched = wrap(suite_env, episode_length=limit)
        else:
            from mujoco_playground import wrapper
            batched = wrapper.wrap_for_brax_training(suite_env, episode_length=limit)
        reset, step = batched.reset, batched.step
    else:
        reset, step = jax.vmap(suite_env.reset), jax.vmap(suite_env.step)

    def run(state, key):
        def body(carry, _):
            state, key = carry
            key, action_key = jax.random.split(key)
            actions = jax.random.uniform(action_key, (num_envs, action_size), minval=-1.0, maxval=1.0)
            state = step(state, actions)
            state = jax.tree.map(lambda new, old: new.astype(old.dtype), state, carry[0])  # a stable carry
            return (state, key), state.reward.sum()
        return jax.lax.scan(body, (state, key), None, num_steps)

    state = jax.jit(reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    return jax.jit(run).lower(state, jax.random.PRNGKey(1)).compile(), (state, jax.random.PRNGKey(1))


def ours_program(args: Args, auto_reset: str):
    cfg = config_for(args.env, args.preset)
    cfg = dataclasses.replace(cfg, num_envs=args.num_envs, num_steps=args.num_steps,
                              total_timesteps=args.num_envs * args.num_steps,
                              env_kwargs=(*args.env_kwargs, f"auto_reset={auto_reset}"))
    c = build(cfg)
    state = jax.jit(functools.partial(init_state, c))(jax.random.PRNGKey(0))
    params, rollout = state.learner.params, state.rollout
    return jax.jit(c.rollout.collect).lower(params, rollout).compile(), (params, rollout)


def main(argv: list[str] | None = None) -> dict:
    args = parse(Args, sys.argv[1:] if argv is None else argv, "python -m benchmarks.suite_rollout")
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    programs = {"raw": raw_program(args.env, env_kwargs, args.num_envs, args.num_steps, wrapped=False),
                "suite": raw_program(args.env, env_kwargs, args.num_envs, args.num_steps, wrapped=True),
                "ours_full": ours_program(args, "full"), "ours_cached": ours_program(args, "cached")}
    times = {name: [] for name in programs}
    for round_ in range(args.rounds):
        for name, (compiled, call_args) in programs.items():
            times[name] += time_calls(lambda: compiled(*call_args), warmup=int(round_ == 0), repeats=1)
    steps = args.num_envs * args.num_steps
    report = {"env": args.env, "env_kwargs": list(args.env_kwargs), "num_envs": args.num_envs,
              "backend": jax.default_backend(), "steps_per_call": steps}
    for name, measured in times.items():
        report[f"{name}_steps_per_second"] = round(steps / statistics.median(measured))
    for name in ("ours_full", "ours_cached"):
        for limit in ("raw", "suite"):
            report[f"{name}_to_{limit}"] = round(report[f"{name}_steps_per_second"]
                                                 / report[f"{limit}_steps_per_second"], 3)
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()
