"""Tests for jaxrl_async.core.distributions and jaxrl_async.nets.actor_critic.

Log-probabilities and entropies are checked against closed forms written out
with `math` on small hand-picked arrays, not against the same jax.nn helpers.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async.config import NetworkConfig
from jaxrl_async.core.distributions import Categorical, DiagGaussian, EpsilonGreedy, MultiCategorical, pick
from jaxrl_async.nets.actor_critic import make_policy, reset_carry
from jaxrl_async.nets.sac import SquashedGaussian

# ----------------------------------------------------------------- Categorical

LOGITS = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [-5.0, 0.5, 10.0]], np.float32)


def _softmax_by_hand(row):
    exps = [math.exp(x) for x in row]
    total = sum(exps)
    return [e / total for e in exps]


@pytest.mark.parametrize("jit", [True, False])
def test_categorical_log_prob_matches_softmax_by_hand(jit):
    actions = np.array([2, 1, 0], np.int32)
    log_prob = lambda logits, a: Categorical(logits).log_prob(a)  # noqa: E731
    got = (jax.jit(log_prob) if jit else log_prob)(LOGITS, actions)
    expected = [math.log(_softmax_by_hand(row)[a]) for row, a in zip(LOGITS.tolist(), actions)]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_pick_is_the_indexed_entry_and_its_gradient_the_one_hot():
    """`pick` (a select and a sum, for the CPU's sake) gives a gather's numbers bit for bit, the
    other entries' infinities and NaNs left out, and a gather's gradient."""
    values = np.array([[[1.5, -np.inf, 3.25], [np.nan, 0.1, -7.0]],
                       [[2.0, 4.0, np.inf], [-0.5, -0.25, 1e30]]], np.float32)  # [2, 2, 3]
    index = np.array([[0, 1], [1, 0]], np.int32)
    expected = np.take_along_axis(values, index[..., None], axis=-1)[..., 0]
    np.testing.assert_array_equal(np.asarray(jax.jit(pick)(values, index)), expected)
    weights = jnp.arange(1.0, 5.0).reshape(2, 2)
    finite = np.nan_to_num(values, nan=0.0, posinf=1.0, neginf=-1.0)
    grad = jax.grad(lambda v: jnp.sum(weights * pick(v, index)))(finite)
    np.testing.assert_array_equal(np.asarray(grad), np.asarray(weights)[..., None] * np.eye(3)[index])


def test_categorical_log_prob_of_every_action_sums_to_one():
    dist = Categorical(jnp.asarray(LOGITS))
    probs = sum(np.exp(dist.log_prob(jnp.full((3,), a))) for a in range(3))
    np.testing.assert_allclose(probs, 1.0, rtol=1e-6)


def test_categorical_entropy_matches_closed_form():
    got = Categorical(jnp.asarray(LOGITS)).entropy()
    expected = [-sum(p * math.log(p) for p in _softmax_by_hand(row)) for row in LOGITS.tolist()]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # uniform over three actions: log 3 exactly
    assert abs(float(got[1]) - math.log(3.0)) < 1e-6


def test_categorical_batch_shapes_and_mode():
    logits = jax.random.normal(jax.random.PRNGKey(0), (5, 7, 4))
    dist = Categorical(logits)
    action = dist.sample(jax.random.PRNGKey(1))
    assert action.shape == (5, 7)
    assert dist.log_prob(action).shape == (5, 7)
    assert dist.entropy().shape == (5, 7)
    np.testing.assert_array_equal(dist.mode(), np.argmax(np.asarray(logits), axis=-1))


def test_categorical_samples_follow_the_softmax():
    num_samples = 40_000
    logits = jnp.broadcast_to(jnp.asarray(LOGITS[0]), (num_samples, 3))
    samples = np.asarray(Categorical(logits).sample(jax.random.PRNGKey(3)))
    frequencies = np.bincount(samples, minlength=3) / num_samples
    # 4 standard errors of a frequency near 0.67 with 40k samples is about 0.01
    np.testing.assert_allclose(frequencies, _softmax_by_hand(LOGITS[0].tolist()), atol=0.01)


# ----------------------------------------------------------------- DiagGaussian


def _gaussian_log_density(x, mean, std):
    """log N(x; mean, std^2) for one dimension, from the density formula."""
    density = math.exp(-((x - mean) ** 2) / (2 * std**2)) / (std * math.sqrt(2 * math.pi))
    return math.log(density)


@pytest.mark.parametrize("jit", [True, False])
def test_gaussian_log_prob_matches_density_by_hand(jit):
    mean = np.array([[0.0, 1.0], [-2.0, 0.5]], np.float32)
    log_std = np.array([[0.0, math.log(2.0)], [math.log(0.5), -1.0]], np.float32)
    action = np.array([[0.3, -1.0], [-2.0, 2.0]], np.float32)
    log_prob = lambda m, s, a: DiagGaussian(m, s).log_prob(a)  # noqa: E731
    got = (jax.jit(log_prob) if jit else log_prob)(mean, log_std, action)
    expected = [
        sum(_gaussian_log_density(x, m, math.exp(s)) for x, m, s in zip(xs, ms, ss))
        for xs, ms, ss in zip(action.tolist(), mean.tolist(), log_std.tolist())
    ]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_gaussian_entropy_matches_closed_form():
    log_std = np.array([[0.0, math.log(2.0), -1.0]], np.float32)
    got = DiagGaussian(jnp.zeros_like(log_std), jnp.asarray(log_std)).entropy()
    # differential entropy of N(0, s^2) is 0.5 * log(2 pi e s^2), summed over dimensions
    expected = sum(0.5 * math.log(2 * math.pi * math.e * math.exp(s) ** 2) for s in log_std[0].tolist())
    np.testing.assert_allclose(got, [expected], rtol=1e-6)


def test_gaussian_samples_have_the_mean_and_std_and_mode_is_the_mean():
    num_samples = 40_000
    mean = jnp.broadcast_to(jnp.array([1.0, -3.0]), (num_samples, 2))
    log_std = jnp.broadcast_to(jnp.log(jnp.array([0.5, 2.0])), (num_samples, 2))
    dist = DiagGaussian(mean, log_std)
    samples = np.asarray(dist.sample(jax.random.PRNGKey(0)))
    assert samples.shape == (num_samples, 2)
    np.testing.assert_allclose(samples.mean(0), [1.0, -3.0], atol=0.05)
    np.testing.assert_allclose(samples.std(0), [0.5, 2.0], rtol=0.03)
    np.testing.assert_array_equal(dist.mode(), mean)


@pytest.mark.parametrize("dist", [
    Categorical(jnp.broadcast_to(jnp.asarray(LOGITS[2]), (50_000, 3))),
    DiagGaussian(jnp.zeros((50_000, 2)), jnp.broadcast_to(jnp.array([0.3, -0.7]), (50_000, 2))),
], ids=["categorical", "gaussian"])
def test_entropy_is_the_mean_negative_log_prob_of_samples(dist):
    """Ties sample, log_prob and entropy together: H = E[-log p(a)], a ~ p."""
    samples = dist.sample(jax.random.PRNGKey(7))
    monte_carlo = -float(jnp.mean(dist.log_prob(samples)))
    assert abs(monte_carlo - float(dist.entropy()[0])) < 0.02


def test_categorical_samples_as_jax_random_categorical():
    """`sample` is `sample_from_draw(draw(key))`: the same actions as JAX's own sampler, bit for bit."""
    dist = Categorical(jnp.asarray(np.tile(LOGITS, (100, 1))))
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        np.testing.assert_array_equal(dist.sample(key), jax.random.categorical(key, dist.logits, axis=-1))


DRAWN = {
    "categorical": Categorical(jnp.asarray(LOGITS)),
    "multi-categorical": MultiCategorical(jnp.asarray(np.concatenate([LOGITS, LOGITS[:, :2]], -1)), nvec=(3, 2)),
    "gaussian": DiagGaussian(jnp.ones((3, 2)), jnp.zeros((3, 2))),
    "squashed-gaussian": SquashedGaussian(jnp.ones((3, 2)), jnp.zeros((3, 2)), jnp.array([-2.0, 0.0]),
                                          jnp.array([2.0, 1.0]), jnp.array(False)),
    "squashed-gaussian-warm-up": SquashedGaussian(jnp.ones((3, 2)), jnp.zeros((3, 2)), jnp.array([-2.0, 0.0]),
                                                  jnp.array([2.0, 1.0]), jnp.array(True)),
    "epsilon-greedy": EpsilonGreedy(jnp.asarray(LOGITS), jnp.array(0.5)),
}


@pytest.mark.parametrize("name", sorted(DRAWN))
def test_a_draw_needs_only_the_distributions_shapes(name):
    """A host actor draws a fragment's randomness before it knows the step's parameters: from the
    distribution's abstract shapes. Those draws must be the ones the step itself would make."""
    dist = DRAWN[name]
    key = jax.random.PRNGKey(3)
    from_shapes = jax.eval_shape(lambda: dist).draw(key)
    for drawn, own in zip(jax.tree.leaves(from_shapes), jax.tree.leaves(dist.draw(key)), strict=True):
        np.testing.assert_array_equal(drawn, own)
    np.testing.assert_array_equal(dist.sample_from_draw(from_shapes), dist.sample(key))
    # and the draws vary with the key: the samples of 200 keys are not all the same action
    keys = jax.random.split(key, 200)
    samples = np.asarray(jax.vmap(lambda k: dist.sample_from_draw(jax.eval_shape(lambda: dist).draw(k)))(keys))
    assert len(np.unique(samples.reshape(200, -1), axis=0)) > 1


# ----------------------------------------------------------------- networks

SMALL = NetworkConfig(hidden_sizes=(32, 32))


def act(policy, params, obs):
    """(distribution, value) of one step at an episode's start, for obs of any leading shape."""
    leading = obs.shape[: obs.ndim - len(policy.obs_shape)]
    dist, value, _ = policy.step(params, obs, policy.initial_carry(leading))
    return dist, value


@pytest.mark.parametrize("leading", [(), (6,), (3, 5)])
def test_discrete_policy_shapes(leading):
    policy = make_policy(SMALL, (4,), spaces.Discrete(3))
    params = policy.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), leading + (4,))
    dist, value = act(policy, params, obs)
    assert isinstance(dist, Categorical)
    assert dist.logits.shape == leading + (3,)
    assert value.shape == leading
    action = dist.sample(jax.random.PRNGKey(2))
    assert action.shape == leading and jnp.issubdtype(action.dtype, jnp.integer)
    assert dist.log_prob(action).shape == leading
    np.testing.assert_array_equal(policy.value_step(params, obs, ()), value)
    assert policy.discrete and policy.action_shape == ()


def test_continuous_policy_shapes_and_state_independent_std():
    policy = make_policy(SMALL, (3,), spaces.Box(-2.0, 2.0, (2,), jnp.float32))
    params = policy.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (7, 3))
    dist, value = act(policy, params, obs)
    assert isinstance(dist, DiagGaussian)
    assert dist.mean.shape == (7, 2) and dist.log_std.shape == (7, 2)
    assert value.shape == (7,)
    action = dist.sample(jax.random.PRNGKey(2))
    assert action.shape == (7, 2) and action.dtype == jnp.float32
    assert dist.log_prob(action).shape == (7,)
    # log_std starts at 0 (std 1) and is one [D] parameter shared by every state
    np.testing.assert_array_equal(dist.log_std, np.zeros((7, 2), np.float32))
    assert params["params"]["log_std"].shape == (2,)
    assert not policy.discrete and policy.action_shape == (2,)


def test_cnn_policy_on_minatar_shaped_images():
    policy = make_policy(NetworkConfig(hidden_sizes=(32,)), (10, 10, 4), spaces.Discrete(6))
    params = policy.init(jax.random.PRNGKey(0))
    assert "Conv_0" in params["params"]["actor_torso"]
    assert "Conv_0" in params["params"]["critic_torso"]
    obs = jax.random.uniform(jax.random.PRNGKey(1), (2, 5, 10, 10, 4))
    dist, value = act(policy, params, obs)
    assert dist.logits.shape == (2, 5, 6)
    assert value.shape == (2, 5)


def test_mlp_torso_flattens_rank_two_observations():
    policy = make_policy(NetworkConfig(hidden_sizes=(8,)), (3, 5), spaces.Discrete(2))
    params = policy.init(jax.random.PRNGKey(0))
    assert params["params"]["actor_torso"]["Dense_0"]["kernel"].shape == (15, 8)
    dist, value = act(policy, params, jnp.ones((4, 3, 5)))
    assert dist.logits.shape == (4, 2) and value.shape == (4,)


def test_cnn_torso_on_flat_observations_is_refused():
    with pytest.raises(ValueError, match="torso"):
        make_policy(NetworkConfig(torso="cnn"), (4,), spaces.Discrete(2))


def test_orthogonal_init_scales():
    """Hidden layers orthogonal with gain sqrt(2); actor head gain 0.01; zero biases."""
    policy = make_policy(NetworkConfig(hidden_sizes=(64, 64)), (4,), spaces.Discrete(3))
    params = policy.init(jax.random.PRNGKey(0))["params"]
    for tower in ("actor_torso", "critic_torso"):
        first = np.asarray(params[tower]["Dense_0"]["kernel"])  # [4, 64]: orthonormal rows
        np.testing.assert_allclose(first @ first.T, 2.0 * np.eye(4), atol=1e-5)
        second = np.asarray(params[tower]["Dense_1"]["kernel"])  # [64, 64]
        np.testing.assert_allclose(second.T @ second, 2.0 * np.eye(64), atol=1e-4)
    head = np.asarray(params["actor_head"]["kernel"])  # [64, 3]: orthonormal columns
    np.testing.assert_allclose(head.T @ head, 1e-4 * np.eye(3), atol=1e-8)
    for leaf_path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if "bias" in jax.tree_util.keystr(leaf_path):
            np.testing.assert_array_equal(leaf, 0.0)


def test_initial_policy_is_near_uniform():
    policy = make_policy(NetworkConfig(), (4,), spaces.Discrete(3))
    params = policy.init(jax.random.PRNGKey(0))
    obs = 3.0 * jax.random.normal(jax.random.PRNGKey(1), (256, 4))
    dist, _ = act(policy, params, obs)
    probs = np.exp(np.asarray(dist.log_prob(jnp.zeros(256, jnp.int32))))
    np.testing.assert_allclose(probs, 1.0 / 3.0, atol=0.02)
    np.testing.assert_allclose(dist.entropy(), math.log(3.0), atol=1e-3)


def test_actor_and_critic_towers_are_independent():
    """Separate towers share no weights: the actor's output ignores the critic's tower and vice versa."""
    policy = make_policy(NetworkConfig(hidden_sizes=(16,)), (4,), spaces.Discrete(2))
    params = policy.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (8, 4))
    dist, value = act(policy, params, obs)

    def scaled(tower):
        changed = jax.tree.map(lambda x: x, params)
        changed["params"][tower]["Dense_0"]["kernel"] = params["params"][tower]["Dense_0"]["kernel"] * 3.0
        return act(policy, changed, obs)

    dist_c, value_c = scaled("critic_torso")
    np.testing.assert_array_equal(dist.logits, dist_c.logits)
    assert not np.allclose(value, value_c)
    dist_a, value_a = scaled("actor_torso")
    np.testing.assert_array_equal(value, value_a)
    assert not np.allclose(dist.logits, dist_a.logits)


# ----------------------------------------------------------------- one interface, carry-based

def test_feedforward_policy_has_an_empty_carry_and_replays_single_steps():
    policy = make_policy(SMALL, (4,), spaces.Discrete(3))
    params = policy.init(jax.random.PRNGKey(0))
    assert policy.initial_carry((5, 2)) == () and policy.replay_length == 1
    obs = jax.random.normal(jax.random.PRNGKey(1), (5, 2, 4))
    dist, value, carry = policy.step(params, obs, ())
    assert carry == ()
    # a feedforward unroll is the step on every (sequence, time) at once; resets change nothing
    reset = jax.random.bernoulli(jax.random.PRNGKey(2), 0.5, (5, 2))
    dist_u, value_u, carry_after = policy.unroll(params, obs, (), reset)
    np.testing.assert_array_equal(dist_u.logits, dist.logits)
    np.testing.assert_array_equal(value_u, value)
    assert carry_after == ()


@pytest.mark.float32_matmuls  # compared across two programs: full float32 matmuls on any backend
@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_recurrent_unroll_matches_stepping_through_time(core):
    """`unroll` over [N, L] sequences = `step` one time step after another, the carry reset
    where an episode starts; `carry_after` is the carry each step hands on."""
    policy = make_policy(NetworkConfig(hidden_sizes=(8,), core=core, core_size=6), (3,), spaces.Discrete(2))
    params = policy.init(jax.random.PRNGKey(0))
    assert policy.replay_length is None
    num_sequences, length = 2, 5
    obs = jax.random.normal(jax.random.PRNGKey(1), (num_sequences, length, 3))
    reset = jnp.zeros((num_sequences, length), bool).at[0, 2].set(True).at[1, 0].set(True)
    # a non-initial starting carry, so that the reset at [1, 0] matters
    carry = jax.tree.map(lambda x: x + 0.5, policy.initial_carry((num_sequences,)))
    dist, value, carry_after = policy.unroll(params, obs, carry, reset)
    assert value.shape == (num_sequences, length) and dist.logits.shape == (num_sequences, length, 2)
    for t in range(length):
        step_dist, step_value, carry = policy.step(params, obs[:, t], reset_carry(policy, carry, reset[:, t]))
        np.testing.assert_allclose(dist.logits[:, t], step_dist.logits, atol=1e-6)
        np.testing.assert_allclose(value[:, t], step_value, atol=1e-6)
        for unrolled, stepped in zip(jax.tree.leaves(carry_after), jax.tree.leaves(carry)):
            np.testing.assert_allclose(unrolled[:, t], stepped, atol=1e-6)
    # and the resets matter: without them the replay differs from the first reset on
    _, no_reset_value, _ = policy.unroll(params, obs, jax.tree.map(lambda x: x + 0.5, policy.initial_carry((2,))),
                                         jnp.zeros_like(reset))
    assert not np.allclose(no_reset_value[1], value[1], atol=1e-4)
