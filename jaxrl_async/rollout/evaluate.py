"""Evaluate a policy on its own batch of envs: one complete episode per env.

    evaluate = make_evaluator(env, env_params, policy, num_episodes=32)
    result = jax.jit(evaluate)(params, obs_stats, key)   # EvalResult of [N] arrays

Every collector's `evaluator(num_episodes)` returns an evaluator with one interface: called as
`evaluate(params, obs_stats, key, greedy=True)` (`greedy` a Python bool, or a traced one that
picks between the mode and a sample), and `evaluate.stage(fn)` gives how a program
that calls it runs — jitted for `DeviceEvaluator`, as plain Python for the host envs'
(`HostEvaluator`, stepping NumPy envs of its own), so the run's code asks the evaluator, never its
kind.

Each of the `num_episodes` envs runs until its first episode ends (terminated or
truncated by the env's time limit); the return is undiscounted. The loop is a
`lax.while_loop` that stops once every env is done, so it costs one episode of
the longest env, and it vmaps over seeds.

Only the first episode counts, so the env's auto-reset is dead code here: the step is traced
`without_reset` (`envs/suites/autoreset.py`), and an env whose episode ended restarts from the
state its reset gave it (a select), never stepping on from a terminal state. The program then holds
one reset, where it held three (the initial one and the auto-reset's two): a suite's reset compiles
about as long as its step. A suite whose step past an episode's end is an ordinary one (the grid
and tile worlds: `SuiteEnv.steps_on_past_end`) steps on instead, its steps counting for nothing:
the select, one per leaf of the env's state, is then gone from the program as well.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl_async.envs.host.cores import actor_core, on_core
from jaxrl_async.envs.host.vec import HostVecEnv
from jaxrl_async.envs.normalize import RunningMeanStd
from jaxrl_async.envs.suites.autoreset import without_reset
from jaxrl_async.nets.actor_critic import Policy, reset_carry
from jaxrl_async.envs.spaces import as_observation


@struct.dataclass
class EvalResult:
    returns: jax.Array  # [N] float32 undiscounted return of each episode
    lengths: jax.Array  # [N] int32
    complete: jax.Array  # [N] bool, the episode ended within the step limit

    def summary_per_seed(self, prefix: str = "eval") -> dict[str, np.ndarray]:
        """Host side, for `[S, N]` results: per seed, mean/std/min/max of return and length over
        complete episodes (NaN for a seed with none), and the count of complete episodes."""
        returns, lengths = np.atleast_2d(self.returns), np.atleast_2d(self.lengths)
        mask = np.atleast_2d(np.asarray(self.complete, bool))
        out: dict[str, np.ndarray] = {f"{prefix}_episodes": mask.sum(axis=-1)}
        for name, values in (("return", returns), ("length", lengths)):
            values = np.where(mask, values.astype(np.float64), np.nan)
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: no complete episode
                for stat, fn in (("mean", np.nanmean), ("std", np.nanstd), ("min", np.nanmin), ("max", np.nanmax)):
                    out[f"{prefix}_{name}_{stat}"] = fn(values, axis=-1)
        return out


@struct.dataclass
class _EvalLoop:
    """The evaluation loop's state, `[N]` per env unless noted.

    Attributes:
      env_state: batched env state, leaves `[N, ...]`.
      obs: `[N, *obs_shape]` the current (raw) observation, float32 (a tree for a nested space).
      policy_carry: the policy's recurrent state, leaves `[N, ...]` (`()` if feedforward).
      key: PRNG key for actions and env steps.
      returns: float32 undiscounted return of each env's first episode so far.
      lengths: int32 steps of each env's first episode so far.
      done: bool, the env's first episode has ended.
      reset: bool, the current observation starts an episode (the carry is reset first).
      t: `[]` int32 loop steps taken.
    """

    env_state: Any
    obs: jax.Array
    policy_carry: Any
    key: jax.Array
    returns: jax.Array
    lengths: jax.Array
    done: jax.Array
    reset: jax.Array
    t: jax.Array


def make_evaluator(env, env_params, policy: Policy, *, num_episodes: int,
                   normalize_obs: bool = False, max_steps: int | None = None, unroll: int = 1
                   ) -> Callable[..., EvalResult]:
    """Build `evaluate(params, obs_stats, key, greedy=True) -> EvalResult`.

    Args:
      env, env_params: the env (wrapped as by `make_env`) and its params.
      policy: the actor-critic.
      num_episodes: N, one per evaluation env.
      normalize_obs: feed the policy `obs_stats.normalize(obs)` (frozen statistics).
      max_steps: step limit of the loop; default the env's time limit
        (`max_steps_in_episode`), so every episode completes, or 10,000 steps where the params
        have none or it is 0 (a JAX suite's adapter without a limit of its own: the suite's
        limit, if any, lives inside its step).
      unroll: env steps per trip of the loop (speed only: a step past an env's first
        episode, or past `max_steps`, changes nothing).
    """
    if max_steps is None:
        max_steps = int(getattr(env_params, "max_steps_in_episode", 0)) or 10_000
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    reset_env = jax.vmap(env.reset, in_axes=(0, None))
    restart = not getattr(env, "steps_on_past_end", False)

    def evaluate(params: Any, obs_stats: RunningMeanStd, key: jax.Array, greedy: bool = True) -> EvalResult:
        key, reset_key = jax.random.split(key)
        obs, env_state = reset_env(jax.random.split(reset_key, num_episodes), env_params)
        obs = as_observation(policy.obs_shape, obs)
        first = (obs, env_state) if restart else None  # where an env restarts once its first episode ended
        zeros = jnp.zeros((num_episodes,), jnp.float32)
        loop = _EvalLoop(env_state=env_state, obs=obs, policy_carry=policy.initial_carry((num_episodes,)),
                         key=key, returns=zeros, lengths=jnp.zeros((num_episodes,), jnp.int32),
                         done=jnp.zeros((num_episodes,), bool), reset=jnp.ones((num_episodes,), bool),
                         t=jnp.zeros((), jnp.int32))

        def cond(loop: _EvalLoop):
            return jnp.logical_and(~jnp.all(loop.done), loop.t < max_steps)

        def body(loop: _EvalLoop) -> _EvalLoop:
            key, act_key, step_key = jax.random.split(loop.key, 3)
            obs_in = as_observation(policy.obs_shape, loop.obs)
            if normalize_obs:
                obs_in = obs_stats.normalize(obs_in)
            dist, _, policy_carry = policy.step(params, obs_in, reset_carry(policy, loop.policy_carry, loop.reset))
            action = _action(dist, act_key, greedy)
            with without_reset():  # the auto-reset's work is `first`'s select below, if any
                obs, env_state, reward, terminated, truncated, _ = step_env(
                    jax.random.split(step_key, num_episodes), loop.env_state, action, env_params)
            ended = terminated | truncated
            obs = as_observation(policy.obs_shape, obs)
            if restart:
                obs, env_state = _where_rows(ended, first, (obs, env_state))
            # only the first episode of each env counts; an unrolled trip's steps past the limit
            # count for nothing
            live = ~loop.done & (loop.t < max_steps)
            return loop.replace(env_state=env_state, obs=obs, policy_carry=policy_carry, key=key,
                                returns=loop.returns + jnp.where(live, reward.astype(jnp.float32), 0.0),
                                lengths=loop.lengths + live.astype(jnp.int32),
                                done=loop.done | (ended & live), reset=ended, t=loop.t + 1)

        def trip(loop: _EvalLoop) -> _EvalLoop:
            for _ in range(unroll):
                loop = body(loop)
            return loop

        loop = jax.lax.while_loop(cond, trip, loop)
        return EvalResult(returns=loop.returns, lengths=loop.lengths, complete=loop.done)

    return evaluate


@struct.dataclass
class Recording:
    """One env's greedy episode, step by step, for a video (`make_recorder`); L is the recording's
    fixed length, the episode's steps come first (the rest are zeros).

    Attributes:
      states: what `select` keeps of the env state each step acted in, leaves `[L, ...]`.
      live: `[L]` bool, the step belongs to the episode (its first `length` steps).
      length: [] int32, the episode's steps recorded (at most L).
      episode_return: [] float32, the undiscounted return over them.
      complete: [] bool, the episode ended within the L steps.
    """

    states: Any
    live: jax.Array
    length: jax.Array
    episode_return: jax.Array
    complete: jax.Array


def make_recorder(env, env_params, policy: Policy, *, num_episodes: int, max_frames: int,
                  normalize_obs: bool = False) -> Callable[..., Recording]:
    """Build `record(params, obs_stats, key, select) -> Recording`: the greedy episode that
    `make_evaluator(..., num_episodes=num_episodes)` runs in its first env with the same `key`
    (the same keys split the same way; the same actions up to the float rounding of a batch of
    one), `select(env_state)` of each step it acts in written into a fixed-length `[L]` buffer,
    L = min(`max_frames`, the env's time limit). The loop stops at the episode's end (a
    `while_loop`, not a scan over all L steps): a recording costs the episode's steps, not the cap's.

    Args:
      env, env_params, policy, normalize_obs: as `make_evaluator`'s.
      num_episodes: the evaluation's env count N, whose first env's episode this is.
      max_frames: the most steps recorded; a longer episode is cut there (`complete` False).
    """
    time_limit = int(getattr(env_params, "max_steps_in_episode", 0)) or max_frames
    length = min(max_frames, time_limit)
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    reset_env = jax.vmap(env.reset, in_axes=(0, None))

    def record(params: Any, obs_stats: RunningMeanStd, key: jax.Array, select: Callable[[Any], Any]) -> Recording:
        key, reset_key = jax.random.split(key)
        # the first env's keys of the evaluation's batch: a batch of one, the evaluation's env 0
        obs, env_state = reset_env(jax.random.split(reset_key, num_episodes)[:1], env_params)
        loop = _EvalLoop(env_state=env_state, obs=as_observation(policy.obs_shape, obs),
                         policy_carry=policy.initial_carry((1,)), key=key, returns=jnp.zeros((1,), jnp.float32),
                         lengths=jnp.zeros((1,), jnp.int32), done=jnp.zeros((1,), bool),
                         reset=jnp.ones((1,), bool), t=jnp.zeros((), jnp.int32))
        first = lambda tree: jax.tree.map(lambda leaf: leaf[0], tree)  # noqa: E731
        frames = jax.tree.map(lambda leaf: jnp.zeros((length, *leaf.shape), leaf.dtype),
                              jax.eval_shape(select, first(env_state)))

        def cond(carry: tuple[_EvalLoop, Any]) -> jax.Array:
            loop, _ = carry
            return ~loop.done[0] & (loop.t < length)

        def body(carry: tuple[_EvalLoop, Any]) -> tuple[_EvalLoop, Any]:
            loop, frames = carry
            key, _, step_key = jax.random.split(loop.key, 3)
            obs_in = as_observation(policy.obs_shape, loop.obs)
            if normalize_obs:
                obs_in = obs_stats.normalize(obs_in)
            dist, _, policy_carry = policy.step(params, obs_in, reset_carry(policy, loop.policy_carry, loop.reset))
            frames = jax.tree.map(lambda buffer, leaf: buffer.at[loop.t].set(leaf), frames,
                                  select(first(loop.env_state)))
            with without_reset():  # the loop ends with the episode
                obs, env_state, reward, terminated, truncated, _ = step_env(
                    jax.random.split(step_key, num_episodes)[:1], loop.env_state, dist.mode(), env_params)
            ended = terminated | truncated
            loop = loop.replace(env_state=env_state, obs=as_observation(policy.obs_shape, obs),
                                policy_carry=policy_carry, key=key, returns=loop.returns + reward.astype(jnp.float32),
                                lengths=loop.lengths + 1, done=ended, reset=ended, t=loop.t + 1)
            return loop, frames

        loop, frames = jax.lax.while_loop(cond, body, (loop, frames))
        return Recording(states=frames, live=jnp.arange(length) < loop.t, length=loop.t,
                         episode_return=loop.returns[0], complete=loop.done[0])

    return record


def _where_rows(rows: jax.Array, on_true: Any, on_false: Any) -> Any:
    """`on_true`'s row where `rows` (`[N]` bool), else `on_false`'s, leaf by leaf (leaves `[N, ...]`)."""
    return jax.tree.map(lambda a, b: jnp.where(rows.reshape(rows.shape + (1,) * (jnp.ndim(a) - 1)), a, b),
                        on_true, on_false)


def _action(dist, key: jax.Array, greedy) -> Any:
    """The mode (`greedy`) or a sample; `greedy` traced, the two selected by it: one program then
    serves both evaluations."""
    if isinstance(greedy, bool):
        return dist.mode() if greedy else dist.sample(key)
    return jax.tree.map(lambda mode, sample: jnp.where(greedy, mode, sample), dist.mode(), dist.sample(key))


# An evaluation runs a few times a run, so on the CPU its compile is most of what it costs: LLVM's
# level 1 (XLA's default is 2) compiles it in fewer CPU seconds on the suites and CartPole, and
# runs it no slower (docs/benchmarks.md, "The evaluation at LLVM's level 1"). A continuous
# env's returns may differ from level 2's in the last bits; the params are not touched.
EVALUATION_CPU_OPTIONS = {"xla_backend_optimization_level": 1}


def jit_evaluation(fn: Callable, **jit_kwargs) -> Callable:
    """`jax.jit` for a program that runs a few times a run, an evaluation or a video's recording
    (the recording then takes the evaluation's first episode's steps): on the CPU with
    `EVALUATION_CPU_OPTIONS`."""
    if jax.default_backend() == "cpu":
        jit_kwargs = {"compiler_options": EVALUATION_CPU_OPTIONS, **jit_kwargs}
    return jax.jit(fn, **jit_kwargs)


class DeviceEvaluator:
    """`make_evaluator`'s function behind the evaluators' one interface: a JAX function, so a
    program around it is jitted (`stage`: `jit_evaluation`)."""

    def __init__(self, evaluate: Callable[..., EvalResult]):
        self._evaluate = evaluate

    def __call__(self, params: Any, obs_stats: RunningMeanStd, key: jax.Array, greedy: bool = True) -> EvalResult:
        return self._evaluate(params, obs_stats, key, greedy=greedy)

    @staticmethod
    def stage(fn: Callable, **jit_kwargs) -> Callable:
        return jit_evaluation(fn, **jit_kwargs)

    def close(self) -> None:
        pass


class HostEvaluator:
    """`evaluate(params, obs_stats, key, greedy=True) -> EvalResult` on host envs of its own:
    `num_episodes` envs, each until its first episode ends (or `max_steps`). It steps NumPy envs,
    so a program around it runs as plain Python (`stage`)."""

    @staticmethod
    def stage(fn: Callable, **jit_kwargs) -> Callable:
        return fn

    def __init__(self, rollout: Any, num_episodes: int, max_steps: int | None = None):
        """`rollout`: the `host.HostRollout` whose policy and env spec it evaluates."""
        self._r, self._n = rollout, num_episodes
        self._max_steps = max_steps or rollout.spec.max_episode_steps or 10_000
        self._envs: HostVecEnv | None = None
        # where its envs' threads are best beside it (`actor_core`): the core before the first
        # actor's, which goes on collecting while the learner's thread evaluates
        self.core = actor_core(rollout.spec, 1, 1)

    def __call__(self, params, obs_stats, key: jax.Array, greedy: bool = True) -> EvalResult:
        with on_core(self.core):  # its envs' threads, started at the first call, take the core too
            return self._evaluate(params, obs_stats, key, greedy)

    def _evaluate(self, params, obs_stats, key: jax.Array, greedy: bool) -> EvalResult:
        r, n = self._r, self._n
        if self._envs is None:
            self._envs = r.spec.make_vec(n)
        key, seed_key = jax.random.split(key)
        obs = self._envs.reset([int(s) for s in np.asarray(jax.random.randint(seed_key, (n,), 0, 2**31 - 1))])
        if r.normalize_obs:  # the run's statistics, frozen
            act = lambda p, o, c, rs, k: r.act_frozen(p, obs_stats, o, c, rs, k, greedy)  # noqa: E731
        else:
            act = r.act_greedy if greedy else r.act
        carry, reset = r.policy.initial_carry((n,)), np.ones((n,), bool)
        returns, lengths, done = np.zeros(n, np.float32), np.zeros(n, np.int32), np.zeros(n, bool)
        keys = np.asarray(jax.random.split(key, self._max_steps))
        for t in range(self._max_steps):
            action, carry = act(params, obs, carry, reset, keys[t])
            step = self._envs.step(np.asarray(action))
            returns += np.where(done, 0.0, step.reward)
            lengths += ~done
            reset = step.terminated | step.truncated
            done |= reset
            obs = step.obs
            if done.all():
                break
        return EvalResult(returns=returns, lengths=lengths, complete=done)

    def close(self) -> None:
        if self._envs is not None:
            self._envs.close()
