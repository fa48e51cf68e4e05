"""v_t, the value of what follows each step of a fragment: the bootstrap that GAE and the
lambda-returns take beside the rewards.

    bootstrap_value = bootstrap_values(value_fn, rec, carry_after, max_truncations,
                                       following=(next_first_obs, next_first_carry))

Truncation is not termination: after a termination nothing follows (0); after a time limit
the episode would have gone on from its pre-reset observation (gymnax's `final_observation`),
so that observation is valued, not the next episode's first one.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp


def bootstrap_values(value_fn: Callable, rec: dict, carry_after: Any, max_truncations: int,
                     following: tuple[Any, Any] | None = None) -> jax.Array:
    """v_t, the value of what follows step t, `[T, B]`: 0 where the episode terminated at t, else
    V(next_obs_t), the pre-reset observation valued with the carry after the step.

    Where the episode went on, next_obs_t is obs_{t+1}, whose value the rollout already has
    (value_{t+1}; after the last step, the observation the next fragment starts from). So only a
    truncated step needs the critic, and an env is truncated at most `max_truncations` times in
    a fragment (`envs.wrappers.max_truncations`): one critic call values those `[k, B]` rows and
    the following observation's, not all `[T, B]`. With `max_truncations` >= T it values every
    step, and `following` is not needed.

    Args:
      value_fn: `(obs [N, B, ...], carry [N, B, ...]) -> [N, B]`, the behaviour critic.
      rec: the fragment's `next_obs`, `value`, `terminated` and `truncated`, time-major.
      carry_after: the policy's carry after each step, leaves `[T, B, ...]` (() if feedforward).
      following: (obs, carry), leaves `[B, ...]`: where the fragment leaves off (the next
        fragment's first observation, as the policy sees it, and the carry before any reset).
    """
    terminated, truncated = rec["terminated"], rec["truncated"]
    k = max_truncations
    if k >= terminated.shape[0]:
        return jnp.where(terminated, 0.0, value_fn(rec["next_obs"], carry_after))
    if k == 1:  # the common case (T <= the time limit): no counting
        steps, count = jnp.argmax(truncated, axis=0)[None], None
    else:
        count = jnp.cumsum(truncated, axis=0, dtype=jnp.int32)  # env b's truncations up to step t
        # the step of each env's j-th truncation (0 where it has fewer: that row's value is not used)
        steps = jnp.stack([jnp.argmax(truncated & (count == j + 1), axis=0) for j in range(k)])

    def rows(x, last):  # [T, B, ...] -> [k + 1, B, ...]: the truncated steps' rows, then `last`
        picked = jnp.take_along_axis(x, steps.reshape(steps.shape + (1,) * (x.ndim - 2)), axis=0)
        return jnp.concatenate([picked, last[None]])

    values = value_fn(*(jax.tree.map(rows, x, last) for x, last in zip((rec["next_obs"], carry_after), following)))
    next_step_value = jnp.concatenate([rec["value"][1:], values[k:]])
    truncated_value = values[0] if count is None else jnp.take_along_axis(values[:k], jnp.clip(count - 1, 0, k - 1),
                                                                          axis=0)
    return jnp.where(terminated, 0.0, jnp.where(truncated, truncated_value, next_step_value))
