"""One collector protocol: what the loops ask of a rollout, whether its envs step on the device or the host.

    collector.init(key) -> RolloutState                          jittable, for every collector
    collector.collect(params, state) -> (state, Trajectory)      a device collector, inside a jit
    actor = collector.make_actor(placement, state, ...)          what the async mode's thread runs
    evaluator = collector.evaluator(num_episodes, unroll)        greedy / sampling returns
    record = collector.recorder(num_episodes, max_frames)       one greedy episode's states, for a video

Two collectors implement it: `device.DeviceRollout` (a gymnax-API env: one jitted `lax.scan`) and
`host.HostRollout` (gymnasium / EnvPool envs stepped on the host, acting with a jitted call).
Both record the same per-step fields (`types.RECORDED_FIELDS`) and end the fragment with the one
finishing step below, so the learner sees the same `Trajectory` from either.

The seed axis `S` leads every state and trajectory the loops hold, also for one seed
(`programs.over_seeds`).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp

from jaxrl_async.core.advantages import batched_gae, gae_inputs
from jaxrl_async.core.bootstrap import bootstrap_values
from jaxrl_async.core.programs import ProgramHook
from jaxrl_async.nets.actor_critic import Policy
from jaxrl_async.types import RolloutState, Trajectory


class Actor(Protocol):
    """What the async mode's rollout thread runs (`collector.make_actor`)."""

    trajectory: Any  # the abstract trajectory `collect` hands over, laid out (sharded) for the learner
    unpack: Callable  # inside the learner's jit: what `collect` hands over -> the `Trajectory`

    def collect(self, params, rollout_state) -> tuple[RolloutState, Any]: ...

    def timings(self) -> dict: ...  # the last fragment's `HOST_TIMING_FIELDS` split

    def to_learner(self, rollout_state) -> RolloutState: ...  # the state where the learner's lives

    def close(self) -> None: ...


class Collector(Protocol):
    """A rollout over `num_envs` envs and `num_steps` steps with `policy` (see the module's docstring)."""

    policy: Policy
    num_envs: int
    num_steps: int

    def init(self, key: jax.Array) -> RolloutState: ...

    def collect(self, params, state: RolloutState) -> tuple[RolloutState, Trajectory]: ...

    def make_actor(self, placement, state, *, device, num_seeds: int, seed: int, start: int,
                   num_actors: int, program: ProgramHook = None) -> Actor: ...

    def evaluator(self, num_episodes: int, unroll: int = 1): ...

    def recorder(self, num_episodes: int, max_frames: int): ...  # envs.render.CannotRender where it cannot


# the per-step timings every actor reports (0 where a part does not apply)
HOST_TIMING_FIELDS = ("env_s", "inference_s", "transfer_s")


def finish(policy: Policy, params, rec: dict, carry_after: Any, initial_carry: Any, *, gamma: float,
           gae_lambda: float, gae_scan: str, max_truncations: int,
           following: tuple[Any, Any] | None = None, reward_scale: float = 1.0, obs_stats: Any = ()) -> Trajectory:
    """The fragment's end, the same for every collector: the bootstrap values (`core.bootstrap`),
    GAE over them (`core.advantages`), and the `Trajectory`.

    Args:
      policy, params: the behaviour policy (its critic values the bootstraps).
      rec: the recorded fields (`types.RECORDED_FIELDS`), each `[T, B, ...]`.
      carry_after: the policy's carry after each step, leaves `[T, B, ...]` (() if feedforward).
      initial_carry: the carry at the fragment's start, leaves `[B, ...]`.
      max_truncations: truncations per env the bootstrap values (`bootstrap_values`).
      following: (obs, carry) where the fragment leaves off; needed below T truncations.
      reward_scale: the rewards' factor, before the learner sees them (the trajectory's `reward`
        is the scaled one; the episode statistics stay the env's own).
      obs_stats: `()`; or the statistics of a fragment that recorded its observations unnormalised
        (`Trajectory.obs_stats`): `policy` then values them normalised by these (`observing`).
    """
    if obs_stats != ():
        policy = observing(policy, obs_stats)
    if reward_scale != 1.0:  # a static factor: the default's program is the unscaled one
        rec = {**rec, "reward": rec["reward"] * jnp.float32(reward_scale)}
    bootstrap_value = bootstrap_values(lambda obs, carry: policy.value_step(params, obs, carry), rec,
                                       carry_after, max_truncations, following=following)
    discount_t, lambda_t = gae_inputs(rec["reward"], rec["terminated"], rec["truncated"], gamma, gae_lambda)
    advantage = batched_gae(rec["reward"], discount_t, rec["value"], bootstrap_value, lambda_t, scan=gae_scan)
    return Trajectory(**rec, bootstrap_value=bootstrap_value, advantage=advantage, target=advantage + rec["value"],
                      initial_carry=initial_carry, obs_stats=obs_stats)


def observing(policy: Policy, obs_stats: Any) -> Policy:
    """`policy` fed its observations normalised by `obs_stats` (`envs.normalize.RunningMeanStd`):
    for a fragment recorded unnormalised, which a replay learner's buffer stores as the env gave
    them (`Trajectory.obs_stats`), valued and replayed as the policy saw them."""
    return policy._replace(step=lambda params, obs, carry: policy.step(params, obs_stats.normalize(obs), carry),
                           value_step=lambda params, obs, carry: policy.value_step(params, obs_stats.normalize(obs),
                                                                                  carry),
                           unroll=lambda params, obs, *rest: policy.unroll(params, obs_stats.normalize(obs), *rest))
