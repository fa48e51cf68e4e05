"""The device collector: one jitted `lax.scan` over T steps of act -> env.step -> record, then the
finishing step (bootstrap values, GAE; `collector.finish`).

    rollout = make_rollout(env, env_params, policy, num_envs=4, num_steps=128, ...)
    state = rollout.init(key)
    state, trajectory = jax.jit(rollout.collect)(params, state)
    actor = rollout.make_actor(placement, states, ...)   # the async mode's actor (`DeviceActor`)
    evaluate = rollout.evaluator(num_episodes=32)        # `evaluate.DeviceEvaluator`

Observations may be pytrees (a Dict / Tuple observation space): the state's and the
trajectory's observations then have the space's structure, leaves `[B, ...]` / `[T, B, ...]`.

The same `collect` serves the fused mode (inside its scan over iterations) and
the async pipeline's actor thread (jitted on its own, `DeviceActor`).
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxrl_async.envs.normalize import RunningMeanStd
from jaxrl_async.envs.wrappers import max_truncations as env_truncation_bound
from jaxrl_async.core.exploration import check_correlation, initial_noise, next_noise
from jaxrl_async.nets.actor_critic import Policy, reset_carry
from jaxrl_async.envs.spaces import as_observation, map_shapes
from jaxrl_async.core.programs import ProgramHook, keep_program, over_seeds, put_empty_leaves, warm_up
from jaxrl_async.rollout.collector import HOST_TIMING_FIELDS, finish, observing
from jaxrl_async.rollout.evaluate import DeviceEvaluator, Recording, make_evaluator, make_recorder
from jaxrl_async.types import RolloutState, Trajectory


def make_rollout(env, env_params, policy: Policy, *, num_envs: int, num_steps: int,
                 gamma: float, gae_lambda: float, reward_scale: float = 1.0, normalize_obs: bool = False,
                 unroll: int = 1, gae_scan: str = "sequential", noise_correlation: float = 0.0,
                 max_truncations: int | None = None, record_raw_obs: bool = False) -> "DeviceRollout":
    """Build the rollout for `num_envs` parallel copies of a gymnax-1.x env.

    Args:
      env, env_params: a gymnax-1.x env (six-value `step`) wrapped in
        `EpisodeStatistics`, and its params.
      policy: the actor-critic's pure functions.
      num_envs, num_steps: B and T.
      gamma, gae_lambda: discount and GAE lambda for the advantages.
      reward_scale: the rewards' factor before the learner sees them (`collector.finish`).
      normalize_obs: keep running observation statistics in the state and feed
        the policy normalised observations (every leaf of a nested observation on its own).
      unroll: `lax.scan` unroll factor (speed only).
      gae_scan: GAE's recursion, "sequential" or "matrix" (`advantages.gae`; speed only).
      noise_correlation: correlation of a Gaussian policy's exploration noise between
        consecutive steps (`exploration.py`); 0 samples white noise.
      max_truncations: how many truncated steps per env the bootstrap values (`bootstrap.py`):
        None for the most the env's time limit allows (`envs.wrappers.max_truncations`);
        `num_steps` values every step's pre-reset observation (speed only: the benchmark's
        reference; a count below the env's bound would drop bootstraps, so it is refused).
      record_raw_obs: with `normalize_obs`, record the env's own observations and hand the
        statistics over with them (`Trajectory.obs_stats`): a replay learner's buffer stores them
        and normalises each sampled batch by the statistics of its update.
    """
    correlated = check_correlation(noise_correlation, policy.discrete)
    bound = env_truncation_bound(env, env_params, num_steps)
    truncations = bound if max_truncations is None else max_truncations
    if not bound <= truncations <= num_steps:
        raise ValueError(f"max_truncations={max_truncations}: an env can be truncated up to {bound} times in "
                         f"{num_steps} steps, so give {bound}..{num_steps} (or None for {bound})")
    # a critic of its own (`Policy.critic_apart`) values the fragment's observations after the scan,
    # in one batched call, and the scan's body runs the actor alone (XLA drops the critic whose
    # value it does not record): on a GPU each step's critic was kernels of its own
    value_after_scan = policy.critic_apart
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    reset_env = jax.vmap(env.reset, in_axes=(0, None))
    obs_shape = policy.obs_shape
    raw = normalize_obs and record_raw_obs

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
        final_obs = as_observation(obs_shape, info["final_observation"])
        record = dict(
            obs=state.obs if raw else obs, action=action, log_prob=log_prob, value=() if value_after_scan else value,
            reward=reward.astype(jnp.float32), terminated=terminated, truncated=truncated,
            next_obs=final_obs if raw else observe(stats, final_obs), episode_return=info["episode_return"],
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
        carry_after = rec.pop("carry_after")
        obs_stats = state.obs_stats if raw else ()
        recorded = observing(policy, obs_stats) if raw else policy  # what values the recorded obs
        if value_after_scan:
            rec["value"] = recorded.value_step(params, rec["obs"], ())
        # the fragment leaves off at the next one's first observation and carry (at a reset their
        # value is not used: the step before it ended the episode)
        trajectory = finish(policy, params, rec, carry_after, initial_carry, gamma=gamma, gae_lambda=gae_lambda,
                            gae_scan=gae_scan, max_truncations=truncations, reward_scale=reward_scale,
                            following=(state.obs if raw else observe(state.obs_stats, state.obs), state.carry),
                            obs_stats=obs_stats)
        chex.assert_shape([trajectory.reward, trajectory.advantage, trajectory.log_prob],
                          (num_steps, num_envs))
        return state, trajectory

    evaluator = functools.partial(make_evaluator, env, env_params, policy, normalize_obs=normalize_obs)
    recorder = functools.partial(make_recorder, env, env_params, policy, normalize_obs=normalize_obs)
    return DeviceRollout(init, collect, policy, num_envs, num_steps, evaluator, recorder)


class DeviceRollout(NamedTuple):
    """A device collector (`collector.Collector`): `init` and `collect` are pure and jittable."""

    init: Callable[[jax.Array], RolloutState]  # key -> RolloutState
    collect: Callable[[Any, RolloutState], tuple[RolloutState, Trajectory]]  # (params, state)
    policy: Policy
    num_envs: int
    num_steps: int
    make_evaluator: Callable[..., Callable]  # (num_episodes=, unroll=) -> evaluate
    make_recorder: Callable[..., Callable]  # (num_episodes=, max_frames=) -> record (`evaluate.make_recorder`)

    def make_actor(self, placement, state, *, device, num_seeds: int, seed: int, start: int,
                   num_actors: int, program: ProgramHook = None) -> "DeviceActor":
        """The async mode's actor (the env seeds, their stream and the actor count are host envs')."""
        return DeviceActor(self, placement, state, device, num_seeds, program)

    def evaluator(self, num_episodes: int, unroll: int = 1) -> DeviceEvaluator:
        return DeviceEvaluator(self.make_evaluator(num_episodes=num_episodes, unroll=unroll))

    def recorder(self, num_episodes: int, max_frames: int) -> Callable[..., Recording]:
        """`record(params, obs_stats, key, select) -> Recording`, a JAX function: the first greedy
        evaluation episode, step by step (`evaluate.make_recorder`)."""
        return self.make_recorder(num_episodes=num_episodes, max_frames=max_frames)


class DeviceActor:
    """The async mode's actor over a device rollout: its jitted `collect` over every seed, on the
    learner's placement or, with `--actor-device cpu`, compiled for a device of its own; then the
    params are copied there once per version and each trajectory reaches the learner's device as
    one transfer."""

    def __init__(self, collector: DeviceRollout, placement, state, device: Any | None, num_seeds: int,
                 program: ProgramHook = None):
        shardings = placement.shardings(state)
        rollout_leaves, rollout_structure = jax.tree.flatten(shardings.rollout)
        self._learner_rollout_sharding = shardings.rollout
        self._device = device
        self._source = self._params = None

        def collect_fn(params, rollout_state):
            rollout_state, trajectory = over_seeds(collector.collect, num_seeds)(params, rollout_state)
            if device is None:
                rollout_state = jax.lax.with_sharding_constraint(rollout_state, shardings.rollout)
            return rollout_state, trajectory

        params, rollout = state.learner.params, state.rollout
        self.unpack = lambda trajectory: trajectory  # noqa: E731 -- applied by the learner, inside its jit
        if device is None:
            collect = keep_program(program, ("collect", num_seeds, tuple(rollout_leaves), rollout_structure),
                                   lambda: jax.jit(collect_fn))
            self._collect = collect.lower(params, rollout).compile()
            # the learner is compiled for the trajectory exactly as collect lays it out (its shapes
            # from the trace just made: JAX caches a jitted function's trace)
            _, trajectory = jax.eval_shape(collect, params, rollout)
            _, out_shardings = self._collect.output_shardings
            self.trajectory = jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
                                           trajectory, out_shardings)
            warm_up(self._collect, params, rollout)
        else:
            # params and trajectory cross devices packed, each as one flat array: one copy, not one
            # per leaf
            _, unravel_params = ravel_pytree(jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), params))
            _, trajectory = jax.eval_shape(collect_fn, params, rollout)
            _, self.unpack = ravel_pytree(jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), trajectory))

            def collect_packed(flat_params, rollout_state):
                rollout_state, trajectory = collect_fn(unravel_params(flat_params), rollout_state)
                return rollout_state, ravel_pytree(trajectory)[0]

            replicated = jax.sharding.NamedSharding(placement.mesh, jax.sharding.PartitionSpec())
            self._pack_params = keep_program(program, ("pack_params", replicated), lambda: jax.jit(
                lambda p: ravel_pytree(p)[0], out_shardings=replicated))
            flat_params, rollout = jax.device_put((self._pack_params(params), rollout), device)
            collect = keep_program(program, ("collect_packed", num_seeds, device), lambda: jax.jit(collect_packed))
            self._collect = collect.lower(flat_params, rollout).compile()
            _, packed = jax.eval_shape(collect, flat_params, rollout)
            self._out_shardings = replicated
            self.trajectory = jax.ShapeDtypeStruct(packed.shape, packed.dtype, sharding=replicated)
            warm_up(self._collect, flat_params, rollout)
        self._timings = dict.fromkeys(HOST_TIMING_FIELDS, 0.0)

    def collect(self, params, rollout_state):
        if self._device is None:
            rollout_state, trajectory = self._collect(params, rollout_state)
            return put_empty_leaves(rollout_state, self._learner_rollout_sharding), trajectory
        start = time.perf_counter()
        if params is not self._source:  # once per version: the store hands out the same object
            self._params, self._source = jax.device_put(self._pack_params(params), self._device), params
        rollout_state = jax.device_put(rollout_state, self._device)  # a no-op once it lives there
        transfer_s = time.perf_counter() - start
        tick = time.perf_counter()
        rollout_state, trajectory = self._collect(self._params, rollout_state)
        jax.block_until_ready(trajectory)
        inference_s = time.perf_counter() - tick
        tick = time.perf_counter()
        trajectory = jax.block_until_ready(jax.device_put(trajectory, self._out_shardings))
        self._timings = {"env_s": 0.0, "inference_s": inference_s,
                         "transfer_s": transfer_s + time.perf_counter() - tick}
        return rollout_state, trajectory

    def timings(self) -> dict:
        return dict(self._timings)

    def to_learner(self, rollout_state):
        return rollout_state if self._device is None else jax.device_put(rollout_state,
                                                                        self._learner_rollout_sharding)

    def close(self) -> None:
        pass
