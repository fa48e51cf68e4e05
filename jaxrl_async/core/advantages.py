"""Advantage and return estimators: GAE, lambda-returns, Q(lambda) returns and V-trace.

Every core function takes ONE trajectory of shape ``[T]`` (rlax style) and runs
its recursion as a ``lax.scan(..., reverse=True)``, or with ``scan="matrix"`` as one
[T, T] matrix product (the same values to float rounding; what a launch-bound GPU
wants, `speed.BACKEND_DEFAULTS`); ``batched_*`` wrappers vmap them over the env
axis of time-major ``[T, B]`` inputs.

Episode boundaries are carried by two per-step inputs, built in one place by
:func:`gae_inputs`:

* ``discount_t = gamma * (1 - terminated_t)`` -- a terminal state has value 0,
  so nothing after it is bootstrapped;
* ``lambda_t = lambda * (1 - truncated_t)`` -- a time limit is NOT terminal: the
  step still bootstraps from ``v_t`` (which the caller has set to
  ``V(info["final_observation"])``), but the recursion is cut so that the next
  episode's rewards and values never leak into this one.

Time alignment: ``v_tm1[t] = V(s_t)`` (state acted in), ``v_t[t]`` = value of
the state reached by acting at ``t`` (the bootstrap value).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

Array = chex.Array
Numeric = chex.Numeric


class VTraceOutput(NamedTuple):
    """V-trace targets for one trajectory (or ``[T, B]`` when batched).

    Attributes:
      vs: [T] value targets ``v_s`` for the critic.
      pg_advantage: [T] advantages for the policy gradient.
    """

    vs: Array
    pg_advantage: Array


def _check_trajectory(arrays: list[Array], lambda_t: Numeric) -> Array:
    """Asserts [T] float inputs; returns ``lambda_t`` broadcast to [T]."""
    chex.assert_rank(arrays, 1)
    chex.assert_type(arrays, float)
    chex.assert_equal_shape(arrays)
    chex.assert_rank(lambda_t, {0, 1})
    lambda_t = jnp.asarray(lambda_t, dtype=arrays[0].dtype)
    if lambda_t.ndim == 1:
        chex.assert_equal_shape([arrays[0], lambda_t])
    return jnp.broadcast_to(lambda_t, arrays[0].shape)


SCANS = ("sequential", "matrix")


def _decay_matrix(decay_t: Array) -> Array:
    """``M[t, s] = prod_{t <= k < s} decay_k`` for ``s >= t`` (1 on the diagonal), else 0; [T, T].

    From cumulative sums of ``log decay``; a zero decay (a termination) is counted apart so
    that products across it are exactly 0 rather than ``exp(-inf - -inf)``. The masked entries
    (s < t, or across a zero) are masked before the exponential: their differences of sums
    overflow it, and ``where``'s gradient would then be ``0 * inf``, a NaN."""
    zero = decay_t == 0
    log_decay = jnp.log(jnp.where(zero, 1.0, decay_t))
    log_before = jnp.cumsum(log_decay) - log_decay  # sum over k < i
    zeros_before = jnp.cumsum(zero.astype(jnp.int32)) - zero.astype(jnp.int32)
    index = jnp.arange(decay_t.shape[0])
    unbroken = (index[:, None] <= index[None, :]) & (zeros_before[:, None] == zeros_before[None, :])
    return jnp.exp(jnp.where(unbroken, log_before[None, :] - log_before[:, None], -jnp.inf))


def _reverse_discounted_sum(
    delta_t: Array, decay_t: Array, initial: Array, scan: str = "sequential"
) -> Array:
    """``acc_t = delta_t + decay_t * acc_{t+1}``, ``acc_T = initial``.

    ``scan="sequential"``: a reverse ``lax.scan``, T dependent steps. ``"matrix"``: the
    unrolled sum ``acc_t = sum_{s >= t} (prod_{t <= k < s} decay_k) delta_s`` as one
    [T, T+1] matrix-vector product (a dozen kernels instead of a few per step: what a
    launch-bound GPU wants; O(T^2) memory, so for short fragments). Equal to float rounding
    where the decays' running log-sum stays small, as GAE's constant ones keep it (within 1e-4
    at T=2048, gamma*lambda 0.99). Each entry is a difference of two running sums, so where the
    sum grows large (V-trace's c = lambda*min(1, rho) at rho 1e-6 over T=128) it loses digits:
    about 1e-4 relative to the targets there.
    """
    if scan == "matrix":
        # the initial value is one more delta, reached through every decay
        deltas = jnp.concatenate([delta_t, jnp.reshape(initial, (1,)).astype(delta_t.dtype)])
        decays = jnp.concatenate([decay_t, jnp.ones((1,), decay_t.dtype)])
        return jnp.matmul(_decay_matrix(decays)[:-1], deltas, precision=lax.Precision.HIGHEST)
    if scan != "sequential":
        raise ValueError(f"scan={scan!r}: choose one of {SCANS}")

    def _body(acc, xs):
        delta, decay = xs
        acc = delta + decay * acc
        return acc, acc

    _, acc_t = lax.scan(_body, initial, (delta_t, decay_t), reverse=True)
    return acc_t


def gae_inputs(
    reward: Array,
    terminated: Array,
    truncated: Array,
    gamma: Numeric,
    gae_lambda: Numeric,
) -> tuple[Array, Array]:
    """Per-step ``(discount_t, lambda_t)`` from the episode-end flags.

    ``discount_t = gamma * (1 - terminated_t)`` and
    ``lambda_t = gae_lambda * (1 - truncated_t)``: the one place where the
    terminated/truncated rule lives (see the module docstring and :func:`gae`).

    Args:
      reward: [T] or [T, B] float, only used for shape and dtype.
      terminated: same shape as ``reward``, bool or {0, 1}; the episode ended in
        a terminal state at step t.
      truncated: same shape, bool or {0, 1}; the episode was cut by a time limit
        at step t (and was not terminated).
      gamma: scalar discount factor.
      gae_lambda: scalar GAE / trace lambda.

    Returns:
      ``(discount_t, lambda_t)``, both with the shape and dtype of ``reward``.
    """
    chex.assert_type(reward, float)
    chex.assert_equal_shape([reward, terminated, truncated])
    dtype = reward.dtype
    not_terminated = 1.0 - jnp.asarray(terminated).astype(dtype)
    not_truncated = 1.0 - jnp.asarray(truncated).astype(dtype)
    discount_t = jnp.asarray(gamma, dtype) * not_terminated
    lambda_t = jnp.asarray(gae_lambda, dtype) * not_truncated
    return discount_t, lambda_t


def gae(
    r_t: Array,
    discount_t: Array,
    v_tm1: Array,
    v_t: Array,
    lambda_t: Numeric,
    scan: str = "sequential",
) -> Array:
    """Generalized advantage estimation on one trajectory (Schulman et al., 2016).

    ``delta_t = r_t + discount_t * v_t - v_tm1``
    ``A_t = delta_t + discount_t * lambda_t * A_{t+1}``, with ``A_T = 0``.

    Episode boundaries inside the fragment (the trainer passes
    ``discount_t, lambda_t = gae_inputs(...)``):

    * termination at t: ``discount_t = 0`` so ``A_t = r_t - v_tm1_t``; neither
      ``v_t`` nor anything after t enters.
    * truncation at t (time limit): ``lambda_t = 0`` so
      ``A_t = r_t + gamma * V(final_obs) - v_tm1_t``. The time limit is not part of
      the MDP, so the step still bootstraps (Pardo et al., 2018, "Time Limits in
      Reinforcement Learning"), but the next episode (whose first state is the
      reset observation) is never added in.
    * fragment end: ``A_{T-1} = delta_{T-1}``, bootstrapping from ``v_t[T-1]``.

    Args:
      r_t: [T] float, reward after acting at t.
      discount_t: [T] float, ``gamma * (1 - terminated_t)``.
      v_tm1: [T] float, ``V(s_t)``, value of the state acted in.
      v_t: [T] float, bootstrap value of the next state (``V(final_obs)`` at a
        truncation, anything at a termination).
      lambda_t: scalar or [T] float, ``lambda * (1 - truncated_t)``.
      scan: "sequential" (a reverse scan) or "matrix" (one matrix product for the whole
        recursion; equal to float rounding).

    Returns:
      [T] advantages ``A_t``, dtype of ``r_t``.
    """
    lambda_t = _check_trajectory([r_t, discount_t, v_tm1, v_t], lambda_t)
    delta_t = r_t + discount_t * v_t - v_tm1
    return _reverse_discounted_sum(
        delta_t, discount_t * lambda_t, jnp.zeros((), r_t.dtype), scan
    )


def lambda_returns(
    r_t: Array,
    discount_t: Array,
    v_t: Array,
    lambda_t: Numeric,
    scan: str = "sequential",
) -> Array:
    """Lambda-returns on one trajectory (Sutton & Barto 2018, sec. 12.1; rlax naming).

    ``G_t = r_t + discount_t * ((1 - lambda_t) * v_t + lambda_t * G_{t+1})``,
    with ``G_T = v_t[T-1]``, so ``G_{T-1} = r_{T-1} + discount_{T-1} v_t[T-1]``.

    ``lambda_t = 1 - truncated_t`` gives Monte-Carlo returns that stop at
    terminations (``discount_t = 0``) and bootstrap at truncations and at the
    fragment end. Identity: ``lambda_returns(r, d, v_t, l) == gae(r, d, v_tm1,
    v_t, l) + v_tm1`` whenever the values are consistent, i.e.
    ``v_t[t] == v_tm1[t+1]`` wherever ``discount_t * lambda_t != 0``.

    Args:
      r_t: [T] float, reward after acting at t.
      discount_t: [T] float, ``gamma * (1 - terminated_t)``.
      v_t: [T] float, bootstrap value of the next state.
      lambda_t: scalar or [T] float, ``lambda * (1 - truncated_t)``.
      scan: the recursion's form, "sequential" or "matrix" (speed only).

    Returns:
      [T] lambda-returns ``G_t``.
    """
    lambda_t = _check_trajectory([r_t, discount_t, v_t], lambda_t)
    # G_t = [r_t + discount_t (1 - lambda_t) v_t] + [discount_t lambda_t] G_{t+1}
    delta_t = r_t + discount_t * (1.0 - lambda_t) * v_t
    return _reverse_discounted_sum(delta_t, discount_t * lambda_t, v_t[-1], scan)


def q_lambda_returns(
    r_t: Array,
    discount_t: Array,
    q_t: Array,
    lambda_t: Numeric,
    scan: str = "sequential",
) -> Array:
    """Peng's Q(lambda) returns on one trajectory (Peng & Williams 1996; Sutton & Barto 2018,
    sec. 12.10), the targets PQN regresses Q(s_t, a_t) on (Gallici et al. 2025, "Simplifying
    Deep Temporal Difference Learning", eq. 7).

    ``G_t = r_t + discount_t * ((1 - lambda_t) * max_a q_t[t, a] + lambda_t * G_{t+1})``,
    with ``G_T = max_a q_t[T-1, a]``: the lambda-returns of the greedy values
    (:func:`lambda_returns` with ``v_t = max_a q_t``). The trace is not cut at exploratory
    actions (Peng's, not Watkins'), as PQN does.

    Episode boundaries as in :func:`gae` (``discount_t, lambda_t = gae_inputs(...)``): a
    termination at t (``discount_t = 0``) gives ``G_t = r_t``; a time limit at t
    (``lambda_t = 0``) gives ``G_t = r_t + gamma * max_a Q(final_obs, a)``, the next
    episode never added in.

    Args:
      r_t: [T] float, reward after acting at t.
      discount_t: [T] float, ``gamma * (1 - terminated_t)``.
      q_t: [T, A] float, Q-values of the state reached by acting at t (the pre-reset
        observation at a truncation; anything at a termination).
      lambda_t: scalar or [T] float, ``lambda * (1 - truncated_t)``.
      scan: the recursion's form, "sequential" or "matrix" (speed only).

    Returns:
      [T] Q(lambda) returns ``G_t``.
    """
    chex.assert_rank(q_t, 2)
    chex.assert_equal_shape_prefix([r_t, q_t], 1)
    return lambda_returns(r_t, discount_t, jnp.max(q_t, axis=-1), lambda_t, scan)


def vtrace(
    v_tm1: Array,
    v_t: Array,
    r_t: Array,
    discount_t: Array,
    rho_tm1: Array,
    lambda_: Numeric = 1.0,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    stop_target_gradients: bool = True,
    scan: str = "sequential",
) -> VTraceOutput:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018, IMPALA).

    With ``rho_t = pi(a_t|s_t) / mu(a_t|s_t)`` (a ratio, not a log-ratio):

    ``clipped_rho_t = min(clip_rho_threshold, rho_t)``,
    ``c_t = lambda_t * min(1, rho_t)``,
    ``delta_t = clipped_rho_t * (r_t + discount_t * v_t - v_tm1_t)``,
    ``vs_t = v_tm1_t + A_t`` where ``A_t = delta_t + discount_t * c_t * A_{t+1}``,
    ``A_T = 0`` (the paper's eq. 1, written recursively; ``vs_T := v_t[T-1]``).

    Policy-gradient target, with the next-state target blended by lambda:

    ``vs_next_t = lambda_t * vs_{t+1} + (1 - lambda_t) * v_t``, (``vs_T := v_t[T-1]``)
    ``pg_advantage_t = min(clip_pg_rho_threshold, rho_t) * (r_t + discount_t * vs_next_t - v_tm1_t)``.

    So with ``lambda_t = 1`` it is the paper's ``r_t + gamma v_{s+1} - V(x_s)``;
    for fractional lambda it is rlax's lambda-blended target; at a truncation
    (``lambda_t = 0``) the target is the bootstrap ``v_t = V(final_obs)`` and the
    next episode's ``vs`` is never used. Terminations act through
    ``discount_t = 0``. With all ``rho = 1`` (thresholds >= 1, or None),
    ``vs == lambda_returns`` and ``pg_advantage == gae`` for the same inputs.

    Args:
      v_tm1: [T] float, ``V(s_t)`` under the current value function.
      v_t: [T] float, bootstrap value of the next state (``V(final_obs)`` at a
        truncation).
      r_t: [T] float, reward after acting at t.
      discount_t: [T] float, ``gamma * (1 - terminated_t)``.
      rho_tm1: [T] float, importance ratios ``pi / mu`` of the taken actions.
      lambda_: scalar or [T] float, ``lambda * (1 - truncated_t)``.
      clip_rho_threshold: rho-bar for the value targets; None for no clipping.
      clip_pg_rho_threshold: clip for the policy-gradient ratio; None for none.
      stop_target_gradients: stop gradients through ``vs`` and ``pg_advantage``
        (both are targets in the IMPALA losses).
      scan: the recursion's form, "sequential" or "matrix" (speed only).

    Returns:
      ``VTraceOutput(vs, pg_advantage)``, each [T].
    """
    lambda_t = _check_trajectory([v_tm1, v_t, r_t, discount_t, rho_tm1], lambda_)

    def _clip(threshold):
        if threshold is None:
            return rho_tm1
        return jnp.minimum(jnp.asarray(threshold, rho_tm1.dtype), rho_tm1)

    clipped_rho_t = _clip(clip_rho_threshold)
    clipped_pg_rho_t = _clip(clip_pg_rho_threshold)
    c_t = lambda_t * jnp.minimum(1.0, rho_tm1)

    delta_t = clipped_rho_t * (r_t + discount_t * v_t - v_tm1)
    vs_minus_v = _reverse_discounted_sum(
        delta_t, discount_t * c_t, jnp.zeros((), r_t.dtype), scan
    )
    vs = v_tm1 + vs_minus_v

    vs_tp1 = jnp.concatenate([vs[1:], v_t[-1:]])
    # at a truncation lambda_t = 0: bootstrap from V(final_obs), not the next episode
    vs_next = lambda_t * vs_tp1 + (1.0 - lambda_t) * v_t
    pg_advantage = clipped_pg_rho_t * (r_t + discount_t * vs_next - v_tm1)

    if stop_target_gradients:
        vs = lax.stop_gradient(vs)
        pg_advantage = lax.stop_gradient(pg_advantage)
    return VTraceOutput(vs=vs, pg_advantage=pg_advantage)


def _lambda_axis(lambda_t: Numeric) -> int | None:
    """vmap axis for a lambda that is either a scalar or [T, B]."""
    chex.assert_rank(lambda_t, {0, 2})
    return None if jnp.ndim(lambda_t) == 0 else 1


def batched_gae(
    r_t: Array,
    discount_t: Array,
    v_tm1: Array,
    v_t: Array,
    lambda_t: Numeric,
    scan: str = "sequential",
) -> Array:
    """:func:`gae` over time-major [T, B] inputs; ``lambda_t`` scalar or [T, B].

    Returns:
      [T, B] advantages.
    """
    chex.assert_rank([r_t, discount_t, v_tm1, v_t], 2)
    in_axes = (1, 1, 1, 1, _lambda_axis(lambda_t))
    return jax.vmap(functools.partial(gae, scan=scan), in_axes=in_axes, out_axes=1)(
        r_t, discount_t, v_tm1, v_t, lambda_t
    )


def batched_lambda_returns(
    r_t: Array,
    discount_t: Array,
    v_t: Array,
    lambda_t: Numeric,
    scan: str = "sequential",
) -> Array:
    """:func:`lambda_returns` over time-major [T, B] inputs; returns [T, B]."""
    chex.assert_rank([r_t, discount_t, v_t], 2)
    in_axes = (1, 1, 1, _lambda_axis(lambda_t))
    return jax.vmap(functools.partial(lambda_returns, scan=scan), in_axes=in_axes, out_axes=1)(
        r_t, discount_t, v_t, lambda_t
    )


def batched_q_lambda_returns(
    r_t: Array,
    discount_t: Array,
    q_t: Array,
    lambda_t: Numeric,
    scan: str = "sequential",
) -> Array:
    """:func:`q_lambda_returns` over time-major inputs: ``q_t`` [T, B, A], the rest [T, B]
    (``lambda_t`` scalar or [T, B]); returns [T, B]."""
    chex.assert_rank([r_t, discount_t, q_t], [2, 2, 3])
    in_axes = (1, 1, 1, _lambda_axis(lambda_t))
    return jax.vmap(functools.partial(q_lambda_returns, scan=scan), in_axes=in_axes, out_axes=1)(
        r_t, discount_t, q_t, lambda_t)


def batched_vtrace(
    v_tm1: Array,
    v_t: Array,
    r_t: Array,
    discount_t: Array,
    rho_tm1: Array,
    lambda_: Numeric = 1.0,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    stop_target_gradients: bool = True,
    scan: str = "sequential",
) -> VTraceOutput:
    """:func:`vtrace` over time-major [T, B] inputs; ``lambda_`` scalar or [T, B].

    Returns:
      ``VTraceOutput(vs, pg_advantage)``, each [T, B].
    """
    chex.assert_rank([v_tm1, v_t, r_t, discount_t, rho_tm1], 2)

    def _one(v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_):
        return vtrace(
            v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_,
            clip_rho_threshold, clip_pg_rho_threshold, stop_target_gradients, scan,
        )

    in_axes = (1, 1, 1, 1, 1, _lambda_axis(lambda_))
    return jax.vmap(_one, in_axes=in_axes, out_axes=1)(
        v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_
    )
