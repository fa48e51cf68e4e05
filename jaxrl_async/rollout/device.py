"""One jitted rollout: `lax.scan` over T steps of act -> env.step -> record, then GAE.

    rollout = make_rollout(env, env_params, policy, num_envs=4, num_steps=128, ...)
    state = rollout.init(key)
    state, trajectory = jax.jit(rollout.collect)(params, state)

Observations may be pytrees (a Dict / Tuple observation space): the state's and the
trajectory's observations then have the space's structure, leaves `[B, ...]` / `[T, B, ...]`.

The same `collect` serves the fused trainer (inside its scan over iterations) and
the async pipeline's actor thread (jitted on its own).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp

from jaxrl_async.core.advantages import batched_gae, gae_inputs
from jaxrl_async.core.bootstrap import bootstrap_values
from jaxrl_async.envs.normalize import RunningMeanStd
from jaxrl_async.envs.wrappers import max_truncations as env_truncation_bound
from jaxrl_async.core.exploration import check_correlation, initial_noise, next_noise
from jaxrl_async.nets.actor_critic import Policy, reset_carry
from jaxrl_async.envs.spaces import as_observation, map_shapes
from jaxrl_async.types import RolloutState, Trajectory


class Rollout(NamedTuple):
    init: Callable[[jax.Array], RolloutState]  # key -> RolloutState
    collect: Callable[[Any, RolloutState], tuple[RolloutState, Trajectory]]  # (params, state)


def make_rollout(env, env_params, policy: Policy, *, num_envs: int, num_steps: int,
                 gamma: float, gae_lambda: float, normalize_obs: bool = False,
                 unroll: int = 1, gae_scan: str = "sequential", noise_correlation: float = 0.0,
                 max_truncations: int | None = None) -> Rollout:
    """Build the rollout for `num_envs` parallel copies of a gymnax-1.x env.

    Args:
      env, env_params: a gymnax-1.x env (six-value `step`) wrapped in
        `EpisodeStatistics`, and its params.
      policy: the actor-critic's pure functions.
      num_envs, num_steps: B and T.
      gamma, gae_lambda: discount and GAE lambda for the advantages.
      normalize_obs: keep running observation statistics in the state and feed
        the policy normalised observations (every leaf of a nested observation on its own).
      unroll: `lax.scan` unroll factor (speed only).
      gae_scan: GAE's recursion, "sequential" or "associative" (`advantages.gae`; speed only).
      noise_correlation: correlation of a Gaussian policy's exploration noise between
        consecutive steps (`exploration.py`); 0 samples white noise.
      max_truncations: how many truncated steps per env the bootstrap values (`bootstrap.py`):
        None for the most the env's time limit allows (`envs.wrappers.max_truncations`);
        `num_steps` values every step's pre-reset observation (speed only: the benchmark's
        reference; a count below the env's bound would drop bootstraps, so it is refused).
    """
    correlated = check_correlation(noise_correlation, policy.discrete)
    bound = env_truncation_bound(env, env_params, num_steps)
    truncations = bound if max_truncations is None else max_truncations
    if not bound <= truncations <= num_steps:
        raise ValueError(f"max_truncations={max_truncations}: an env can be truncated up to {bound} times in "
                         f"{num_steps} steps, so give {bound}..{num_steps} (or None for {bound})")
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    reset_env = jax.vmap(env.reset, in_axes=(0, None))
    obs_shape = policy.obs_shape

    def init(key: jax.Array) -> RolloutState:
        key, reset_key = jax.random.split(key)
        obs, env_state = reset_env(jax.random.split(reset_key, num_envs), env_params)
        obs = as_observation(obs_shape, obs)
        stats = RunningMeanStd.create(obs_shape)
        if normalize_obs:
            stats = stats.update(obs)
        return RolloutState(env_state=env_state, obs=obs, obs_stats=stats, key=key,
                            carry=policy.initial_carry((num_envs,)), reset=jnp.ones((num_envs,), bool),
                            noise=initial_noise(num_envs, policy.action_shape) if correlated else ())

    def observe(stats: RunningMeanStd, obs: jax.Array) -> jax.Array:
        return stats.normalize(obs) if normalize_obs else obs

    def step(params, state: RolloutState, _):
        # one split serves the next carry key, the action and every env's step
        keys = jax.random.split(state.key, num_envs + 2)
        key, act_key, step_keys = keys[0], keys[1], keys[2:]
        obs = observe(state.obs_stats, state.obs)
        dist, value, carry = policy.step(params, obs, reset_carry(policy, state.carry, state.reset))
        if correlated:
            noise = next_noise(act_key, state.noise, state.reset, noise_correlation)
            action = dist.sample_from_noise(noise)
        else:
            noise, action = (), dist.sample(act_key)
        log_prob = dist.log_prob(action)
        next_obs, env_state, reward, terminated, truncated, info = step_env(
            step_keys, state.env_state, action, env_params)
        next_obs = as_observation(obs_shape, next_obs)
        stats = state.obs_stats.update(next_obs) if normalize_obs else state.obs_stats
        # record the pre-reset observation: at a truncation the bootstrap is V(final obs),
        # valued after the scan (`bootstrap_values`)
        final_obs = observe(stats, as_observation(obs_shape, info["final_observation"]))
        record = dict(
            obs=obs, action=action, log_prob=log_prob, value=value,
            reward=reward.astype(jnp.float32), terminated=terminated, truncated=truncated,
            next_obs=final_obs, episode_return=info["episode_return"],
            episode_length=info["episode_length"], episode_done=info["episode_done"], reset=state.reset,
            # to value a truncated step's next_obs after the scan; a feedforward policy's carry is (),
            # which records nothing
            carry_after=carry)
        state = state.replace(env_state=env_state, obs=next_obs, obs_stats=stats, key=key, carry=carry,
                              reset=terminated | truncated, noise=noise)
        return state, record

    def collect(params, state: RolloutState) -> tuple[RolloutState, Trajectory]:
        map_shapes(lambda shape, obs: chex.assert_shape(obs, (num_envs, *shape)), obs_shape, state.obs)
        initial_carry = state.carry
        state, rec = jax.lax.scan(lambda s, x: step(params, s, x), state, None,
                                  length=num_steps, unroll=unroll)
        # the fragment leaves off at the next one's first observation and carry (at a reset their
        # value is not used: the step before it ended the episode)
        bootstrap_value = bootstrap_values(lambda obs, carry: policy.value_step(params, obs, carry), rec,
                                           rec.pop("carry_after"), truncations,
                                           following=(observe(state.obs_stats, state.obs), state.carry))
        discount_t, lambda_t = gae_inputs(rec["reward"], rec["terminated"], rec["truncated"],
                                          gamma, gae_lambda)
        advantage = batched_gae(rec["reward"], discount_t, rec["value"], bootstrap_value, lambda_t,
                                scan=gae_scan)
        trajectory = Trajectory(**rec, bootstrap_value=bootstrap_value, advantage=advantage,
                                target=advantage + rec["value"], initial_carry=initial_carry)
        chex.assert_shape([trajectory.reward, trajectory.advantage, trajectory.log_prob],
                          (num_steps, num_envs))
        return state, trajectory

    return Rollout(init, collect)
