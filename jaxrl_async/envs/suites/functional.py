"""`SuiteEnv`: the gymnax 1.x protocol over an env that steps without resetting itself.

A suite's adapter subclasses it and writes two methods over the suite's own env, both for one
env (the rollout vmaps them):

    reset_env(key, params) -> (obs, inner_state)
    step_env(key, inner_state, action, params) -> (obs, inner_state, reward, terminated, truncated)

where `step_env` never resets, `terminated` is the task's end (no bootstrap past it) and
`truncated` an end the suite imposes by time alone (bootstrap from the final observation).
`SuiteEnv` adds what the rollout relies on and the suites do differently or not at all:

- a time limit (`max_steps_in_episode`) for suites without one of their own (Brax, Playground),
  counted in `SuiteState.time`;
- termination over truncation: a step that is both is a termination (no bootstrap);
- auto-reset inside `step`, the next episode drawn from a fresh key (as gymnax's step does), and
  `info["final_observation"]`, the observation before the reset, for the truncation bootstrap;
  under `vmap` only the envs whose episode ended run their reset (`autoreset.reset_where`: a
  suite's reset may cost tens of steps); or, with `auto_reset="cached"`, restarted from the
  state the env's own first reset drew (what Brax's and Playground's training wrappers do; the
  random stream a step draws from goes on, `restart_state`): no
  reset at all inside `step`, which pays where episodes end somewhere in the batch at nearly every
  step (thousands of envs on a GPU, where `reset_where` resets the whole batch at once). Each env
  then repeats one start; evaluation (a fresh `reset` per episode) is unchanged;
- float32 rewards and bool flags, whatever dtypes the suite returns.
"""

from __future__ import annotations

import abc
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.envs.suites.autoreset import reset_where, restart_where


@struct.dataclass
class SuiteParams:
    """An adapted env's params: its time limit (0: only the suite's own), a static setting."""

    max_steps_in_episode: int = struct.field(pytree_node=False, default=0)


@struct.dataclass
class SuiteState:
    inner: Any  # the suite's own state
    time: jax.Array  # [] int32, steps into the episode
    first: Any = None  # auto_reset="cached": (obs, inner) of the env's first reset, where episodes restart


class SuiteEnv(abc.ABC):
    """Base of the suites' adapters: see the module docstring. An adapter that lacks one of the
    four abstract methods cannot be made (Python's TypeError names it)."""

    name: str = "SuiteEnv"
    AUTO_RESETS = ("full", "cached")
    # True where a step from a state whose episode ended is an ordinary step (a grid or tile world:
    # the same work, finite values); the evaluation then lets such an env step on, its steps
    # masked, instead of restarting it from its first state (`rollout/evaluate.py`), whose select
    # over the whole state costs compile time. False (this default) for physics: past a fall the
    # state may diverge, and a solver's while loop, batched, then runs every env to its cap.
    steps_on_past_end: bool = False

    def __init__(self, max_steps_in_episode: int = 0, auto_reset: str = "full"):
        if int(max_steps_in_episode) < 0:
            raise ValueError(f"max_steps_in_episode={max_steps_in_episode} must be >= 0 (0: no time limit of ours)")
        if auto_reset not in self.AUTO_RESETS:
            raise ValueError(f"auto_reset={auto_reset!r} must be 'full' (a fresh reset for every episode) or "
                             "'cached' (each env restarts from its first reset's state, as Brax's trainer does)")
        self._params = SuiteParams(int(max_steps_in_episode))
        self.auto_reset = auto_reset

    @property
    def default_params(self) -> SuiteParams:
        return self._params

    @abc.abstractmethod
    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[Any, Any]:
        """One env's reset: (obs, the suite's own state)."""

    @abc.abstractmethod
    def step_env(self, key: jax.Array, inner: Any, action: Any, params: SuiteParams) -> tuple:
        """One env's step, never resetting: (obs, inner, reward, terminated, truncated)."""

    @abc.abstractmethod
    def action_space(self, params: Any = None) -> Any:
        """The action space, as gymnax's spaces."""

    def own_truncation_interval(self) -> float | None:
        """The fewest steps between two of the suite's own truncations of one env (its clock
        restarting at each reset); `math.inf` where `step_env` never truncates; None (this
        default) where any step may be one."""
        return None

    def truncation_interval(self, params: SuiteParams | None = None) -> float | None:
        """The fewest steps between two truncations of one env, or None where any step may be
        one. The suite's clock and ours (`max_steps_in_episode`) both restart at every episode's
        end, so two truncations are at least the shorter of the two limits apart. The rollout then
        values only as many truncated steps per env as that spacing allows in a fragment
        (`envs.wrappers.max_truncations`, `core.bootstrap`), not every step."""
        own = self.own_truncation_interval()
        limit = (self._params if params is None else params).max_steps_in_episode
        return None if own is None else min(own, limit or math.inf)

    @abc.abstractmethod
    def observation_space(self, params: Any = None) -> Any:
        """The observation space, as gymnax's spaces."""

    def renderer(self) -> Any:
        """How the suite's own renderer draws this env's states (`envs.render.Renderer`, its
        `select` taking the suite's state, `inner`), for the evaluation videos; None (this default)
        where the suite has none here."""
        return None

    # The suite's own reset and step, each traced once per env and context, then reused from
    # JAX's cache (jit keeps a function's jaxpr per argument types): the loop's auto-reset holds
    # the reset twice (a lax.cond for one env, the batched rows) and the initial states and the
    # evaluation hold it again, where tracing a physics engine's reset takes seconds. `inline`
    # puts the jaxpr in place of the call, so the programs are the ones tracing the suite's Python
    # each time gave (the same params to the bit), and compile as fast.
    @functools.cached_property
    def _reset_env(self):
        return jax.jit(self.reset_env, inline=True)

    @functools.cached_property
    def _step_env(self):
        return jax.jit(self.step_env, inline=True)

    def restart_state(self, first: Any, stepped: Any) -> Any:
        """`auto_reset="cached"`: the inner state an env restarts from when its episode ended, from
        the first reset's (`first`) and the step's (`stepped`); the first reset's, unless a suite
        carries something over (`brax_api.BraxApiEnv`: its random stream)."""
        return first

    def reset(self, key: jax.Array, params: SuiteParams | None = None) -> tuple[Any, SuiteState]:
        obs, inner = self._reset_env(key, self._params if params is None else params)
        first = (obs, inner) if self.auto_reset == "cached" else None
        return obs, SuiteState(inner, jnp.zeros((), jnp.int32), first)

    def step(self, key: jax.Array, state: SuiteState, action: Any, params: SuiteParams | None = None) -> tuple:
        params = self._params if params is None else params
        key_step, key_reset = jax.random.split(key)
        obs, inner, reward, terminated, truncated = self._step_env(key_step, state.inner, action, params)
        time = state.time + 1
        terminated = jnp.asarray(terminated).astype(jnp.bool_)
        truncated = jnp.asarray(truncated).astype(jnp.bool_)
        if params.max_steps_in_episode:
            truncated = truncated | (time >= params.max_steps_in_episode)
        truncated = truncated & ~terminated
        done = terminated | truncated
        if self.auto_reset == "cached":
            restart = (state.first[0], self.restart_state(state.first[1], inner))
            next_obs, next_inner = restart_where(done, restart, (obs, inner))
        else:
            next_obs, next_inner = reset_where(done, key_reset, (obs, inner),
                                               lambda key: self._reset_env(key, params))
        state = SuiteState(next_inner, jnp.where(done, 0, time).astype(jnp.int32), state.first)
        info = {"terminated": terminated, "truncated": truncated, "final_observation": obs}
        return next_obs, state, jnp.asarray(reward, jnp.float32), terminated, truncated, info
