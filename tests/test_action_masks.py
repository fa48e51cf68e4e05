"""Action masks (#32): an observation's `action_mask` entry restricts a discrete policy.

The masked distributions' log-probabilities and entropies against hand-computed numbers;
sampling never picks an illegal action; the mask is validated against the action space, never
normalised, and not encoded; DQN's target maximises over the next observation's legal actions;
and on Probe-ActionMask, whose best-paying action is illegal, every discrete learner never takes
an illegal action and learns the best legal one (fused; PPO async too), as PPO does on a
MultiDiscrete twin of the probe.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async.algorithms.dqn import q_learning_loss
from jaxrl_async.config import NetworkConfig
from jaxrl_async.core.distributions import (Categorical, EpsilonGreedy, MultiCategorical, legal_actions,
                                            mask_scores)
from jaxrl_async.envs import RunningMeanStd, make_env, registry
from jaxrl_async.envs.probes import MASK_EPISODE_LENGTH, MASK_REWARDS, ActionMaskProbe
from jaxrl_async.envs.spaces import ACTION_MASK, MultiDiscrete, observation_shapes
from jaxrl_async.nets.actor_critic import make_policy
from jaxrl_async.nets.q import make_q_policy
from jaxrl_async.trainer.build import build
from jaxrl_async.trainer.training import train
from learning_checks import PROBE_SEEDS  # tests/learning_checks.py

pytestmark = pytest.mark.float32_matmuls

LOWEST = float(jnp.finfo(jnp.float32).min)
NET = NetworkConfig(hidden_sizes=(8,))


def _masked_reference(logits, mask):
    """NumPy float64: log-probabilities over the legal actions (-inf elsewhere) and their entropy."""
    logits, legal = np.asarray(logits, np.float64), np.asarray(mask) > 0.5
    shifted = np.where(legal, logits - logits[legal].max(), -np.inf)
    log_p = shifted - np.log(np.exp(shifted).sum())
    return log_p, -np.sum(np.exp(log_p) * np.where(legal, log_p, 0.0))


# ----------------------------------------------------------------- the masked distributions

def test_masked_categorical_by_hand():
    logits, mask = jnp.array([1.0, 2.0, 3.0, 0.5]), jnp.array([1.0, 0.0, 1.0, 1.0])
    dist = Categorical(mask_scores(logits, legal_actions(mask)))
    # the legal actions 0, 2, 3: p = e^(1, 3, 0.5) / (e + e^3 + e^0.5)
    z = np.e + np.e ** 3 + np.e ** 0.5
    probs = np.array([np.e / z, 0.0, np.e ** 3 / z, np.e ** 0.5 / z])
    log_probs = jax.vmap(dist.log_prob)(jnp.arange(4))
    np.testing.assert_allclose(np.exp(log_probs), probs, rtol=1e-6, atol=0)
    np.testing.assert_allclose(log_probs[np.array([0, 2, 3])], np.log(probs[[0, 2, 3]]), rtol=1e-6)
    legal = probs[[0, 2, 3]]
    np.testing.assert_allclose(dist.entropy(), -np.sum(legal * np.log(legal)), rtol=1e-6)
    # the illegal action: probability exactly 0, log-probability finite (the dtype's lowest number)
    assert float(jnp.exp(dist.log_prob(jnp.array(1)))) == 0.0 and float(dist.log_prob(jnp.array(1))) == LOWEST
    assert int(dist.mode()) == 2
    # the entropy's gradient is finite and reaches the legal logits only
    grad = jax.grad(lambda x: Categorical(mask_scores(x, legal_actions(mask))).entropy())(logits)
    assert np.all(np.isfinite(grad)) and float(grad[1]) == 0.0 and np.all(np.asarray(grad)[[0, 2, 3]] != 0.0)


def test_masking_the_greedy_action_moves_the_mode_and_matches_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(64, 5)).astype(np.float32)
    mask = (rng.random((64, 5)) < 0.6).astype(np.float32)
    mask[np.arange(64), logits.argmax(-1)] = 0.0  # the unmasked mode is always illegal
    mask[np.arange(64), rng.integers(0, 5, 64)] = 1.0  # and some action legal
    dist = Categorical(mask_scores(jnp.asarray(logits), legal_actions(jnp.asarray(mask))))
    log_probs = jax.vmap(dist.log_prob, out_axes=1)(jnp.tile(jnp.arange(5)[:, None], (1, 64)))  # [64, 5]
    for row in range(64):
        log_p, entropy = _masked_reference(logits[row], mask[row])
        legal = mask[row] > 0.5
        np.testing.assert_allclose(np.asarray(log_probs[row])[legal], log_p[legal], rtol=1e-5)
        np.testing.assert_allclose(dist.entropy()[row], entropy, rtol=1e-5, atol=1e-6)
        assert int(dist.mode()[row]) == int(np.argmax(np.where(legal, logits[row], -np.inf)))
    assert np.all(mask[np.arange(64), np.asarray(dist.mode())] == 1.0)


def test_sampling_never_picks_an_illegal_action():
    # the illegal action 0 has by far the largest logit; 200k draws
    logits = jnp.tile(jnp.array([30.0, 0.0, 1.0, -1.0]), (200_000, 1))
    dist = Categorical(mask_scores(logits, legal_actions(jnp.array([0.0, 1.0, 1.0, 1.0]))))
    actions = np.asarray(dist.sample(jax.random.PRNGKey(0)))
    counts = np.bincount(actions, minlength=4) / actions.size
    assert counts[0] == 0.0
    z = 1 + np.e + np.e ** -1
    np.testing.assert_allclose(counts[1:], [1 / z, np.e / z, np.e ** -1 / z], atol=0.005)


def test_legal_actions_reads_the_mask_and_a_row_with_none_is_all_legal():
    mask = jnp.array([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(legal_actions(mask), [[True, False, True], [True, True, True]])
    # MultiDiscrete [2, 3]: each sub-action on its own (the first has none legal here)
    np.testing.assert_array_equal(legal_actions(jnp.array([0.0, 0.0, 0.0, 1.0, 1.0]), (2, 3)),
                                  [True, True, False, True, True])
    np.testing.assert_array_equal(mask_scores(jnp.array([1.0, 2.0]), None), [1.0, 2.0])


def test_masked_multi_categorical_by_hand():
    nvec = (2, 3)
    logits = jnp.array([0.5, 2.0, 1.0, 3.0, 0.0])
    mask = jnp.array([1.0, 0.0, 1.0, 0.0, 1.0])  # sub-action 0 must be 0; sub-action 1 is 0 or 2
    dist = MultiCategorical(mask_scores(logits, legal_actions(mask, nvec)), nvec=nvec)
    z = np.e + 1.0
    p_second = np.array([np.e / z, 0.0, 1.0 / z])
    actions = jnp.array([[0, 0], [0, 2], [0, 1], [1, 0]])
    expected = [np.log(p_second[0]), np.log(p_second[2])]
    log_probs = jax.vmap(dist.log_prob)(actions)
    np.testing.assert_allclose(log_probs[:2], expected, rtol=1e-6)
    np.testing.assert_allclose(np.exp(log_probs[2:]), [0.0, 0.0], atol=0)
    # the first sub-action has one legal choice (entropy 0); the second two
    np.testing.assert_allclose(dist.entropy(), -np.sum(p_second[[0, 2]] * np.log(p_second[[0, 2]])), rtol=1e-6)
    np.testing.assert_array_equal(dist.mode(), [0, 0])
    samples = np.asarray(MultiCategorical(jnp.tile(dist.logits, (50_000, 1)), nvec=nvec).sample(jax.random.PRNGKey(1)))
    assert np.all(samples[:, 0] == 0) and not np.any(samples[:, 1] == 1)
    np.testing.assert_allclose(np.mean(samples[:, 1] == 0), p_second[0], atol=0.01)


def test_masked_epsilon_greedy_by_hand():
    q = jnp.tile(jnp.array([5.0, 3.0, 1.0, 2.0]), (100_000, 1))
    legal = legal_actions(jnp.array([0.0, 1.0, 0.0, 1.0]))  # the best, 0, is illegal
    dist = EpsilonGreedy(q, jnp.float32(0.2), jnp.broadcast_to(legal, q.shape))
    # greedy among the legal: 1; random among the legal: 1 or 3, 0.1 each
    expected = np.array([0.0, 0.9, 0.0, 0.1])
    actions = np.asarray(dist.sample(jax.random.PRNGKey(0)))
    np.testing.assert_allclose(np.bincount(actions, minlength=4) / actions.size, expected, atol=0.005)
    assert not np.any(np.isin(actions, [0, 2]))
    assert np.all(np.asarray(dist.mode()) == 1)
    one = EpsilonGreedy(q[:4], jnp.float32(0.2), jnp.broadcast_to(legal, (4, 4)))
    np.testing.assert_allclose(np.exp(one.log_prob(jnp.arange(4))), expected, rtol=1e-6)  # action i at state i
    np.testing.assert_allclose(one.entropy(), -(0.9 * np.log(0.9) + 0.1 * np.log(0.1)), rtol=1e-6)
    # every action random (epsilon 1): uniform over the legal ones
    uniform = np.asarray(EpsilonGreedy(q, jnp.float32(1.0), jnp.broadcast_to(legal, q.shape)).sample(
        jax.random.PRNGKey(1)))
    np.testing.assert_allclose(np.bincount(uniform, minlength=4) / uniform.size, [0, 0.5, 0, 0.5], atol=0.005)


def test_masked_epsilon_greedy_draws_from_shapes_alone():
    """A host actor draws before it knows the step's parameters (the mask among them)."""
    dist = EpsilonGreedy(jnp.array([[5.0, 3.0, 1.0]] * 3), jnp.float32(0.5),
                         jnp.array([[False, True, True], [True, False, False], [False, False, True]]))
    key = jax.random.PRNGKey(3)
    from_shapes = jax.eval_shape(lambda: dist).draw(key)
    np.testing.assert_array_equal(dist.sample_from_draw(from_shapes), dist.sample(key))
    samples = np.asarray(jax.vmap(lambda k: dist.sample(k))(jax.random.split(key, 500)))
    assert np.all(samples[:, 1] == 0) and np.all(samples[:, 2] == 2) and set(np.unique(samples[:, 0])) == {1, 2}


# ----------------------------------------------------------------- the policies

def _mask_space(n=3, action_space=None):
    return {"observation": (1,), ACTION_MASK: (n,)}, action_space or spaces.Discrete(n)


def test_the_policy_masks_its_distribution_and_does_not_encode_the_mask():
    obs_shape, action_space = _mask_space()
    policy = make_policy(NET, obs_shape, action_space)
    plain = make_policy(NET, {"observation": (1,)}, action_space)
    params = policy.init(jax.random.PRNGKey(0))
    # the encoders see the observation without its mask: the same network as without one
    assert jax.tree.map(jnp.shape, params) == jax.tree.map(jnp.shape, plain.init(jax.random.PRNGKey(0)))
    obs = {"observation": jnp.array([[0.3], [0.3]]), ACTION_MASK: jnp.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])}
    dist, value, _ = policy.step(params, obs, ())
    unmasked, plain_value, _ = plain.step(params, {"observation": obs["observation"]}, ())
    np.testing.assert_array_equal(dist.logits[0], unmasked.logits[0])
    np.testing.assert_array_equal(dist.logits[1], [LOWEST, unmasked.logits[1, 1], LOWEST])
    np.testing.assert_array_equal(value, plain_value)
    assert int(dist.sample(jax.random.PRNGKey(1))[1]) == 1 and float(dist.entropy()[1]) == 0.0


@pytest.mark.parametrize("core", ["none", "gru"])
def test_the_multidiscrete_policy_masks_each_sub_action(core):
    obs_shape, action_space = _mask_space(5, MultiDiscrete([2, 3]))
    policy = make_policy(NetworkConfig(hidden_sizes=(8,), core=core), obs_shape, action_space)
    params = policy.init(jax.random.PRNGKey(0))
    mask = jnp.tile(jnp.array([0.0, 1.0, 1.0, 0.0, 1.0]), (2000, 1))
    dist, _, _ = policy.step(params, {"observation": jnp.zeros((2000, 1)), ACTION_MASK: mask},
                             policy.initial_carry((2000,)))
    actions = np.asarray(dist.sample(jax.random.PRNGKey(2)))
    assert np.all(actions[:, 0] == 1) and not np.any(actions[:, 1] == 1)
    assert set(np.unique(actions[:, 1])) == {0, 2}


def test_the_q_policy_acts_among_the_legal_actions():
    obs_shape, action_space = _mask_space()
    policy, q_values = make_q_policy(NET, obs_shape, action_space)
    params = policy.init(jax.random.PRNGKey(0)).replace(epsilon=jnp.float32(1.0))
    obs = {"observation": jnp.zeros((3000, 1)), ACTION_MASK: jnp.tile(jnp.array([0.0, 1.0, 1.0]), (3000, 1))}
    dist, value, _ = policy.step(params, obs, ())
    q = np.asarray(q_values(params.network, obs))
    np.testing.assert_allclose(value, q[:, 1:].max(-1))
    assert set(np.unique(np.asarray(dist.sample(jax.random.PRNGKey(0))))) == {1, 2}
    np.testing.assert_array_equal(dist.mode(), 1 + q[:, 1:].argmax(-1))


@pytest.mark.parametrize("obs_shape, action_space, message", [
    ({"observation": (1,), ACTION_MASK: (4,)}, spaces.Discrete(3), r"shape \(4,\).*needs \(3,\)"),
    ({"observation": (1,), ACTION_MASK: (2, 3)}, MultiDiscrete([2, 3]), r"needs \(5,\)"),
    ({"observation": (1,), ACTION_MASK: (2,)}, spaces.Box(-1.0, 1.0, (2,)), "is not discrete"),
    ({ACTION_MASK: (3,)}, spaces.Discrete(3), "at least one other entry"),
])
def test_a_mask_that_does_not_fit_is_refused(obs_shape, action_space, message):
    with pytest.raises(ValueError, match=message):
        make_policy(NET, obs_shape, action_space)
    if isinstance(action_space, spaces.Discrete):
        with pytest.raises(ValueError, match=message):
            make_q_policy(NET, obs_shape, action_space)


def test_normalisation_leaves_the_mask_alone():
    shape = {"observation": (2,), ACTION_MASK: (3,)}
    batch = {"observation": jnp.array([[1.0, 10.0], [3.0, 30.0]]), ACTION_MASK: jnp.array([[0.0, 1.0, 1.0],
                                                                                          [1.0, 0.0, 1.0]])}
    stats = RunningMeanStd.create(shape).update(batch)
    np.testing.assert_array_equal(stats.mean[ACTION_MASK], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(stats.var[ACTION_MASK], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(stats.mean["observation"], [2.0, 20.0])
    normalized = stats.normalize(batch)
    np.testing.assert_array_equal(normalized[ACTION_MASK], batch[ACTION_MASK])
    np.testing.assert_allclose(normalized["observation"], [[-1.0, -1.0], [1.0, 1.0]], rtol=1e-6)


# ----------------------------------------------------------------- DQN's target

def table_q(network, obs):
    """A tabular 'network': Q(s, a) = network[s, a], the state in obs["observation"]."""
    return network[obs["observation"][:, 0].astype(jnp.int32)]


@pytest.mark.parametrize("double_q, expected_next", [
    (True, 2.0),  # online's best legal next action is 2 (its best, 0, is illegal); target values it 2
    (False, 4.0),  # the target's best legal next action is 1 (its best, 0, is illegal)
])
def test_the_dqn_target_ignores_illegal_next_actions(double_q, expected_next):
    online = jnp.array([[1.0, 2.0, 0.0], [9.0, 1.0, 3.0]])
    target = jnp.array([[0.0, 0.0, 0.0], [50.0, 4.0, 2.0]])
    batch = dict(obs={"observation": jnp.array([[0.0]]), ACTION_MASK: jnp.array([[1.0, 1.0, 1.0]])},
                 action=jnp.array([1]), n_step_return=jnp.array([0.5]), discount=jnp.array([0.9]),
                 bootstrap_obs={"observation": jnp.array([[1.0]]), ACTION_MASK: jnp.array([[0.0, 1.0, 1.0]])})
    loss, metrics = q_learning_loss(table_q, online, target, batch, double_q, huber_delta=100.0)
    td = 0.5 + 0.9 * expected_next - 2.0  # y - Q(0, 1)
    np.testing.assert_allclose(loss, 0.5 * td ** 2, rtol=1e-6)
    np.testing.assert_allclose(metrics["td_abs_mean"], abs(td), rtol=1e-6)


# ----------------------------------------------------------------- the probe

def test_the_probe_steps_as_stated():
    env = ActionMaskProbe()
    params = env.default_params
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    masks = []
    key = jax.random.PRNGKey(1)
    for step in range(400):
        key, step_key = jax.random.split(key)
        mask = np.asarray(obs[ACTION_MASK])
        masks.append(mask)
        assert mask[0] == 0.0 and mask[2] == 1.0 and mask[1] in (0.0, 1.0)
        action = [2, 1, 0][step % 3]
        time = float(obs["observation"][0]) * MASK_EPISODE_LENGTH
        obs, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
        assert float(reward) == MASK_REWARDS[action] and not bool(truncated)
        # an illegal action ends the episode at once; legal ones at the episode's length
        assert bool(terminated) == (mask[action] == 0.0 or time + 1 == MASK_EPISODE_LENGTH)
    # action 1 is legal about half the time, drawn afresh every step
    assert 0.4 < np.mean([m[1] for m in masks]) < 0.6


LEARNERS = ("ppo", "a2c", "reinforce", "impala", "dqn", "pqn")
# the probe's two steps, each with action 1 legal and not
PROBE_OBS = {"observation": jnp.array([[0.0], [0.5], [0.0], [0.5]]),
             ACTION_MASK: jnp.array([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])}


def _probe_config(tiny_config, algo, **overrides):
    """About 3.8k steps per seed, 4 seeds vmapped, a 16-unit network (`learning_checks.learn_probe`'s)."""
    fields = dict(env="Probe-ActionMask", algo=algo, num_envs=8, num_steps=8, total_timesteps=64 * 60,
                  num_seeds=PROBE_SEEDS, devices=1, iterations_per_call="all", eval_episodes=8)
    cfg = tiny_config(**{**fields, **overrides},
                      learner=dict(update_epochs=4, num_minibatches=2, learning_rate=1e-2))
    if algo == "dqn":  # test_dqn.py's probe settings
        cfg = cfg.with_fields(replay_capacity=2048, learning_starts=256, replay_ratio=4, replay_batch_size=64,
                              target_update_period=20, epsilon_decay_fraction=0.3, learning_rate=3e-3,
                              max_grad_norm=10.0)
    return cfg


def _episode_lengths(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["episode_length_mean"] for line in f]


def _assert_no_illegal_action_was_taken(cfg):
    """An illegal action ends the probe's episode early: every episode of the run (every line of
    metrics.jsonl, the seeds together) lasting the full length means none was taken."""
    lengths = _episode_lengths(cfg.run_dir)
    assert lengths and all(length == MASK_EPISODE_LENGTH for length in lengths), lengths


def _assert_the_best_legal_action_is_learned(cfg, params):
    policy = build(cfg).policy
    dist = jax.vmap(lambda p: policy.step(p, PROBE_OBS, policy.initial_carry((4,)))[0])(params)
    # [S, 3 actions, 4 observations]
    probs = np.exp(np.asarray(jax.vmap(lambda d: jnp.stack([d.log_prob(jnp.full((4,), a)) for a in range(3)]))(dist)))
    assert np.all(probs[:, 0] == 0.0)  # the illegal action: never
    np.testing.assert_allclose(probs[:, 2, 2:], 1.0, rtol=1e-6)  # the only legal action
    np.testing.assert_array_equal(np.asarray(dist.mode()), np.tile([1, 1, 2, 2], (PROBE_SEEDS, 1)))
    if cfg.algo != "dqn":  # a policy gradient's own probability; DQN acts epsilon-greedily by design
        assert np.all(probs[:, 1, :2] > 0.9), probs[:, 1, :2]


@pytest.mark.parametrize("algo", LEARNERS)
def test_every_learner_keeps_to_the_legal_actions_and_learns_the_best(tiny_config, algo):
    cfg = _probe_config(tiny_config, algo)
    result = train(cfg, console=False)
    _assert_no_illegal_action_was_taken(cfg)
    _assert_the_best_legal_action_is_learned(cfg, result.state.learner.params)


def test_the_async_mode_keeps_to_the_legal_actions_with_normalised_observations(tiny_config):
    """`--normalize-obs` too: its statistics must leave the mask as it is (the policy reads 0s and 1s)."""
    cfg = _probe_config(tiny_config, "ppo", mode="async", lag="1", iterations_per_call=10, eval_interval=0,
                        checkpoint_interval=0, normalize_obs=True)
    result = train(cfg, console=False)
    assert len(_episode_lengths(cfg.run_dir)) > 1
    _assert_no_illegal_action_was_taken(cfg)
    _assert_the_best_legal_action_is_learned(cfg, result.state.learner.params)


class MultiDiscreteMaskProbe(ActionMaskProbe):
    """Two of Probe-ActionMask's games side by side: a MultiDiscrete([3, 3]) action, the mask
    `[6]` the two games' masks, the reward their sum; an illegal sub-action ends the episode."""

    env_id = "Test-MultiDiscreteActionMask"

    def action_space(self, params=None):
        return MultiDiscrete([3, 3])

    def observation_space(self, params=None):
        return spaces.Dict({"observation": spaces.Box(0.0, 1.0, (1,), jnp.float32),
                            ACTION_MASK: spaces.Box(0.0, 1.0, (6,), jnp.float32)})

    @staticmethod
    def draw_mask(key):
        return jnp.concatenate([ActionMaskProbe.draw_mask(k) for k in jax.random.split(key)])

    def is_illegal(self, mask, action):
        return (mask[action[0]] < 0.5) | (mask[3 + action[1]] < 0.5)

    def reward(self, state, action, params):
        return jnp.sum(jnp.asarray(MASK_REWARDS, jnp.float32)[jnp.asarray(action, jnp.int32)])


def test_ppo_keeps_to_a_multidiscrete_mask(tiny_config, monkeypatch):
    monkeypatch.setitem(registry._USER_FACTORIES, MultiDiscreteMaskProbe.env_id, MultiDiscreteMaskProbe)
    env, params = make_env(MultiDiscreteMaskProbe.env_id)
    assert observation_shapes(env.observation_space(params))[ACTION_MASK] == (6,)
    cfg = _probe_config(tiny_config, "ppo", env=MultiDiscreteMaskProbe.env_id)
    result = train(cfg, console=False)
    _assert_no_illegal_action_was_taken(cfg)
    policy = build(cfg).policy
    obs = {"observation": jnp.zeros((4, 1)),
           ACTION_MASK: jnp.array([[0.0, 1.0, 1.0] * 2, [0.0, 0.0, 1.0] * 2, [0.0, 1.0, 1.0, 0.0, 0.0, 1.0],
                                   [0.0, 0.0, 1.0, 0.0, 1.0, 1.0]])}
    modes = jax.vmap(lambda p: policy.step(p, obs, ())[0].mode())(result.state.learner.params)
    np.testing.assert_array_equal(modes, np.tile([[1, 1], [2, 2], [1, 2], [2, 1]], (PROBE_SEEDS, 1, 1)))
