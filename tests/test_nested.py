"""Nested observations (Dict / Tuple spaces) and MultiDiscrete actions (#15).

The maths against NumPy (multi-categorical log-prob and entropy, per-leaf normalisation), the
spaces, the per-leaf encoders, the pytree observations through rollout, learners, evaluation and
checkpoints, and learning on probes whose answer needs both observation leaves / every sub-action.
"""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async.trainer import checkpoint
from jaxrl_async.trainer.build import build, initial_states, iteration
from jaxrl_async.config import NetworkConfig
from jaxrl_async.core.distributions import MultiCategorical
from jaxrl_async.envs import RunningMeanStd
from jaxrl_async.nets.actor_critic import make_policy
from jaxrl_async.envs.spaces import MultiDiscrete, from_gymnasium, observation_shapes
from jaxrl_async.trainer.training import train
from learning_checks import PROBE_SEEDS, learn_probe

NVEC = (2, 3, 4)
NET = NetworkConfig(hidden_sizes=(8,))


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_multi_categorical_log_prob_and_entropy_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, sum(NVEC))).astype(np.float32)
    actions = np.stack([rng.integers(0, n, size=5) for n in NVEC], axis=-1)
    parts = np.split(logits, np.cumsum(NVEC)[:-1], axis=-1)
    log_ps = [_log_softmax(p.astype(np.float64)) for p in parts]
    expected_log_prob = sum(lp[np.arange(5), actions[:, i]] for i, lp in enumerate(log_ps))
    expected_entropy = sum(-(np.exp(lp) * lp).sum(-1) for lp in log_ps)

    dist = MultiCategorical(logits=jnp.asarray(logits), nvec=NVEC)
    np.testing.assert_allclose(dist.log_prob(jnp.asarray(actions)), expected_log_prob, rtol=1e-5)
    np.testing.assert_allclose(dist.entropy(), expected_entropy, rtol=1e-5)
    np.testing.assert_array_equal(dist.mode(), np.stack([lp.argmax(-1) for lp in log_ps], axis=-1))
    samples = jax.vmap(dist.sample)(jax.random.split(jax.random.PRNGKey(0), 2000))  # [2000, 5, 3]
    assert samples.shape == (2000, 5, 3)
    # every sub-action in range, and its frequencies follow its own softmax
    for i, n in enumerate(NVEC):
        counts = np.stack([(np.asarray(samples[:, :, i]) == a).mean(0) for a in range(n)], -1)
        np.testing.assert_allclose(counts, np.exp(log_ps[i]), atol=0.05)


def test_multidiscrete_space():
    space = MultiDiscrete([2, 3])
    assert space.shape == (2,) and space.nvec == (2, 3) and repr(space) == "MultiDiscrete([2, 3])"
    samples = jax.vmap(space.sample)(jax.random.split(jax.random.PRNGKey(0), 200))
    assert samples.dtype == jnp.int32 and bool(jnp.all(jax.vmap(space.contains)(samples)))
    assert set(np.asarray(samples[:, 1]).tolist()) == {0, 1, 2}
    assert not bool(space.contains(jnp.array([0, 3])))
    with pytest.raises(ValueError, match="nvec"):
        MultiDiscrete([2, 0])


def test_observation_shapes_follow_the_space_structure():
    box = lambda *shape: spaces.Box(0.0, 1.0, shape, jnp.float32)
    assert observation_shapes(box(4)) == (4,)
    space = spaces.Dict({"a": box(2), "b": spaces.Tuple((box(3, 3, 1), spaces.Discrete(5)))})
    assert observation_shapes(space) == {"a": (2,), "b": ((3, 3, 1), ())}
    with pytest.raises(ValueError, match=r"observation space\['x'\] is .*not supported"):
        observation_shapes(spaces.Dict({"x": object()}))


def test_from_gymnasium_converts_nested_spaces():
    from gymnasium import spaces as gym_spaces

    space = from_gymnasium(gym_spaces.Dict({
        "pos": gym_spaces.Box(-1.0, 1.0, (3,)),
        "parts": gym_spaces.Tuple((gym_spaces.Discrete(4), gym_spaces.MultiDiscrete([2, 5])))}))
    assert isinstance(space, spaces.Dict) and isinstance(space.spaces["pos"], spaces.Box)
    assert space.spaces["pos"].shape == (3,) and np.all(space.spaces["pos"].low == -1.0)
    discrete, multi = space.spaces["parts"].spaces
    assert isinstance(discrete, spaces.Discrete) and discrete.n == 4
    assert isinstance(multi, MultiDiscrete) and multi.nvec == (2, 5)
    with pytest.raises(ValueError, match="Text.*not supported"):
        from_gymnasium(gym_spaces.Text(5))
    with pytest.raises(ValueError, match="starts at 1"):
        from_gymnasium(gym_spaces.Discrete(3, start=1))


def test_a_plain_box_keeps_the_one_torso_network():
    """The same module names and shapes as before nested spaces (the params are bitwise those of
    the previous main for CartPole, MinAtar, Pendulum and a GRU: checked when this landed)."""
    policy = make_policy(NET, (4,), spaces.Discrete(2))
    params = policy.init(jax.random.PRNGKey(0))["params"]
    assert jax.tree.map(jnp.shape, params) == {
        "actor_torso": {"Dense_0": {"kernel": (4, 8), "bias": (8,)}},
        "critic_torso": {"Dense_0": {"kernel": (4, 8), "bias": (8,)}},
        "actor_head": {"kernel": (8, 2), "bias": (2,)}, "critic_head": {"kernel": (8, 1), "bias": (1,)}}


DICT_SHAPES = {"image": (3, 3, 1), "vector": (2,)}


def test_one_encoder_per_leaf_and_the_output_uses_both():
    policy = make_policy(NET, DICT_SHAPES, MultiDiscrete(NVEC))
    params = policy.init(jax.random.PRNGKey(0))
    torso = params["params"]["actor_torso"]
    assert set(torso) == {"obs_image", "obs_vector"}
    assert "Conv_0" in torso["obs_image"] and "Conv_0" not in torso["obs_vector"]
    assert params["params"]["actor_head"]["kernel"].shape == (16, sum(NVEC))  # two leaves' 8 features
    obs = {"image": jnp.ones((5, 3, 3, 1)), "vector": jnp.ones((5, 2))}
    dist, value, _ = policy.step(params, obs, ())
    assert dist.logits.shape == (5, sum(NVEC)) and value.shape == (5,) and policy.action_shape == (3,)
    for leaf in DICT_SHAPES:
        changed = {**obs, leaf: -obs[leaf]}
        assert not np.allclose(policy.step(params, changed, ())[0].logits, dist.logits), leaf
        assert not np.allclose(policy.value_step(params, changed, ()), value), leaf
    mlp_only = make_policy(dataclasses.replace(NET, torso="mlp"), DICT_SHAPES, spaces.Discrete(2))
    assert "Conv_0" not in mlp_only.init(jax.random.PRNGKey(0))["params"]["actor_torso"]["obs_image"]
    with pytest.raises(ValueError, match=r"torso='cnn'.*\['vector'\]"):
        make_policy(dataclasses.replace(NET, torso="cnn"), DICT_SHAPES, spaces.Discrete(2))


def test_unsupported_action_spaces_are_named():
    with pytest.raises(ValueError, match=r"action space Tuple.*Discrete, MultiDiscrete"):
        make_policy(NET, (2,), spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))))


def test_running_statistics_per_leaf_match_numpy():
    rng = np.random.default_rng(1)
    batches = [{"a": rng.normal(size=(n, 2)), "b": (rng.normal(3.0, 2.0, size=(n, 3, 3, 1)),)} for n in (4, 7)]
    stats = RunningMeanStd.create({"a": (2,), "b": ((3, 3, 1),)})
    for batch in batches:
        stats = stats.update(jax.tree.map(jnp.asarray, batch))
    joined = jax.tree.map(lambda *x: np.concatenate(x), *batches)
    np.testing.assert_allclose(stats.mean["a"], joined["a"].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.var["b"][0], joined["b"][0].var(0), rtol=1e-4)
    assert float(stats.count) == 11
    normalised = stats.normalize(jax.tree.map(jnp.asarray, batches[0]))
    np.testing.assert_allclose(normalised["a"], (batches[0]["a"] - joined["a"].mean(0)) / np.sqrt(joined["a"].var(0) + 1e-8),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("algo, core", [("ppo", "none"), ("a2c", "none"), ("reinforce", "none"),
                                        ("impala", "none"), ("ppo", "gru")])
def test_every_on_policy_learner_takes_nested_observations(tiny_config, algo, core):
    cfg = tiny_config(env="Probe-DictObs", algo=algo, normalize_obs=algo != "impala",
                      network=dict(hidden_sizes=(8,), core=core))
    c = build(cfg)
    state = jax.tree.map(lambda x: x[0], initial_states(c))
    state, metrics = jax.jit(lambda s: iteration(c, s))(state)
    traj = c.rollout.collect(state.learner.params, state.rollout)[1]
    chex.assert_shape([traj.obs["image"], traj.next_obs["image"]], (8, 4, 3, 3, 1))
    chex.assert_shape([traj.obs["vector"], traj.next_obs["vector"]], (8, 4, 1))
    assert all(np.isfinite(float(v)) for v in jax.tree.leaves(metrics))


def test_multidiscrete_trajectory_and_a_tuple_checkpoint_round_trip(tiny_config, tmp_path):
    c = build(tiny_config(env="Probe-MultiDiscrete"))
    state = jax.tree.map(lambda x: x[0], initial_states(c))
    traj = c.rollout.collect(state.learner.params, state.rollout)[1]
    chex.assert_shape(traj.action, (8, 4, 2))
    assert traj.action.dtype == jnp.int32

    c = build(tiny_config(env="Probe-TupleObs", normalize_obs=True))
    state = initial_states(c)
    path = checkpoint.save(str(tmp_path / "ckpt"), state=state, config={}, counters={})
    restored = checkpoint.restore_state(state, checkpoint.load(path)["state"])
    assert isinstance(restored.rollout.obs, tuple) and isinstance(restored.rollout.obs_stats.mean, tuple)
    chex.assert_trees_all_equal(restored, state)


def test_dqn_encodes_each_leaf_and_replays_nested_observations(tiny_config):
    cfg = tiny_config(env="Probe-DictObs", algo="dqn").with_fields(replay_capacity=64, learning_starts=32)
    c = build(cfg)
    state = jax.tree.map(lambda x: x[0], initial_states(c))
    assert sorted(state.learner.params.network["params"]["torso"]) == ["obs_image", "obs_vector"]
    for _ in range(2):  # the second update learns from the buffer
        state, metrics = jax.jit(lambda s: iteration(c, s))(state)
    storage = state.learner.extra.buffer.storage
    chex.assert_shape([storage["obs"]["image"], storage["next_obs"]["image"]], (16, 4, 3, 3, 1))
    chex.assert_shape([storage["obs"]["vector"], storage["next_obs"]["vector"]], (16, 4, 1))
    assert float(metrics["gradient_steps"]) > 0 and np.isfinite(float(metrics["loss"]))


def test_async_lag0_equals_fused_on_a_dict_observation(tiny_config):
    fused = train(tiny_config(env="Probe-DictObs", normalize_obs=True), console=False)
    lock_step = train(tiny_config(env="Probe-DictObs", normalize_obs=True, mode="async", lag="0"), console=False)
    chex.assert_trees_all_close(lock_step.state.learner.params, fused.state.learner.params, atol=1e-6)
    assert jax.tree.structure(lock_step.state.rollout.obs) == jax.tree.structure(fused.state.rollout.obs)


# the DictObs probe's CNN leaf: its time is compiling (fast), not running
@pytest.mark.parametrize("env_id", [pytest.param("Probe-DictObs", marks=[pytest.mark.slow, pytest.mark.fast_compile]),
                                    "Probe-TupleObs", "Probe-MultiDiscrete"])
def test_ppo_learns_the_nested_probes(tiny_config, env_id):
    """Every seed's greedy return is 1: the answer needs both leaves (Dict / Tuple), every
    sub-action (MultiDiscrete); ignoring a leaf caps it at 0.5, a wrong sub-action gives 0."""
    _, _, summary = learn_probe(tiny_config, env_id)
    assert summary["final_eval_return"] == [1.0] * PROBE_SEEDS, summary["final_eval_return"]
