"""Tests for jaxrl_async.core.distributions, jaxrl_async.nets.actor_critic and its initialiser.

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
from jaxrl_async.core.distributions import (Categorical, DiagGaussian, EpsilonGreedy, MultiCategorical,
                                            TanhGaussian, pick)
from jaxrl_async.nets.actor_critic import STRIDED_CONVS, conv_layers, make_policy, reset_carry
from jaxrl_async.nets.box_policy import UnitBox
from jaxrl_async.nets.orthogonal import orthogonal
from jaxrl_async.nets.sac import SquashedGaussian
from jaxrl_async.nets.twin_critic import make_twin_critic

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


# ----------------------------------------------------------------- TanhGaussian

TANH_MEAN = np.array([[0.3, -1.2], [2.0, 0.0], [-9.5, 12.0]], np.float64)
TANH_STD = np.array([[0.5, 1.5], [0.1, 0.7], [0.05, 1.0]], np.float64)


def _squashed_log_density_np(u, mean, std):
    """log density of a = tanh(u), u ~ N(mean, std^2), at a, summed over the last axis: the Gaussian's
    log density at u minus log |da/du| = log(1 - tanh(u)^2), in float64 (written via cosh, which
    stays exact where 1 - tanh(u)^2 rounds to 0: log(1 - tanh^2) = -2 log cosh u)."""
    log_cosh = np.abs(u) + np.log1p(np.exp(-2.0 * np.abs(u))) - np.log(2.0)
    gauss = -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2.0 * np.pi)
    return np.sum(gauss + 2.0 * log_cosh, axis=-1)


@pytest.mark.parametrize("jit", [True, False])
def test_tanh_gaussian_log_prob_is_the_squashed_density_with_the_jacobian(jit):
    u = np.array([[0.0, -2.0], [2.3, 0.4], [-9.0, 15.0]], np.float64)  # the last row: tanh(u) rounds to +-1
    log_prob = lambda m, s, a: TanhGaussian(m, s).log_prob(a)  # noqa: E731
    got = (jax.jit(log_prob) if jit else log_prob)(TANH_MEAN.astype(np.float32), TANH_STD.astype(np.float32),
                                                    u.astype(np.float32))
    np.testing.assert_allclose(got, _squashed_log_density_np(u, TANH_MEAN, TANH_STD), rtol=1e-5, atol=1e-4)
    # the Jacobian is there: the squashed density is the Gaussian's times 1 / (1 - tanh(u)^2) > 1
    unsquashed = DiagGaussian(jnp.asarray(TANH_MEAN, jnp.float32), jnp.log(jnp.asarray(TANH_STD, jnp.float32)))
    assert np.all(np.asarray(got) > np.asarray(unsquashed.log_prob(jnp.asarray(u, jnp.float32))))


def test_tanh_gaussian_density_integrates_to_one_over_the_squashed_actions():
    """The density of a in (-1, 1) (one dimension, numerically integrated in a) is a density."""
    a = np.linspace(-1 + 1e-7, 1 - 1e-7, 400_001)
    for mean, std in [(0.3, 0.5), (-1.2, 1.5), (2.0, 0.1)]:
        u = np.arctanh(a)
        density = np.exp(np.asarray(TanhGaussian(jnp.full((a.size, 1), mean), jnp.full((a.size, 1), std)).log_prob(
            jnp.asarray(u[:, None], jnp.float32)), np.float64))
        assert abs(np.trapezoid(density, a) - 1.0) < 2e-3


def test_tanh_gaussian_entropy_matches_a_monte_carlo_estimate():
    """H[tanh(u)] = E[-log pi(tanh u)], u ~ N(mean, std^2): 10^6 draws in float64 with NumPy; the
    quadrature is within 3 standard errors (and 0.01 nats) of it for stds up to 1.5."""
    draws = 1_000_000
    rng = np.random.default_rng(0)
    u = TANH_MEAN + TANH_STD * rng.standard_normal((draws,) + TANH_MEAN.shape)
    neg_log_prob = -_squashed_log_density_np(u, TANH_MEAN, TANH_STD)
    monte_carlo, standard_error = neg_log_prob.mean(0), neg_log_prob.std(0) / math.sqrt(draws)
    got = np.asarray(TanhGaussian(jnp.asarray(TANH_MEAN, jnp.float32), jnp.asarray(TANH_STD, jnp.float32)).entropy())
    assert np.all(np.abs(got - monte_carlo) < np.maximum(3 * standard_error, 2e-3)), (got, monte_carlo)
    assert np.all(np.abs(got - monte_carlo) < 0.01)
    # and it is not the unsquashed Gaussian's: the tanh's log-det lowers it
    gaussian = np.sum(np.log(TANH_STD) + 0.5 * (1 + math.log(2 * math.pi)), axis=-1)
    assert np.all(got < gaussian - 0.05)


def test_tanh_gaussian_samples_mode_and_noise():
    num_samples = 40_000
    dist = TanhGaussian(jnp.broadcast_to(jnp.array([1.0, -3.0]), (num_samples, 2)),
                        jnp.broadcast_to(jnp.array([0.5, 2.0]), (num_samples, 2)))
    samples = np.asarray(dist.sample(jax.random.PRNGKey(0)))  # unsquashed: the Gaussian's own draws
    np.testing.assert_allclose(samples.mean(0), [1.0, -3.0], atol=0.05)
    np.testing.assert_allclose(samples.std(0), [0.5, 2.0], rtol=0.03)
    np.testing.assert_array_equal(dist.mode(), dist.mean)
    noise = jax.random.normal(jax.random.PRNGKey(1), (num_samples, 2))
    np.testing.assert_allclose(dist.sample_from_noise(noise), dist.mean + dist.std * noise, rtol=1e-6)


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
    "tanh-gaussian": TanhGaussian(jnp.ones((3, 2)), jnp.full((3, 2), 0.5)),
    "squashed-gaussian": SquashedGaussian(jnp.ones((3, 2)), jnp.zeros((3, 2)),
                                          UnitBox(jnp.array([-2.0, 0.0]), jnp.array([2.0, 1.0]), jnp.array(False))),
    "squashed-gaussian-warm-up": SquashedGaussian(jnp.ones((3, 2)), jnp.zeros((3, 2)),
                                                  UnitBox(jnp.array([-2.0, 0.0]), jnp.array([2.0, 1.0]),
                                                          jnp.array(True))),
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


def test_tanh_gaussian_policy_has_a_state_dependent_floored_std():
    cfg = NetworkConfig(hidden_sizes=(32, 32), action_dist="tanh_gaussian", min_std=0.01)
    policy = make_policy(cfg, (3,), spaces.Box(-2.0, 2.0, (2,), jnp.float32))
    params = policy.init(jax.random.PRNGKey(0))
    assert "log_std" not in params["params"]
    assert params["params"]["actor_head"]["kernel"].shape == (32, 4)  # the mean and the std's input
    obs = jax.random.normal(jax.random.PRNGKey(1), (7, 3))
    dist, value = act(policy, params, obs)
    assert isinstance(dist, TanhGaussian) and dist.mean.shape == dist.std.shape == (7, 2) and value.shape == (7,)
    # std = softplus(head) + min_std: about softplus(0) + 0.01 at the small head init, and it varies with the state
    np.testing.assert_allclose(dist.std, math.log(2.0) + 0.01, atol=0.05)
    assert len(np.unique(np.asarray(dist.std))) > 1
    bigger = jax.tree.map(lambda x: x, params)
    bigger["params"]["actor_head"]["bias"] = bigger["params"]["actor_head"]["bias"].at[2:].set(-30.0)
    np.testing.assert_allclose(act(policy, bigger, obs)[0].std, 0.01, rtol=1e-4)  # floored at min_std
    with pytest.raises(ValueError, match="action_dist='tanh_gaussian' is a distribution over Box actions"):
        make_policy(cfg, (3,), spaces.Discrete(2))


def test_actor_and_critic_towers_take_their_own_widths():
    cfg = NetworkConfig(hidden_sizes=(8,), policy_hidden_sizes=(32, 32, 32, 32), value_hidden_sizes=(64, 64, 64))
    policy = make_policy(cfg, (3,), spaces.Box(-1.0, 1.0, (2,), jnp.float32))
    params = policy.init(jax.random.PRNGKey(0))["params"]
    widths = lambda tower: [params[tower][f"Dense_{i}"]["kernel"].shape[1] for i in range(len(params[tower]))]  # noqa: E731
    assert widths("actor_torso") == [32, 32, 32, 32] and widths("critic_torso") == [64, 64, 64]
    plain = make_policy(NetworkConfig(hidden_sizes=(8,)), (3,), spaces.Discrete(2)).init(jax.random.PRNGKey(0))
    assert [plain["params"][t]["Dense_0"]["kernel"].shape[1] for t in ("actor_torso", "critic_torso")] == [8, 8]


def test_each_tower_sees_its_own_observation_entry():
    """Playground's asymmetric actor-critic: the actor sees `state` alone, the critic
    `privileged_state` alone, each through one MLP on its entry (Brax's policy_obs_key / value_obs_key)."""
    obs_shape = {"state": (3,), "privileged_state": (2, 2)}
    cfg = NetworkConfig(hidden_sizes=(8,), policy_obs_key="state", value_obs_key="privileged_state")
    policy = make_policy(cfg, obs_shape, spaces.Box(-1.0, 1.0, (2,), jnp.float32))
    params = policy.init(jax.random.PRNGKey(0))
    # one Dense per tower on its entry's flat features, not an encoder per entry
    assert params["params"]["actor_torso"]["Dense_0"]["kernel"].shape == (3, 8)
    assert params["params"]["critic_torso"]["Dense_0"]["kernel"].shape == (4, 8)
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    obs = {"state": jax.random.normal(keys[0], (5, 3)), "privileged_state": jax.random.normal(keys[1], (5, 2, 2))}
    act_on = lambda o: policy.step(params, o, ())[:2]  # noqa: E731  (a feedforward policy: no carry)
    dist, value = act_on(obs)
    other_state = {**obs, "state": jax.random.normal(keys[2], (5, 3))}
    other_privileged = {**obs, "privileged_state": jax.random.normal(keys[3], (5, 2, 2))}
    np.testing.assert_array_equal(act_on(other_state)[1], value)  # the critic ignores `state`
    assert not np.allclose(act_on(other_state)[0].mean, dist.mean)
    np.testing.assert_array_equal(act_on(other_privileged)[0].mean, dist.mean)  # and the actor the rest
    assert not np.allclose(act_on(other_privileged)[1], value)
    with pytest.raises(ValueError, match=r"value_obs_key='privileged' is not an array entry of this env's "
                                         r"observation: choose one of \['privileged_state', 'state'\]"):
        make_policy(NetworkConfig(policy_obs_key="state", value_obs_key="privileged"), obs_shape,
                    spaces.Box(-1.0, 1.0, (2,), jnp.float32))
    with pytest.raises(ValueError, match="pick entries of a dict observation"):
        make_policy(cfg, (3,), spaces.Discrete(2))


@pytest.mark.parametrize("fields, message", [
    (dict(policy_hidden_sizes=(0,)), "policy_hidden_sizes=\\(0,\\) is invalid"),
    (dict(value_hidden_sizes=(32,), core="gru"), "shares one torso"),
    (dict(policy_obs_key="state"), "policy_obs_key='state' is invalid: set it with value_obs_key"),
    (dict(policy_obs_key="state", value_obs_key="privileged_state", core="lstm"), "shares one torso"),
    (dict(action_dist="beta"), "action_dist='beta' is invalid"),
    (dict(min_std=0.0), "min_std=0.0 is invalid"),
])
def test_network_options_refuse_bad_values(fields, message):
    with pytest.raises(ValueError, match=message):
        NetworkConfig(**fields)


def test_cnn_policy_on_minatar_shaped_images():
    policy = make_policy(NetworkConfig(hidden_sizes=(32,)), (10, 10, 4), spaces.Discrete(6))
    params = policy.init(jax.random.PRNGKey(0))
    assert "Conv_0" in params["params"]["actor_torso"]
    assert "Conv_0" in params["params"]["critic_torso"]
    obs = jax.random.uniform(jax.random.PRNGKey(1), (2, 5, 10, 10, 4))
    dist, value = act(policy, params, obs)
    assert dist.logits.shape == (2, 5, 6)
    assert value.shape == (2, 5)


def test_cnn_torso_takes_dqns_strided_convs_from_36_pixels_a_side():
    # one 3x3 conv keeps every pixel: on an 84x84 frame its flattened features would be 112,896
    policy = make_policy(NetworkConfig(hidden_sizes=(32,)), (84, 84, 4), spaces.Discrete(6))
    torso = policy.init(jax.random.PRNGKey(0))["params"]["actor_torso"]
    assert [torso[f"Conv_{i}"]["kernel"].shape for i in range(3)] == [(8, 8, 4, 32), (4, 4, 32, 64),
                                                                      (3, 3, 64, 64)]
    assert torso["MLPTorso_0"]["Dense_0"]["kernel"].shape == (7 * 7 * 64, 32)  # 84 -> 20 -> 9 -> 7, as Mnih et al.'s
    assert conv_layers((36, 50, 3)) == STRIDED_CONVS and conv_layers((35, 84, 3)) == ((16, 3, 1),)
    small = make_policy(NetworkConfig(hidden_sizes=(32,)), (35, 35, 3), spaces.Discrete(2))
    assert small.init(jax.random.PRNGKey(0))["params"]["actor_torso"]["MLPTorso_0"]["Dense_0"]["kernel"].shape == (35 * 35 * 16, 32)


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


def _lapack_qr_operands(lowered_text: str) -> list[str]:
    """The operand type of every LAPACK QR call in a lowered program, e.g. `tensor<2x64x64xf32>`."""
    return [line.rsplit(": (", 1)[1].split(")", 1)[0] for line in lowered_text.splitlines() if "geqrf" in line]


def test_orthogonal_init_is_jaxs_to_the_bit_with_one_matrix_per_qr_under_vmap():
    """Our initialiser gives jax's values (alone and vmapped) but never a batched QR: a batched one
    can hang XLA:CPU's thread pool (nets/orthogonal.py). Checked on the twin critics, whose
    `nn.vmap` batched every layer's QR, vmapped over seeds as well."""
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    for shape, scale in [((23, 256), math.sqrt(2.0)), ((256, 1), 1.0), ((3, 3, 4, 16), 0.01), ((4, 300), 1.0)]:
        ours = jax.jit(jax.vmap(lambda k: orthogonal(scale)(k, shape)))(keys)
        jaxs = jax.jit(jax.vmap(lambda k: jax.nn.initializers.orthogonal(scale)(k, shape)))(keys)
        np.testing.assert_array_equal(ours, jaxs)
        np.testing.assert_array_equal(ours[1], jax.jit(lambda k: orthogonal(scale)(k, shape))(keys[1]))
    _, init_critic = make_twin_critic(NetworkConfig(hidden_sizes=(64, 64)), (17,), 6)
    ours = _lapack_qr_operands(jax.jit(jax.vmap(init_critic)).lower(keys).as_text())
    assert len(ours) == 3 and all(operand.count("x") == 2 for operand in ours), ours  # [rows, cols] each
    jaxs = _lapack_qr_operands(jax.jit(jax.vmap(lambda k: jax.nn.initializers.orthogonal()(k, (64, 64))))
                               .lower(keys).as_text())
    assert jaxs == ["tensor<2x64x64xf32>"]  # what the check above would see of a batched QR


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
