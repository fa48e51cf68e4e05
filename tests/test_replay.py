"""The replay buffer: ring order and wrap-around, the n-step rule (against a plain NumPy loop,
over terminations, truncations and the newest row), uniform sampling, checkpoint stripping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.algorithms.replay import buffer as replay

GAMMA = 0.9


def transitions(num_rows: int, num_envs: int, start: int = 0, *, terminated=None, truncated=None) -> dict:
    """Rows whose values name them: obs = 100 * row + env, next_obs = obs + 0.5, reward = row + env / 10."""
    rows = np.arange(start, start + num_rows)[:, None]
    envs = np.arange(num_envs)[None, :]
    obs = (100.0 * rows + envs).astype(np.float32)
    zeros = np.zeros((num_rows, num_envs), bool)
    return dict(obs=jnp.asarray(obs[..., None]), action=jnp.asarray((rows + envs) % 2, jnp.int32),
                reward=jnp.asarray(rows + envs / 10.0, jnp.float32),
                terminated=jnp.asarray(zeros if terminated is None else terminated),
                truncated=jnp.asarray(zeros if truncated is None else truncated),
                next_obs=jnp.asarray(obs[..., None] + 0.5))


def empty(capacity_rows: int, num_envs: int) -> replay.ReplayBuffer:
    return replay.init(jax.tree.map(lambda x: x[0], transitions(1, num_envs)), capacity_rows)


# -- the ring ------------------------------------------------------------------
def test_rows_are_written_in_order_and_wrap_around():
    buffer = empty(capacity_rows=5, num_envs=2)
    buffer = replay.add(buffer, transitions(3, 2, start=0))
    assert (int(buffer.position), int(buffer.size)) == (3, 3)
    np.testing.assert_array_equal(buffer.storage["obs"][:3, :, 0], [[0, 1], [100, 101], [200, 201]])
    buffer = replay.add(buffer, transitions(3, 2, start=3))  # rows 3, 4, then 5 overwrites row 0
    assert (int(buffer.position), int(buffer.size)) == (1, 5)
    np.testing.assert_array_equal(buffer.storage["obs"][:, 0, 0], [500, 100, 200, 300, 400])
    np.testing.assert_array_equal(buffer.storage["next_obs"][:, 1, 0], [501.5, 101.5, 201.5, 301.5, 401.5])
    buffer = replay.add(buffer, transitions(5, 2, start=6))  # a whole ring's worth: rows 6..10
    assert (int(buffer.position), int(buffer.size)) == (1, 5)
    np.testing.assert_array_equal(buffer.storage["obs"][:, 0, 0], [1000, 600, 700, 800, 900])


def test_adding_more_rows_than_the_ring_holds_is_refused():
    with pytest.raises(ValueError, match="replay capacity must hold at least one rollout"):
        replay.add(empty(capacity_rows=2, num_envs=1), transitions(3, 1))


def test_add_under_jit_with_donation_writes_in_place():
    buffer = empty(capacity_rows=4, num_envs=3)
    add = jax.jit(replay.add, donate_argnums=0)
    for start in range(0, 12, 2):
        buffer = add(buffer, transitions(2, 3, start=start))
    np.testing.assert_array_equal(buffer.storage["obs"][:, 2, 0], [802, 902, 1002, 1102])


# -- the n-step rule -------------------------------------------------------------
def reference_n_step(r, terminated, truncated, t, n, newest, gamma):
    """A plain loop: sum rewards from t until n steps, an episode's end (inclusive) or the newest row."""
    total, k = 0.0, 0
    while True:
        total += gamma ** k * r[t + k]
        k += 1
        if terminated[t + k - 1] or truncated[t + k - 1] or k == n or t + k > newest:
            break
    last = t + k - 1
    return total, gamma ** k * (0.0 if terminated[last] else 1.0), last


def test_n_step_target_by_hand():
    r = jnp.array([1.0, 2.0, 4.0])
    no = jnp.zeros(3, bool)
    valid = jnp.ones(3, bool)
    # three steps: 1 + 0.9 * 2 + 0.81 * 4, bootstrap gamma^3 from the third step's next_obs
    ret, disc, last = replay.n_step_target(r, no, no, valid, GAMMA)
    np.testing.assert_allclose([ret, disc, last], [1 + 1.8 + 3.24, 0.729, 2], rtol=1e-6)
    # terminated at the second step: 1 + 0.9 * 2, no bootstrap
    ret, disc, last = replay.n_step_target(r, jnp.array([False, True, False]), no, valid, GAMMA)
    np.testing.assert_allclose([ret, disc, last], [2.8, 0.0, 1], rtol=1e-6)
    # truncated at the second step: the same return, bootstrapped (gamma^2) from its pre-reset next_obs
    ret, disc, last = replay.n_step_target(r, no, jnp.array([False, True, False]), valid, GAMMA)
    np.testing.assert_allclose([ret, disc, last], [2.8, 0.81, 1], rtol=1e-6)
    # terminated at the sampled step itself: the one-step reward alone
    ret, disc, last = replay.n_step_target(r, jnp.array([True, False, False]), no, valid, GAMMA)
    np.testing.assert_allclose([ret, disc, last], [1.0, 0.0, 0], rtol=1e-6)
    # only two rows written after the sampled one: a two-step return, bootstrapped
    ret, disc, last = replay.n_step_target(r, no, no, jnp.array([True, True, False]), GAMMA)
    np.testing.assert_allclose([ret, disc, last], [2.8, 0.81, 1], rtol=1e-6)


@pytest.mark.parametrize("n_step", [1, 3, 5])
def test_sampled_targets_match_a_numpy_loop_over_episode_ends(n_step):
    """Every transition of a hand-made [T, B] record with terminations and truncations, sampled
    exhaustively, against the reference loop; the ring has wrapped, so windows cross its end."""
    num_rows, num_envs, capacity = 14, 2, 10
    terminated = np.zeros((num_rows, num_envs), bool)
    truncated = np.zeros((num_rows, num_envs), bool)
    terminated[[5, 9], 0] = True
    truncated[7, 0] = True
    truncated[[6, 8], 1] = True
    terminated[12, 1] = True
    record = transitions(num_rows, num_envs, terminated=terminated, truncated=truncated)
    buffer = empty(capacity, num_envs)
    buffer = replay.add(buffer, jax.tree.map(lambda x: x[:8], record))
    buffer = replay.add(buffer, jax.tree.map(lambda x: x[8:], record))  # rows 0..3 overwritten
    reward = np.asarray(record["reward"])
    sample = jax.jit(lambda key: replay.sample(buffer, key, batch_size=256, n_step=n_step, gamma=GAMMA))
    num_checked = 0
    for key_index in range(5):
        batch = jax.device_get(sample(jax.random.PRNGKey(key_index)))
        rows = (np.asarray(batch["obs"][:, 0]) // 100).astype(int)
        envs = (np.asarray(batch["obs"][:, 0]) % 100).astype(int)
        assert rows.min() >= num_rows - capacity  # only rows still in the ring
        for i, (t, b) in enumerate(zip(rows, envs)):
            ret, disc, last = reference_n_step(reward[:, b], terminated[:, b], truncated[:, b], t, n_step,
                                               num_rows - 1, GAMMA)
            assert np.isclose(batch["n_step_return"][i], ret, rtol=1e-5), (t, b, batch["n_step_return"][i], ret)
            assert np.isclose(batch["discount"][i], disc, rtol=1e-5), (t, b, batch["discount"][i], disc)
            assert batch["bootstrap_obs"][i, 0] == 100.0 * last + b + 0.5, (t, b, last)
            assert batch["action"][i] == (t + b) % 2
            num_checked += 1
    assert num_checked == 5 * 256


def test_cut_episodes_stops_n_step_windows_where_a_resumed_run_restarts_its_envs():
    """Rows 0-2 before a resume (mid-episode), rows 3-5 after, another episode. Cut, a window from
    row 1 holds rows 1 and 2 and bootstraps from row 2's next_obs, the observation the run stopped
    at; uncut, it ran into row 3. Env 1's newest row terminated: it stays terminated only."""
    terminated = np.zeros((3, 2), bool)
    terminated[2, 1] = True
    before = transitions(3, 2, terminated=terminated)
    buffer = replay.add(empty(8, 2), before)
    assert not np.asarray(replay.cut_episodes(empty(8, 2)).storage["truncated"]).any()  # nothing written
    cut = replay.cut_episodes(buffer)
    np.testing.assert_array_equal(cut.storage["truncated"][:3], [[False, False], [False, False], [True, False]])
    for kept, uncut in ((cut, False), (buffer, True)):
        full = replay.add(kept, transitions(3, 2, start=3))
        batch = replay.sample(full, jax.random.PRNGKey(0), batch_size=256, n_step=3, gamma=1.0)
        at = np.flatnonzero((np.asarray(batch["obs"][:, 0]) == 100.0))  # the draws of row 1, env 0
        assert at.size > 0
        returns, bootstrap = np.asarray(batch["n_step_return"])[at], np.asarray(batch["bootstrap_obs"][at, 0])
        expected = (1 + 2 + 3, 300.5) if uncut else (1 + 2, 200.5)
        np.testing.assert_allclose(returns, expected[0])
        np.testing.assert_array_equal(bootstrap, expected[1])


# -- sampling ----------------------------------------------------------------------
def test_sampling_is_uniform_over_the_transitions_written():
    """Draws over a half-full ring of 6 rows x 4 envs (24 transitions): a chi-square statistic
    below the 0.999 quantile of chi2(23) (~49.7), and never a row not yet written. A sampler that
    skips a row or an env, or favours one, lands far above (a missing cell alone adds ~N/24)."""
    capacity, num_envs = 12, 4
    buffer = replay.add(empty(capacity, num_envs), transitions(6, num_envs))
    draws = 48_000
    batch = jax.jit(lambda k: replay.sample(buffer, k, batch_size=draws, n_step=1, gamma=GAMMA))(jax.random.PRNGKey(0))
    cells = np.asarray(batch["obs"][:, 0]).astype(int)
    rows, envs = cells // 100, cells % 100
    assert rows.max() == 5 and rows.min() == 0
    counts = np.zeros((6, num_envs))
    np.add.at(counts, (rows, envs), 1)
    expected = draws / counts.size
    chi_square = np.sum((counts - expected) ** 2 / expected)
    assert chi_square < 49.7, (chi_square, counts)


# -- checkpoints without the buffer ------------------------------------------------
def test_strip_and_graft_keep_everything_but_the_buffer():
    buffer = replay.add(empty(4, 2), transitions(3, 2))
    state = {"params": jnp.arange(3.0), "learner": {"replay": buffer, "step": jnp.int32(7)}}
    stripped = replay.strip(state)
    assert stripped["learner"]["replay"].storage == {} and int(stripped["learner"]["replay"].size) == 0
    fresh = {"params": jnp.zeros(3), "learner": {"replay": empty(4, 2), "step": jnp.int32(0)}}
    grafted = replay.graft(stripped, fresh)
    np.testing.assert_array_equal(grafted["params"], [0.0, 1.0, 2.0])
    assert int(grafted["learner"]["step"]) == 7
    assert int(grafted["learner"]["replay"].size) == 0
    assert grafted["learner"]["replay"].storage["obs"].shape == (4, 2, 1)
