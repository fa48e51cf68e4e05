"""Prioritised replay's maths and its ring: the draw's distribution against p^alpha / sum, the
importance weights and the priority rule against NumPy, where the updates land, new rows at the
largest priority, never-written rows never drawn, alpha = 0 as today's uniform draw, the
weighted losses of DQN and SAC, and strip/graft."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.algorithms.replay import priority
from jaxrl_async.algorithms.replay import buffer as replay

GAMMA = 0.9
ALPHA, EPSILON = 0.5, 0.01


def transitions(num_rows: int, num_envs: int, start: int = 0) -> dict:
    """Rows whose values name them: obs = 100 * row + env (so a drawn obs gives its cell)."""
    rows = np.arange(start, start + num_rows)[:, None]
    obs = (100.0 * rows + np.arange(num_envs)[None, :]).astype(np.float32)
    zeros = np.zeros((num_rows, num_envs), bool)
    return dict(obs=jnp.asarray(obs[..., None]), action=jnp.asarray(np.zeros_like(obs), jnp.int32),
                reward=jnp.asarray(obs), terminated=jnp.asarray(zeros), truncated=jnp.asarray(zeros),
                next_obs=jnp.asarray(obs[..., None] + 0.5))


def ring(capacity_rows: int, num_envs: int, num_rows: int, *, prioritised: bool = True) -> replay.ReplayBuffer:
    buffer = replay.init(jax.tree.map(lambda x: x[0], transitions(1, num_envs)), capacity_rows,
                         prioritised=prioritised)
    return replay.add(buffer, transitions(num_rows, num_envs))


# one compiled sampler per shape (eager dispatch of the n-step window's ops costs seconds)
sample = jax.jit(replay.sample, static_argnames=("batch_size", "n_step", "gamma"))


def cells_of(batch: dict) -> tuple[np.ndarray, np.ndarray]:
    obs = np.asarray(batch["obs"][:, 0]).astype(int)
    return obs // 100, obs % 100


# a hand-made set of |TD errors| for a half-full ring of 6 written rows (of 12) x 4 envs,
# spanning 1000x, so p^alpha (alpha = 0.5) and p differ by far more than the test's tolerance
TD_ABS = np.array([[0.0, 1.0, 2.0, 3.0], [10.0, 0.5, 0.25, 4.0], [0.1, 0.2, 0.3, 0.4],
                   [5.0, 6.0, 7.0, 8.0], [1.5, 2.5, 3.5, 0.05], [9.0, 0.01, 0.02, 0.03]], np.float32)


def prioritised_ring() -> replay.ReplayBuffer:
    """The ring above with every written cell's priority set from TD_ABS by `update_priorities`."""
    buffer = ring(12, 4, 6)
    rows, envs = np.meshgrid(np.arange(6), np.arange(4), indexing="ij")
    return replay.update_priorities(buffer, jnp.asarray(rows.ravel()), jnp.asarray(envs.ravel()),
                                    jnp.asarray(TD_ABS.ravel()), exponent=ALPHA, epsilon=EPSILON)


# -- the rule and the draw -------------------------------------------------------------------
def test_priority_is_td_error_plus_epsilon_to_the_alpha():
    np.testing.assert_allclose(priority.from_td_error(jnp.asarray(TD_ABS), ALPHA, EPSILON),
                               (TD_ABS.astype(np.float64) + EPSILON) ** ALPHA, rtol=1e-6)


def test_draws_follow_p_to_the_alpha_over_its_sum_and_skip_unwritten_rows():
    """240k draws (seed 0) over the 24 written cells: a chi-square statistic against
    P = (|td| + eps)^alpha / sum below chi2(23)'s 0.999 quantile (49.7). Drawing by |td|
    instead (alpha ignored) or uniformly puts it in the thousands; rows 6..11 (never written,
    priority 0) must get no draw at all."""
    buffer = prioritised_ring()
    draws = 240_000
    batch = sample(buffer, jax.random.PRNGKey(0), batch_size=draws, n_step=1, gamma=GAMMA)
    rows, envs = cells_of(batch)
    assert rows.max() <= 5
    np.testing.assert_array_equal(np.asarray(batch["row"]), rows)  # the reported cells are the drawn ones
    np.testing.assert_array_equal(np.asarray(batch["env"]), envs)
    counts = np.zeros((6, 4))
    np.add.at(counts, (rows, envs), 1)
    p = (TD_ABS.astype(np.float64) + EPSILON) ** ALPHA
    expected = draws * p / p.sum()
    chi_square = np.sum((counts - expected) ** 2 / expected)
    assert chi_square < 49.7, (chi_square, counts, expected)
    wrong = draws * (TD_ABS + EPSILON) / (TD_ABS + EPSILON).sum()  # alpha ignored: what a bug would match
    assert np.sum((counts - wrong) ** 2 / wrong) > 1000


def test_a_fresh_ring_draws_only_written_rows_and_the_last_cell_takes_rounding():
    """One written row of 1000 x 2 envs: every draw lands in it, though the prefix sum over the
    never-written zeros is flat (a target at the sum's end must not fall into them)."""
    buffer = ring(1000, 2, 1)
    batch = sample(buffer, jax.random.PRNGKey(1), batch_size=4096, n_step=1, gamma=GAMMA)
    assert set(np.asarray(batch["row"]).tolist()) == {0}
    assert set(np.asarray(batch["env"]).tolist()) == {0, 1}
    # a target exactly at the total (u -> 1) also lands on the last written cell
    cells, probabilities = priority.sample_proportional(jnp.ones((5, 2)).at[2:].set(0.0), jnp.int32(4),
                                                        jax.random.PRNGKey(0), 8)
    assert int(jnp.max(cells)) <= 3 and np.allclose(probabilities, 0.25)
    flat = jnp.zeros(10).at[:4].set(1.0).reshape(5, 2)
    cumulative = jnp.cumsum(flat.reshape(-1))
    assert int(jnp.searchsorted(cumulative, cumulative[-1], side="right")) == 10  # what the clamp is for


def test_importance_weights_match_numpy():
    buffer = prioritised_ring()
    beta = 0.7
    batch = sample(buffer, jax.random.PRNGKey(2), batch_size=64, n_step=1, gamma=GAMMA,
                          weight_exponent=beta)
    rows, envs = cells_of(batch)
    p = (TD_ABS.astype(np.float64) + EPSILON) ** ALPHA
    probability = p[rows, envs] / p.sum()
    weights = (24 * probability) ** -beta
    np.testing.assert_allclose(batch["weight"], weights / weights.max(), rtol=1e-5)
    assert float(jnp.max(batch["weight"])) == 1.0
    uniform = sample(buffer, jax.random.PRNGKey(2), batch_size=64, n_step=1, gamma=GAMMA, weight_exponent=0.0)
    np.testing.assert_array_equal(uniform["weight"], np.ones(64))


def test_weight_exponent_anneals_linearly_to_one():
    at = [priority.annealed_exponent(0.4, jnp.float32(x)) for x in (0.0, 0.25, 1.0, 1.5)]
    np.testing.assert_allclose(at, [0.4, 0.55, 1.0, 1.0], rtol=1e-6)


# -- the ring's priorities ----------------------------------------------------------------------
def test_updates_land_on_the_sampled_cells_and_raise_the_max():
    buffer = ring(8, 3, 5)
    np.testing.assert_array_equal(buffer.priorities, np.r_[np.ones((5, 3)), np.zeros((3, 3))])
    batch = sample(buffer, jax.random.PRNGKey(3), batch_size=6, n_step=1, gamma=GAMMA)
    rows, envs = np.asarray(batch["row"]), np.asarray(batch["env"])
    td_abs = np.asarray(batch["obs"][:, 0]) / 100.0  # any value per cell: here its own name
    updated = replay.update_priorities(buffer, batch["row"], batch["env"], jnp.asarray(td_abs),
                                       exponent=ALPHA, epsilon=EPSILON)
    expected = np.asarray(buffer.priorities).copy()
    expected[rows, envs] = (td_abs + EPSILON) ** ALPHA
    np.testing.assert_allclose(updated.priorities, expected, rtol=1e-6)
    assert len(set(zip(rows, envs))) > 1  # the draw covered several cells
    np.testing.assert_allclose(updated.max_priority, max(1.0, ((td_abs + EPSILON) ** ALPHA).max()), rtol=1e-6)
    # rows written later (wrapping round the ring) start at the largest priority seen
    after = replay.add(updated, transitions(4, 3, start=5))  # rows 5, 6, 7, then 0
    after_priorities = np.asarray(after.priorities)
    np.testing.assert_allclose(after_priorities[[5, 6, 7, 0]], np.full((4, 3), float(updated.max_priority)))
    np.testing.assert_allclose(after_priorities[1:5], expected[1:5], rtol=1e-6)


def test_a_cell_drawn_twice_takes_the_larger_of_its_priorities_whatever_their_order():
    """SAC's and TD3's targets differ between two draws of one cell; a scatter's choice between
    two writes is the backend's, the larger of the two is not. The cell's old priority is replaced."""
    buffer = ring(8, 3, 5)
    for td_abs in ([3.0, 0.5], [0.5, 3.0]):
        updated = replay.update_priorities(buffer, jnp.array([2, 2]), jnp.array([1, 1]), jnp.array(td_abs),
                                           exponent=ALPHA, epsilon=EPSILON)
        np.testing.assert_allclose(updated.priorities[2, 1], (3.0 + EPSILON) ** ALPHA, rtol=1e-6)
    lowered = replay.update_priorities(buffer, jnp.array([2, 2]), jnp.array([1, 1]), jnp.array([0.01, 0.02]),
                                       exponent=ALPHA, epsilon=EPSILON)  # below its old priority, 1
    np.testing.assert_allclose(lowered.priorities[2, 1], (0.02 + EPSILON) ** ALPHA, rtol=1e-6)


def test_alpha_zero_rings_hold_no_priorities_and_draw_as_the_uniform_sampler():
    buffer = ring(12, 4, 6, prioritised=False)
    assert buffer.priorities is None and buffer.max_priority is None
    key = jax.random.PRNGKey(4)
    batch = sample(buffer, key, batch_size=256, n_step=1, gamma=GAMMA, weight_exponent=0.3)
    rows, envs = replay.sample_indices(buffer, key, 256)
    np.testing.assert_array_equal(batch["row"], rows)
    np.testing.assert_array_equal(batch["env"], envs)
    assert "weight" not in batch


def test_strip_drops_the_priorities_and_graft_brings_fresh_ones():
    state = {"learner": {"replay": prioritised_ring()}}
    stripped = replay.strip(state)
    assert stripped["learner"]["replay"].priorities is None and stripped["learner"]["replay"].max_priority is None
    fresh = replay.init(jax.tree.map(lambda x: x[0], transitions(1, 4)), 12, prioritised=True)
    grafted = replay.graft(stripped, {"learner": {"replay": fresh}})
    assert float(jnp.sum(grafted["learner"]["replay"].priorities)) == 0.0
    assert float(grafted["learner"]["replay"].max_priority) == 1.0


def test_update_under_jit_with_donation_keeps_the_values():
    buffer = prioritised_ring()
    expected = np.asarray(buffer.priorities).copy()
    expected[2, 1] = (3.0 + EPSILON) ** ALPHA
    update = jax.jit(lambda b: replay.update_priorities(b, jnp.array([2]), jnp.array([1]), jnp.array([3.0]),
                                                        exponent=ALPHA, epsilon=EPSILON), donate_argnums=0)
    np.testing.assert_allclose(update(buffer).priorities, expected, rtol=1e-6)


# -- the weighted losses ---------------------------------------------------------------------
def test_dqn_loss_weights_each_transition_and_reports_its_td_error():
    from jaxrl_async.algorithms.dqn import q_learning_loss

    table = jnp.array([[1.0, 2.0], [4.0, 0.0], [0.5, 3.0]])
    batch = dict(obs=jnp.array([0, 2]), action=jnp.array([1, 0]), bootstrap_obs=jnp.array([1, 1]),
                 n_step_return=jnp.array([0.5, 1.0]), discount=jnp.array([0.0, 0.0]), weight=jnp.array([1.0, 0.25]))
    loss, metrics = q_learning_loss(lambda n, o: n[o.astype(jnp.int32)], table, table, batch, True, 1.0)
    td = np.array([0.5 - 2.0, 1.0 - 0.5])  # y - Q(s, a), no bootstrap
    huber = np.where(np.abs(td) <= 1, 0.5 * td ** 2, np.abs(td) - 0.5)
    np.testing.assert_allclose(loss, np.mean([1.0, 0.25] * huber), rtol=1e-6)
    np.testing.assert_allclose(metrics["td_abs"], np.abs(td), rtol=1e-6)


@pytest.mark.parametrize("weight", [None, [1.0, 0.5, 0.2]])
def test_sac_critic_loss_weights_each_transition(weight):
    from jaxrl_async.algorithms.replay.actor_critic import critic_loss

    q = np.array([[1.0, 2.0, -1.0], [0.5, 2.5, 0.0]])
    target = np.array([1.5, 1.0, 0.5])
    w = np.ones(3) if weight is None else np.asarray(weight)
    expected = 0.5 * np.sum(np.mean(w * (q - target) ** 2, axis=-1))
    got = critic_loss(jnp.asarray(q), jnp.asarray(target), None if weight is None else jnp.asarray(weight))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
