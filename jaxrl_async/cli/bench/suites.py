"""The `suites` case: each JAX suite's env in our rollout against the suite's raw step.

The limit for a rollout is the env itself: the suite's own step (`SuiteEnv.step_env`, which
neither resets nor records anything), `vmap`ped over the same env count, with random actions, T
steps in one `lax.scan` (`raw`). Our rollout adds the policy's forward pass, the auto-reset, the
trajectory's records and GAE. `ratio_to_raw_env` is rollout / raw steps/s; where the env's step
costs more than the policy's forward pass (Brax, Playground, Craftax) it should be near 1 (the
issue asks >= 0.8).

Two rows split the difference. `acting` is the policy's forward pass and its sampling alone over
the same envs and steps (the observations nudged by each step's output, so the loop cannot hoist
it). The auto-reset is work the raw step skips and no auto-resetting rollout can: each episode that
ends needs a fresh initial state, and a Craftax reset generates a world (~40 steps' cost). The
`env` row measures that bound: the adapter's whole step (the suite's step, its time limit, and the
resets of exactly the envs whose episode ended, `autoreset.reset_where`) with random actions and
nothing of ours around it; `ratio_to_env_with_resets` is rollout / env. What is left of the
rollout's time after `env` and `acting` is its records (every step's observation and pre-reset
observation, `[T, B, ...]`), the carried statistics and GAE. The programs are compiled first and
then timed in alternation, call by call, so a noisy stretch of the machine falls on all alike. A
suite that is not installed is skipped with a note.

A fifth row, `minimal`, is the floor for a rollout that trains PPO: PureJaxRL's rollout over the
same env, policy and records the update reads, without the pre-reset observation (so without the
truncation bootstrap). `ratio_to_minimal_rollout` is rollout / minimal: what our extra records and
honest truncation cost.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

import jax
import jax.numpy as jnp

from jaxrl_async.cli.bench.measure import time_alternately
from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.core.advantages import batched_gae
from jaxrl_async.envs import make_env
from jaxrl_async.envs.spaces import as_observation
from jaxrl_async.envs.suites import split_suite_id
from jaxrl_async.trainer.build import build, init_state

# one env per suite, its flagship (the presets' envs), and the env counts measured
SUITE_ENVS = ("brax:inverted_pendulum", "playground:CartpoleBalance", "craftax:Craftax-Classic-Symbolic-v1",
              "jumanji:Snake-v1", "navix:Navix-Empty-5x5-v0", "xminigrid:MiniGrid-Empty-8x8")
ENV_COUNTS = (64, 1024)
QUICK_ENV = "navix:Navix-Empty-5x5-v0"  # the quick smoke run measures one cheap env


def _installed(env_id: str) -> bool:
    return importlib.util.find_spec(split_suite_id(env_id)[0].package) is not None


def raw_steps(env, params, num_envs: int, num_steps: int, resets: bool = False):
    """`(inner states, key) -> ...`: T steps of the suite's own step over `num_envs` envs, with
    random actions; with `resets`, the adapter's auto-resetting step instead (`SuiteEnv.step`)."""
    space = env.action_space(params)
    suite_env = env.unwrapped

    def step(keys, state, actions):
        if resets:
            return jax.vmap(suite_env.step, (0, 0, 0, None))(keys, state, actions, params)[1:3]
        return jax.vmap(suite_env.step_env, (0, 0, 0, None))(keys, state, actions, params)[1:3]

    def run(state, key):
        def body(carry, _):
            state, key = carry
            key, act_key, step_key = jax.random.split(key, 3)
            actions = jax.vmap(space.sample)(jax.random.split(act_key, num_envs))
            state, reward = step(jax.random.split(step_key, num_envs), state, actions)
            return (state, key), reward.sum()
        return jax.lax.scan(body, (state, key), None, num_steps)

    return run


def acting_steps(policy, num_envs: int, num_steps: int):
    """`(params, observations, key) -> ...`: T steps of the policy's act (forward pass, sample,
    log-probability) on the rollout's observations, each step's observations nudged by its output."""

    def run(params, obs, key):
        def body(carry, _):
            obs, key = carry
            key, act_key = jax.random.split(key)
            dist, value, _ = policy.step(params, obs, policy.initial_carry((num_envs,)))
            log_prob = dist.log_prob(dist.sample(act_key))
            nudge = 1e-9 * (jnp.sum(log_prob) + jnp.sum(value))
            obs = jax.tree.map(lambda x: x + nudge.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                               obs)
            return (obs, key), log_prob.sum()
        return jax.lax.scan(body, (obs, key), None, num_steps)

    return run


def minimal_rollout_steps(env, params, policy, num_envs: int, num_steps: int, gamma: float = 0.99,
                          gae_lambda: float = 0.95):
    """`(params, env states, observations, key) -> ...`: the least an auto-resetting rollout that
    trains PPO does, as PureJaxRL's does it: the env as the rollout steps it (the adapter's
    auto-resetting step, the action clipped, the episode statistics), the policy's act, the records
    the update reads (observation, action, reward, done, value, log-probability, each `[T, B]`),
    the last observation's value and GAE over the done flags. It keeps no pre-reset observation, so
    it cannot bootstrap a truncated episode: the floor of `rollout`'s work, not a rollout we would
    ship."""
    step_env = jax.vmap(env.step, (0, 0, 0, None))

    def run(policy_params, state, obs, key):
        def body(carry, _):
            state, obs, key = carry
            key, act_key, step_key = jax.random.split(key, 3)
            dist, value, _ = policy.step(policy_params, obs, policy.initial_carry((num_envs,)))
            action = dist.sample(act_key)
            next_obs, state, reward, terminated, truncated, _ = step_env(
                jax.random.split(step_key, num_envs), state, action, params)
            next_obs = as_observation(policy.obs_shape, next_obs)  # the dtypes the policy takes, as the rollout
            record = (obs, action, reward, terminated | truncated, value, dist.log_prob(action))
            return (state, next_obs, key), record

        (state, obs, key), (observations, actions, rewards, dones, values, log_probs) = jax.lax.scan(
            body, (state, obs, key), None, num_steps)
        _, last_value, _ = policy.step(policy_params, obs, policy.initial_carry((num_envs,)))
        discount = gamma * (1.0 - dones.astype(jnp.float32))
        next_values = jnp.concatenate([values[1:], last_value[None]])
        advantage = batched_gae(rewards.astype(jnp.float32), discount, values, next_values, gae_lambda)
        return (state, obs, key), (observations, actions, log_probs, advantage)

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
            suite_env = env.unwrapped
            keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
            _, inner = jax.vmap(suite_env.reset_env, (0, None))(keys, params)
            _, env_state = jax.vmap(suite_env.reset, (0, None))(keys, params)
            c = build(TrainConfig(env=env_id, num_envs=num_envs, num_steps=num_steps,
                                  total_timesteps=num_envs * num_steps))
            state = jax.jit(functools.partial(init_state, c))(jax.random.PRNGKey(0))
            programs = {
                "raw": (raw_steps(env, params, num_envs, num_steps), (inner, jax.random.PRNGKey(1))),
                "env": (raw_steps(env, params, num_envs, num_steps, resets=True), (env_state, jax.random.PRNGKey(1))),
                "acting": (acting_steps(c.rollout.policy, num_envs, num_steps),
                           (state.learner.params, state.rollout.obs, jax.random.PRNGKey(2))),
                "minimal": (minimal_rollout_steps(env, params, c.rollout.policy, num_envs, num_steps),
                            (state.learner.params, state.rollout.env_state, state.rollout.obs,
                             jax.random.PRNGKey(3))),
                "rollout": (c.rollout.collect, (state.learner.params, state.rollout))}
            rows = {name: row.as_dict(num_envs * num_steps)
                    for name, row in time_alternately(programs, repeats=repeats).items()}
            rate = {name: row["steps_per_second"]["median"] for name, row in rows.items()}
            rows["rollout"]["ratio_to_raw_env"] = rate["rollout"] / rate["raw"]
            rows["rollout"]["ratio_to_env_with_resets"] = rate["rollout"] / rate["env"]
            rows["rollout"]["ratio_to_minimal_rollout"] = rate["rollout"] / rate["minimal"]
            rows["minimal"]["ratio_to_raw_env"] = rate["minimal"] / rate["raw"]
            rows["env"]["ratio_to_raw_env"] = rate["env"] / rate["raw"]
            ms = {name: 1e3 * row["median_s"] / num_steps for name, row in rows.items()}
            rows["rollout"]["ms_per_step"] = {"env_with_resets": ms["env"], "acting": ms["acting"],
                                              "rest": ms["rollout"] - ms["env"] - ms["acting"]}
            for name, row in rows.items():
                results[f"suites/{name}/{env_id}/envs={num_envs}"] = row
    return results
