"""The `suites` case: each JAX suite's env in our rollout against the suite's raw step.

The limit for a rollout is the env itself: the suite's own step (`SuiteEnv.step_env`, which
neither resets nor records anything), `vmap`ped over the same env count, with random actions, T
steps in one `lax.scan`. Our rollout adds the policy's forward pass, the auto-reset (a fresh
initial state drawn every step, selected where an episode ended), the trajectory's records and
GAE. `ratio_to_raw_env` is rollout / raw steps/s; where the env's step costs more than the
policy's forward pass (Brax, Playground, Craftax) it should be near 1 (the issue asks >= 0.8).
A suite that is not installed is skipped with a note.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

import jax

from jaxrl_async.cli.bench.measure import time_jitted
from jaxrl_async.config import TrainConfig
from jaxrl_async.envs import make_env
from jaxrl_async.envs.suites import split_suite_id
from jaxrl_async.trainer.build import build, init_state

# one env per suite, its flagship (the presets' envs), and the env counts measured
SUITE_ENVS = ("brax:inverted_pendulum", "playground:CartpoleBalance", "craftax:Craftax-Classic-Symbolic-v1",
              "jumanji:Snake-v1", "navix:Navix-Empty-5x5-v0", "xminigrid:MiniGrid-Empty-8x8")
ENV_COUNTS = (64, 1024)
QUICK_ENV = "navix:Navix-Empty-5x5-v0"  # the quick smoke run measures one cheap env


def _installed(env_id: str) -> bool:
    return importlib.util.find_spec(split_suite_id(env_id)[0].package) is not None


def raw_steps(env, params, num_envs: int, num_steps: int):
    """`(inner states, key) -> ...`: T steps of the suite's own step over `num_envs` envs."""
    space = env.action_space(params)
    suite_env = env.unwrapped

    def run(inner, key):
        def body(carry, _):
            inner, key = carry
            key, act_key, step_key = jax.random.split(key, 3)
            actions = jax.vmap(space.sample)(jax.random.split(act_key, num_envs))
            _, inner, reward, *_ = jax.vmap(suite_env.step_env, (0, 0, 0, None))(
                jax.random.split(step_key, num_envs), inner, actions, params)
            return (inner, key), reward.sum()
        return jax.lax.scan(body, (inner, key), None, num_steps)

    return run


def suites(quick: bool, repeats: int) -> dict:
    results = {}
    env_ids = (QUICK_ENV,) if quick else SUITE_ENVS
    for env_id in env_ids:
        if not _installed(env_id):
            print(f"suites: {env_id} skipped, its suite is not installed", file=sys.stderr)
            continue
        for num_envs in (8,) if quick else ENV_COUNTS:
            num_steps = 16 if quick else 128
            env, params = make_env(env_id)
            _, inner = jax.vmap(env.unwrapped.reset_env, (0, None))(
                jax.random.split(jax.random.PRNGKey(0), num_envs), params)
            raw = time_jitted(raw_steps(env, params, num_envs, num_steps), inner, jax.random.PRNGKey(1),
                              repeats=repeats)
            c = build(TrainConfig(env=env_id, num_envs=num_envs, num_steps=num_steps,
                                  total_timesteps=num_envs * num_steps))
            state = jax.jit(functools.partial(init_state, c))(jax.random.PRNGKey(0))
            ours = time_jitted(c.rollout.collect, state.learner.params, state.rollout, repeats=repeats)
            steps = num_envs * num_steps
            raw_row = raw.as_dict(steps)
            row = ours.as_dict(steps)
            row["ratio_to_raw_env"] = row["steps_per_second"]["median"] / raw_row["steps_per_second"]["median"]
            results[f"suites/raw/{env_id}/envs={num_envs}"] = raw_row
            results[f"suites/rollout/{env_id}/envs={num_envs}"] = row
    return results
