"""Tests for jaxrl_async.core.advantages: GAE, lambda-returns, V-trace.

References are plain NumPy loops written in terms of episodes (flags, explicit
segment splitting), not in terms of the (discount_t, lambda_t) trick the
implementation uses, so the two can disagree if the trick is wrong.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrl_async.core import advantages as adv

GAMMA = 0.9
ATOL = 1e-5
RTOL = 1e-5


# ----------------------------------------------------------------- helpers


def _maybe_jit(fn, jit, **static):
    if static:
        fn_static = fn

        def fn(*args):
            return fn_static(*args, **static)

    return jax.jit(fn) if jit else fn


def random_fragment(seed, length=20, p_term=0.1, p_trunc=0.1):
    """A random [T] fragment with consistent values.

    ``v_tm1[t] = V(s_t)``, ``v_t[t] = V(s_{t+1}) = v_tm1[t+1]`` inside an
    episode; at a truncation ``v_t[t]`` is V(final_obs), unrelated to the reset
    state's value ``v_tm1[t+1]``; at a termination ``v_t[t]`` is junk (must be
    ignored).
    """
    rng = np.random.default_rng(seed)
    values = rng.normal(size=length + 1).astype(np.float32)
    v_tm1 = values[:-1]
    v_t = values[1:].copy()
    reward = rng.normal(size=length).astype(np.float32)
    flag = rng.uniform(size=length)
    terminated = flag < p_term
    truncated = (flag >= p_term) & (flag < p_term + p_trunc)
    episode_end = terminated | truncated
    # bootstrap values at truncations, junk at terminations
    v_t[episode_end] = rng.normal(size=episode_end.sum()).astype(np.float32) * 5
    rho = np.exp(rng.normal(size=length) * 0.7).astype(np.float32)
    return dict(
        reward=reward, terminated=terminated, truncated=truncated,
        v_tm1=v_tm1, v_t=v_t, rho=rho,
    )


def np_gae_from_flags(reward, terminated, truncated, v_tm1, v_t, gamma, lam):
    """GAE per episode, written with if-statements on the flags."""
    length = len(reward)
    advantages = np.zeros(length, np.float64)
    next_advantage = 0.0
    for t in reversed(range(length)):
        episode_ends_here = terminated[t] or truncated[t] or t == length - 1
        if episode_ends_here:
            next_advantage = 0.0
        next_value = 0.0 if terminated[t] else v_t[t]
        delta = reward[t] + gamma * next_value - v_tm1[t]
        advantages[t] = delta + gamma * lam * next_advantage
        next_advantage = advantages[t]
    return advantages


def np_gae_literal(r_t, discount_t, v_tm1, v_t, lambda_t):
    """The brief's recursion, element by element, any discount/lambda arrays."""
    length = len(r_t)
    lambda_t = np.broadcast_to(lambda_t, (length,))
    advantages = np.zeros(length, np.float64)
    a_next = 0.0
    for t in reversed(range(length)):
        delta = r_t[t] + discount_t[t] * v_t[t] - v_tm1[t]
        a_next = delta + discount_t[t] * lambda_t[t] * a_next
        advantages[t] = a_next
    return advantages


def np_lambda_returns(r_t, discount_t, v_t, lambda_t):
    length = len(r_t)
    lambda_t = np.broadcast_to(lambda_t, (length,))
    returns = np.zeros(length, np.float64)
    g_next = v_t[-1]
    for t in reversed(range(length)):
        g_next = r_t[t] + discount_t[t] * (
            (1 - lambda_t[t]) * v_t[t] + lambda_t[t] * g_next
        )
        returns[t] = g_next
    return returns


def np_vtrace_paper(
    reward, terminated, truncated, v_tm1, v_t, rho, gamma, lam,
    clip_rho, clip_pg_rho,
):
    """IMPALA eq. 1 as an explicit double sum over each episode segment.

    vs_s = V(x_s) + sum_{t=s}^{end} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V,
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t)), c_i = lam min(1, rho_i).
    A segment ends at a termination (V(x_{end+1}) = 0), a truncation
    (V(x_{end+1}) = V(final_obs) = v_t[end]) or the fragment end (v_t[end]).
    pg_s = rho_pg_s (r_s + gamma q_{s+1} - V(x_s)),
    q_{s+1} = lam vs_{s+1} + (1 - lam) V(x_{s+1}) inside a segment, V(x_{end+1}) at its end.
    """
    length = len(reward)
    clipped_rho = rho if clip_rho is None else np.minimum(clip_rho, rho)
    clipped_pg_rho = rho if clip_pg_rho is None else np.minimum(clip_pg_rho, rho)
    c = lam * np.minimum(1.0, rho)

    segment_end = np.zeros(length, int)
    end = length - 1
    for t in reversed(range(length)):
        if terminated[t] or truncated[t]:
            end = t
        segment_end[t] = end

    def next_state_value(t):
        if t == segment_end[t]:
            return 0.0 if terminated[t] else v_t[t]
        return v_tm1[t + 1]

    delta = np.array([
        clipped_rho[t] * (reward[t] + gamma * next_state_value(t) - v_tm1[t])
        for t in range(length)
    ])
    vs = np.zeros(length, np.float64)
    for s in range(length):
        total = float(v_tm1[s])
        for t in range(s, segment_end[s] + 1):
            coefficient = gamma ** (t - s) * np.prod(c[s:t])
            total += coefficient * delta[t]
        vs[s] = total

    pg = np.zeros(length, np.float64)
    for s in range(length):
        if s == segment_end[s]:
            q_next = next_state_value(s)
        else:
            q_next = lam * vs[s + 1] + (1 - lam) * v_tm1[s + 1]
        pg[s] = clipped_pg_rho[s] * (reward[s] + gamma * q_next - v_tm1[s])
    return vs, pg


def _f32(*arrays):
    return [jnp.asarray(a, jnp.float32) for a in arrays]


# ----------------------------------------------------------------- gae_inputs


def test_gae_inputs_rule():
    reward = jnp.zeros(4, jnp.float32)
    terminated = jnp.array([False, True, False, False])
    truncated = jnp.array([False, False, True, False])
    discount_t, lambda_t = adv.gae_inputs(reward, terminated, truncated, 0.99, 0.95)
    np.testing.assert_allclose(discount_t, [0.99, 0.0, 0.99, 0.99])
    np.testing.assert_allclose(lambda_t, [0.95, 0.95, 0.0, 0.95])
    assert discount_t.dtype == lambda_t.dtype == jnp.float32


def test_gae_inputs_batched_shape():
    reward = jnp.zeros((5, 3), jnp.float32)
    flags = jnp.zeros((5, 3), bool).at[2, 1].set(True)
    discount_t, lambda_t = adv.gae_inputs(reward, flags, ~flags, 0.9, 0.5)
    chex.assert_shape([discount_t, lambda_t], (5, 3))
    assert discount_t[2, 1] == 0.0 and lambda_t[2, 1] == 0.5
    assert lambda_t[0, 0] == 0.0 and discount_t[0, 0] == pytest.approx(0.9)


# ----------------------------------------------------------------- GAE, by hand

# 3 steps, gamma = 0.9, lambda = 0.5, r = [1, 2, 3],
# V(s_0..s_3) = [0.5, 1.0, 1.5, 2.0].
R = [1.0, 2.0, 3.0]
V_TM1 = [0.5, 1.0, 1.5]
V_T = [1.0, 1.5, 2.0]


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("scan", adv.SCANS)
def test_gae_hand_computed_no_boundary(scan, jit):
    # delta = [1 + .9*1 - .5, 2 + .9*1.5 - 1, 3 + .9*2 - 1.5] = [1.4, 2.35, 3.3]
    # A_2 = 3.3; A_1 = 2.35 + .45*3.3 = 3.835; A_0 = 1.4 + .45*3.835 = 3.12575
    discount_t, lambda_t = adv.gae_inputs(
        jnp.zeros(3, jnp.float32), jnp.zeros(3, bool), jnp.zeros(3, bool),
        GAMMA, 0.5,
    )
    out = _maybe_jit(adv.gae, jit, scan=scan)(*_f32(R, discount_t, V_TM1, V_T), lambda_t)
    np.testing.assert_allclose(out, [3.12575, 3.835, 3.3], rtol=RTOL)
    assert out.dtype == jnp.float32


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("scan", adv.SCANS)
def test_gae_hand_computed_truncation(scan, jit):
    # Time limit at t=1: V(final_obs) = 4.0 is the bootstrap; V(s_2) = 1.5 is
    # the reset state of the next episode and must not enter A_1.
    # delta_1 = 2 + .9*4 - 1 = 4.6, A_1 = 4.6 (lambda_1 = 0); A_2 = 3.3
    # A_0 = 1.4 + .45*4.6 = 3.47
    truncated = jnp.array([False, True, False])
    discount_t, lambda_t = adv.gae_inputs(
        jnp.zeros(3, jnp.float32), jnp.zeros(3, bool), truncated, GAMMA, 0.5
    )
    v_t = [1.0, 4.0, 2.0]
    out = _maybe_jit(adv.gae, jit, scan=scan)(*_f32(R, discount_t, V_TM1, v_t), lambda_t)
    np.testing.assert_allclose(out, [3.47, 4.6, 3.3], rtol=RTOL)


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("scan", adv.SCANS)
def test_gae_hand_computed_termination(scan, jit):
    # Terminal at t=1: delta_1 = 2 + 0 - 1 = 1.0 (v_t[1] = 99 ignored), A_1 = 1.0
    # A_0 = 1.4 + .45*1.0 = 1.85; A_2 = 3.3
    terminated = jnp.array([False, True, False])
    discount_t, lambda_t = adv.gae_inputs(
        jnp.zeros(3, jnp.float32), terminated, jnp.zeros(3, bool), GAMMA, 0.5
    )
    v_t = [1.0, 99.0, 2.0]
    out = _maybe_jit(adv.gae, jit, scan=scan)(*_f32(R, discount_t, V_TM1, v_t), lambda_t)
    np.testing.assert_allclose(out, [1.85, 1.0, 3.3], rtol=RTOL)


# ----------------------------------------------------------------- GAE vs NumPy


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("lam", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("scan", adv.SCANS)
def test_gae_matches_numpy_per_episode(scan, seed, lam, jit):
    frag = random_fragment(seed, length=30)
    discount_t, lambda_t = adv.gae_inputs(
        jnp.asarray(frag["reward"]), frag["terminated"], frag["truncated"], GAMMA, lam
    )
    out = _maybe_jit(adv.gae, jit, scan=scan)(
        *_f32(frag["reward"], discount_t, frag["v_tm1"], frag["v_t"]), lambda_t
    )
    expected = np_gae_from_flags(
        frag["reward"], frag["terminated"], frag["truncated"],
        frag["v_tm1"], frag["v_t"], GAMMA, lam,
    )
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("scan", adv.SCANS)
@pytest.mark.parametrize("seed", range(3))
def test_gae_matches_literal_recursion_arbitrary_inputs(seed, scan):
    rng = np.random.default_rng(100 + seed)
    r_t, v_tm1, v_t = rng.normal(size=(3, 17)).astype(np.float32)
    discount_t = rng.uniform(size=17).astype(np.float32)
    lambda_t = rng.uniform(size=17).astype(np.float32)
    out = jax.jit(adv.gae, static_argnames="scan")(*_f32(r_t, discount_t, v_tm1, v_t, lambda_t), scan=scan)
    expected = np_gae_literal(r_t, discount_t, v_tm1, v_t, lambda_t)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def test_gae_scalar_lambda_equals_broadcast_lambda():
    frag = random_fragment(7, p_trunc=0.0)
    discount_t, _ = adv.gae_inputs(
        jnp.asarray(frag["reward"]), frag["terminated"], frag["truncated"], GAMMA, 0.8
    )
    args = _f32(frag["reward"], discount_t, frag["v_tm1"], frag["v_t"])
    scalar = adv.gae(*args, 0.8)
    vector = adv.gae(*args, jnp.full(20, 0.8, jnp.float32))
    np.testing.assert_array_equal(scalar, vector)
    # and lambda actually matters (the comparison above is not vacuous)
    assert not np.allclose(scalar, adv.gae(*args, 0.3))


@pytest.mark.parametrize("boundary", ["terminated", "truncated"])
def test_gae_never_crosses_episode_boundary(boundary):
    length, k = 12, 5
    frag = random_fragment(3, length=length, p_term=0.0, p_trunc=0.0)
    flags = np.zeros(length, bool)
    flags[k] = True
    terminated = flags if boundary == "terminated" else np.zeros(length, bool)
    truncated = flags if boundary == "truncated" else np.zeros(length, bool)
    discount_t, lambda_t = adv.gae_inputs(
        jnp.asarray(frag["reward"]), terminated, truncated, GAMMA, 0.95
    )
    gae = jax.jit(adv.gae)
    base = gae(*_f32(frag["reward"], discount_t, frag["v_tm1"], frag["v_t"]), lambda_t)

    # change everything that belongs to the next episode
    reward, v_tm1, v_t = frag["reward"].copy(), frag["v_tm1"].copy(), frag["v_t"].copy()
    reward[k + 1:] += 10.0
    v_tm1[k + 1:] -= 7.0
    v_t[k + 1:] += 3.0
    changed = gae(*_f32(reward, discount_t, v_tm1, v_t), lambda_t)

    np.testing.assert_array_equal(base[: k + 1], changed[: k + 1])
    assert np.all(np.abs(base[k + 1:] - changed[k + 1:]) > 1e-3)


def test_gae_without_boundary_does_cross():
    """Sanity check for the test above: with no flag the future does matter."""
    frag = random_fragment(3, length=12, p_term=0.0, p_trunc=0.0)
    args = _f32(frag["reward"], np.full(12, GAMMA), frag["v_tm1"], frag["v_t"])
    reward = frag["reward"].copy()
    reward[6:] += 10.0
    base = adv.gae(*args, 0.95)
    changed = adv.gae(*_f32(reward), *args[1:], 0.95)
    assert np.all(np.abs(base - changed) > 1e-3)


@pytest.mark.parametrize("lambda_kind", ["scalar", "array"])
def test_batched_gae_equals_per_column(lambda_kind):
    length, num_envs = 16, 4
    cols = [random_fragment(s, length=length) for s in range(num_envs)]
    stack = {k: np.stack([c[k] for c in cols], axis=1) for k in cols[0]}
    discount_t, lambda_t = adv.gae_inputs(
        jnp.asarray(stack["reward"]), stack["terminated"], stack["truncated"],
        GAMMA, 0.9,
    )
    if lambda_kind == "scalar":
        lambda_t = 0.9
    args = _f32(stack["reward"], discount_t, stack["v_tm1"], stack["v_t"])
    out = jax.jit(adv.batched_gae)(*args, lambda_t)
    chex.assert_shape(out, (length, num_envs))
    for b in range(num_envs):
        lam_b = lambda_t if lambda_kind == "scalar" else lambda_t[:, b]
        column = adv.gae(*[a[:, b] for a in args], lam_b)
        np.testing.assert_allclose(out[:, b], column, rtol=1e-6, atol=1e-6)


def test_gae_does_not_retrace():
    fn = jax.jit(chex.assert_max_traces(adv.gae, n=1))
    frag = random_fragment(0)
    args = _f32(frag["reward"], np.full(20, GAMMA), frag["v_tm1"], frag["v_t"])
    fn(*args, jnp.float32(0.9))
    fn(*[a + 1.0 for a in args], jnp.float32(0.5))


def test_gae_rejects_bad_shapes():
    x = jnp.zeros(5, jnp.float32)
    with pytest.raises(AssertionError):
        adv.gae(x, x, x, jnp.zeros(4, jnp.float32), 0.9)
    with pytest.raises(AssertionError):
        adv.gae(x[None], x[None], x[None], x[None], 0.9)
    with pytest.raises(AssertionError):
        adv.gae(x, x, x, x, jnp.zeros(4, jnp.float32))


# ----------------------------------------------------------------- lambda-returns


def test_lambda_returns_hand_computed():
    # G_2 = 3 + .9*2 = 4.8
    # G_1 = 2 + .9*(.5*1.5 + .5*4.8) = 4.835
    # G_0 = 1 + .9*(.5*1.0 + .5*4.835) = 3.62575
    out = adv.lambda_returns(*_f32(R, [GAMMA] * 3, V_T), 0.5)
    np.testing.assert_allclose(out, [3.62575, 4.835, 4.8], rtol=RTOL)


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("scan", adv.SCANS)
@pytest.mark.parametrize("seed", range(3))
def test_lambda_returns_matches_numpy(seed, scan, jit):
    rng = np.random.default_rng(200 + seed)
    r_t, v_t = rng.normal(size=(2, 15)).astype(np.float32)
    discount_t = rng.uniform(size=15).astype(np.float32)
    lambda_t = rng.uniform(size=15).astype(np.float32)
    out = _maybe_jit(adv.lambda_returns, jit, scan=scan)(*_f32(r_t, discount_t, v_t, lambda_t))
    np.testing.assert_allclose(
        out, np_lambda_returns(r_t, discount_t, v_t, lambda_t), rtol=RTOL, atol=ATOL
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_lambda_returns_equal_gae_plus_values(seed, lam):
    frag = random_fragment(seed, length=25)
    discount_t, lambda_t = adv.gae_inputs(
        jnp.asarray(frag["reward"]), frag["terminated"], frag["truncated"], GAMMA, lam
    )
    r_t, v_tm1, v_t = _f32(frag["reward"], frag["v_tm1"], frag["v_t"])
    returns = adv.lambda_returns(r_t, discount_t, v_t, lambda_t)
    advantages = adv.gae(r_t, discount_t, v_tm1, v_t, lambda_t)
    np.testing.assert_allclose(returns, advantages + v_tm1, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("scan", adv.SCANS)
def test_monte_carlo_returns_stop_at_boundaries(scan):
    # lambda = 1: discounted reward-to-go inside an episode; termination at t=1
    # stops it, truncation at t=3 bootstraps from v_t[3], fragment end from v_t[5].
    r_t = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    terminated = np.array([0, 1, 0, 0, 0, 0], bool)
    truncated = np.array([0, 0, 0, 1, 0, 0], bool)
    v_t = [50.0, 50.0, 50.0, 10.0, 50.0, 20.0]
    discount_t, lambda_t = adv.gae_inputs(
        jnp.zeros(6, jnp.float32), terminated, truncated, 0.5, 1.0
    )
    out = adv.lambda_returns(*_f32(r_t, discount_t, v_t), lambda_t, scan=scan)
    # G_5 = 1 + .5*20 = 11; G_4 = 1 + .5*11 = 6.5; G_3 = 1 + .5*10 = 6 (truncation)
    # G_2 = 1 + .5*6 = 4; G_1 = 1 (terminal); G_0 = 1 + .5*1 = 1.5
    expected = [1.5, 1.0, 4.0, 6.0, 6.5, 11.0]
    np.testing.assert_allclose(out, expected, rtol=RTOL)


def test_batched_lambda_returns_equals_per_column():
    rng = np.random.default_rng(9)
    r_t, discount_t, v_t, lambda_t = rng.uniform(size=(4, 10, 3)).astype(np.float32)
    out = adv.batched_lambda_returns(*_f32(r_t, discount_t, v_t, lambda_t))
    for b in range(3):
        np.testing.assert_allclose(
            out[:, b],
            adv.lambda_returns(*_f32(r_t[:, b], discount_t[:, b], v_t[:, b], lambda_t[:, b])),
            rtol=1e-6,
        )


# ----------------------------------------------------------------- V-trace


def _vtrace_args(frag, lam):
    discount_t, lambda_t = adv.gae_inputs(
        jnp.asarray(frag["reward"]), frag["terminated"], frag["truncated"], GAMMA, lam
    )
    v_tm1, v_t, r_t, rho = _f32(frag["v_tm1"], frag["v_t"], frag["reward"], frag["rho"])
    return (v_tm1, v_t, r_t, discount_t, rho, lambda_t)


def test_vtrace_hand_computed():
    # gamma .9, lambda 1, rho = [2, .5, 1], thresholds 1
    # clipped rho = c = [1, .5, 1]; delta = [1.4, .5*2.35, 3.3] = [1.4, 1.175, 3.3]
    # A_2 = 3.3; A_1 = 1.175 + .9*.5*3.3 = 2.66; A_0 = 1.4 + .9*1*2.66 = 3.794
    # vs = [.5 + 3.794, 1 + 2.66, 1.5 + 3.3] = [4.294, 3.66, 4.8]
    # pg_0 = 1*(1 + .9*3.66 - .5) = 3.794; pg_1 = .5*(2 + .9*4.8 - 1) = 2.66
    # pg_2 = 1*(3 + .9*2.0 - 1.5) = 3.3 (bootstrap from v_t[2])
    out = adv.vtrace(*_f32(V_TM1, V_T, R, [GAMMA] * 3, [2.0, 0.5, 1.0]))
    np.testing.assert_allclose(out.vs, [4.294, 3.66, 4.8], rtol=RTOL)
    np.testing.assert_allclose(out.pg_advantage, [3.794, 2.66, 3.3], rtol=RTOL)


def test_vtrace_hand_computed_truncation():
    # as above with a time limit at t=0: V(final_obs) = 4.0, lambda_0 = 0.
    # delta_0 = 1*(1 + .9*4 - .5) = 4.1; A_0 = 4.1; vs_0 = 4.6
    # pg_0 = 1*(1 + .9*4.0 - .5) = 4.1 (not vs_1 = 3.66 of the next episode)
    out = adv.vtrace(
        *_f32(V_TM1, [4.0, 1.5, 2.0], R, [GAMMA] * 3, [2.0, 0.5, 1.0]),
        lambda_=jnp.array([0.0, 1.0, 1.0], jnp.float32),
    )
    np.testing.assert_allclose(out.vs, [4.6, 3.66, 4.8], rtol=RTOL)
    np.testing.assert_allclose(out.pg_advantage, [4.1, 2.66, 3.3], rtol=RTOL)


THRESHOLDS = [(1.0, 1.0), (None, None), (0.5, 2.0), (2.0, None)]


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lam", [1.0, 0.8, 0.0])
@pytest.mark.parametrize("thresholds", THRESHOLDS)
def test_vtrace_matches_paper_numpy(seed, lam, thresholds, jit):
    clip_rho, clip_pg_rho = thresholds
    frag = random_fragment(seed, length=18, p_term=0.1, p_trunc=0.15)
    fn = _maybe_jit(
        adv.vtrace, jit,
        clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho,
    )
    out = fn(*_vtrace_args(frag, lam))
    vs, pg = np_vtrace_paper(
        frag["reward"], frag["terminated"], frag["truncated"],
        frag["v_tm1"], frag["v_t"], frag["rho"].astype(np.float64), GAMMA, lam,
        clip_rho, clip_pg_rho,
    )
    np.testing.assert_allclose(out.vs, vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.pg_advantage, pg, rtol=1e-4, atol=1e-4)
    assert out.vs.dtype == out.pg_advantage.dtype == jnp.float32


@pytest.mark.parametrize("lam", [1.0, 0.8, 0.0])
@pytest.mark.parametrize("thresholds", THRESHOLDS)
def test_vtrace_matrix_form_matches_paper_numpy(lam, thresholds):
    clip_rho, clip_pg_rho = thresholds
    fn = jax.jit(functools.partial(adv.batched_vtrace, clip_rho_threshold=clip_rho,
                                   clip_pg_rho_threshold=clip_pg_rho, scan="matrix"))
    frags = [random_fragment(seed, length=18, p_term=0.1, p_trunc=0.15) for seed in range(4)]
    columns = [_vtrace_args(frag, lam) for frag in frags]  # each env a column of the batch
    out = fn(*(jnp.stack([column[i] for column in columns], axis=1) for i in range(5)),
             jnp.stack([jnp.broadcast_to(column[5], (18,)) for column in columns], axis=1))
    for b, frag in enumerate(frags):
        vs, pg = np_vtrace_paper(
            frag["reward"], frag["terminated"], frag["truncated"],
            frag["v_tm1"], frag["v_t"], frag["rho"].astype(np.float64), GAMMA, lam,
            clip_rho, clip_pg_rho,
        )
        np.testing.assert_allclose(out.vs[:, b], vs, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(out.pg_advantage[:, b], pg, rtol=1e-4, atol=1e-4)


def test_vtrace_matrix_form_gradients_match_the_scan_where_decays_underflow():
    # rho e^-3 over 64 steps: the running log-decay reaches -190, so the masked entries' differences
    # overflow exp. Their gradient was 0 * inf = NaN while the values still matched.
    rng = np.random.default_rng(0)
    v_tm1, v_t, r_t = (jnp.asarray(rng.normal(size=64), jnp.float32) for _ in range(3))
    discount_t = jnp.full(64, 0.99, jnp.float32)

    def total(log_rho, scan):
        out = adv.vtrace(v_tm1, v_t, r_t, discount_t, jnp.exp(log_rho), 0.95,
                         stop_target_gradients=False, scan=scan)
        return jnp.sum(out.vs) + jnp.sum(out.pg_advantage)

    log_rho = jnp.full(64, -3.0, jnp.float32)
    grads = {scan: jax.grad(total)(log_rho, scan) for scan in adv.SCANS}
    assert np.isfinite(grads["matrix"]).all()
    np.testing.assert_allclose(grads["matrix"], grads["sequential"], rtol=1e-4, atol=1e-5)


def test_vtrace_reference_sees_truncation():
    """The NumPy reference is not blind to truncations: ignoring them changes it."""
    frag = random_fragment(1, length=18, p_term=0.0, p_trunc=0.2)
    assert frag["truncated"].any()
    args = (frag["reward"], frag["terminated"])
    kw = dict(v_tm1=frag["v_tm1"], v_t=frag["v_t"], rho=frag["rho"], gamma=GAMMA,
              lam=1.0, clip_rho=1.0, clip_pg_rho=1.0)
    with_trunc = np_vtrace_paper(*args, frag["truncated"], **kw)
    without = np_vtrace_paper(*args, np.zeros(18, bool), **kw)
    assert not np.allclose(with_trunc[0], without[0])
    assert not np.allclose(with_trunc[1], without[1])


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    lam=st.floats(0.0, 1.0),
    threshold=st.sampled_from([1.0, 1.5, None]),
)
def test_vtrace_on_policy_reduces_to_lambda_returns_and_gae(seed, lam, threshold):
    frag = random_fragment(seed, length=16)
    frag["rho"] = np.ones(16, np.float32)
    v_tm1, v_t, r_t, discount_t, _, lambda_t = _vtrace_args(frag, lam)
    out = _JIT_VTRACE[threshold](v_tm1, v_t, r_t, discount_t, jnp.ones(16), lambda_t)
    returns = adv.lambda_returns(r_t, discount_t, v_t, lambda_t)
    advantages = adv.gae(r_t, discount_t, v_tm1, v_t, lambda_t)
    np.testing.assert_allclose(out.vs, returns, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.pg_advantage, advantages, rtol=1e-4, atol=1e-4)


_JIT_VTRACE = {
    threshold: jax.jit(
        lambda *a, threshold=threshold: adv.vtrace(
            *a, clip_rho_threshold=threshold, clip_pg_rho_threshold=threshold
        )
    )
    for threshold in (1.0, 1.5, None)
}


def test_vtrace_clipping_matters():
    frag = random_fragment(5, length=18)
    args = _vtrace_args(frag, 1.0)
    assert (frag["rho"] > 1.5).any()
    clipped = adv.vtrace(*args)
    unclipped = adv.vtrace(*args, clip_rho_threshold=None, clip_pg_rho_threshold=None)
    assert not np.allclose(clipped.vs, unclipped.vs)
    assert not np.allclose(clipped.pg_advantage, unclipped.pg_advantage)


@pytest.mark.parametrize("lambda_kind", ["scalar", "array"])
def test_batched_vtrace_equals_per_column(lambda_kind):
    length, num_envs = 14, 3
    cols = [random_fragment(10 + s, length=length) for s in range(num_envs)]
    stack = {k: np.stack([c[k] for c in cols], axis=1) for k in cols[0]}
    args = _vtrace_args(stack, 0.9)
    if lambda_kind == "scalar":
        args = args[:-1] + (0.9,)
    out = jax.jit(adv.batched_vtrace, static_argnums=(6, 7))(*args, None, 1.0)
    chex.assert_shape([out.vs, out.pg_advantage], (length, num_envs))
    for b in range(num_envs):
        column_args = [a[:, b] for a in args[:-1]]
        lam_b = args[-1] if lambda_kind == "scalar" else args[-1][:, b]
        column = adv.vtrace(*column_args, lam_b, None, 1.0)
        np.testing.assert_allclose(out.vs[:, b], column.vs, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(
            out.pg_advantage[:, b], column.pg_advantage, rtol=1e-6, atol=1e-6
        )


@pytest.mark.parametrize("stop", [True, False])
def test_vtrace_stop_target_gradients(stop):
    frag = random_fragment(2, length=8)
    args = _vtrace_args(frag, 1.0)

    def loss(v_tm1):
        out = adv.vtrace(v_tm1, *args[1:], stop_target_gradients=stop)
        return jnp.sum(out.vs) + jnp.sum(out.pg_advantage)

    grad = jax.grad(loss)(args[0])
    if stop:
        np.testing.assert_array_equal(grad, np.zeros(8))
    else:
        assert np.abs(grad).sum() > 0


def np_vtrace_docstring(v_tm1, v_t, r_t, discount_t, rho, lambda_t, clip_rho, clip_pg_rho):
    """The docstring's rule, element by element, for arbitrary inputs."""
    length = len(r_t)
    clipped_rho = np.minimum(clip_rho, rho)
    clipped_pg_rho = np.minimum(clip_pg_rho, rho)
    c = lambda_t * np.minimum(1.0, rho)
    vs_minus_v = np.zeros(length + 1)
    for t in reversed(range(length)):
        delta = clipped_rho[t] * (r_t[t] + discount_t[t] * v_t[t] - v_tm1[t])
        vs_minus_v[t] = delta + discount_t[t] * c[t] * vs_minus_v[t + 1]
    vs = v_tm1 + vs_minus_v[:length]
    vs_tp1 = np.append(vs[1:], v_t[-1])
    vs_next = lambda_t * vs_tp1 + (1 - lambda_t) * v_t
    pg = clipped_pg_rho * (r_t + discount_t * vs_next - v_tm1)
    return vs, pg


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("lam_kind", ["one", "random"])
def test_vtrace_matches_docstring_rule_on_arbitrary_inputs(seed, lam_kind):
    # v_t[t] != v_tm1[t+1] here: at lambda = 1 the pg target must be vs_{t+1}
    # itself (the paper), not v_t + (vs_{t+1} - v_tm1[t+1]).
    rng = np.random.default_rng(300 + seed)
    v_tm1, v_t, r_t = rng.normal(size=(3, 13))
    discount_t = rng.uniform(size=13)
    rho = np.exp(rng.normal(size=13))
    lambda_t = np.ones(13) if lam_kind == "one" else rng.uniform(size=13)
    out = jax.jit(adv.vtrace, static_argnums=(6, 7))(
        *_f32(v_tm1, v_t, r_t, discount_t, rho, lambda_t), 1.2, 0.8
    )
    vs, pg = np_vtrace_docstring(v_tm1, v_t, r_t, discount_t, rho, lambda_t, 1.2, 0.8)
    np.testing.assert_allclose(out.vs, vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.pg_advantage, pg, rtol=1e-4, atol=1e-4)
