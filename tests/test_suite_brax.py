"""The Brax adapter (`--env brax:ID`, envs/suites/brax.py) against Brax's own step, and runs through it.

Brax's physics takes seconds to compile, so the semantics are checked where they live: the
termination on `inverted_pendulum` (each adapter step and Brax's step of the same state in one
jitted program), the time limit and the auto-reset on Brax's trivial `fast` env, whose dynamics
are computed here by hand. The learners run on `fast` (a dict observation among them); a fused
run, its resume and the learning check on `inverted_pendulum`.
"""

from __future__ import annotations

import dataclasses

import brax.envs
from brax.envs.base import State as BraxState
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.envs import make_env
from jaxrl_async.envs.wrappers import max_truncations
from jaxrl_async.envs.suites import make_suite_env, suite_env_ids
from jaxrl_async.envs.suites.brax_api import BraxApiEnv
from jaxrl_async.envs.suites.functional import SuiteState
from jaxrl_async.trainer.training import train

PENDULUM = "brax:inverted_pendulum"
BACKEND = "spring"  # its inverted_pendulum step compiles fastest of Brax's four backends here
FAST_DT = 0.02  # Brax's `fast` env: vel += dt * (action > 0); pos += dt * vel; reward = pos


def small(run_dir, **overrides) -> TrainConfig:
    network = NetworkConfig(hidden_sizes=(16,))
    learner = LearnerConfig(update_epochs=1, num_minibatches=2, **overrides.pop("learner", {}))
    fields = dict(env="brax:fast", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, eval_episodes=2,
                  eval_interval=0, env_kwargs=("episode_length=20",), run_dir=str(run_dir))
    fields.update(overrides)
    return TrainConfig(**fields, network=network, learner=learner)


# ------------------------------------------------------------------ ids and bad input


def test_ids_come_from_brax_registry():
    ids = suite_env_ids("brax")
    assert ids == sorted(f"brax:{name}" for name in brax.envs._envs)
    assert {"brax:ant", "brax:inverted_pendulum", "brax:humanoid"} <= set(ids)


@pytest.mark.parametrize("kwargs, message", [
    (dict(backend="physx"), "backend='physx' is not one of Brax's backends"),
    (dict(episode_length=0), "episode_length=0 for brax:fast must be an int >= 1"),
    (dict(auto_reset="sometimes"), "auto_reset='sometimes' must be 'full'"),
])
def test_bad_keywords_name_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_suite_env("brax:fast", **kwargs)


def test_unknown_constructor_keyword_is_named():
    with pytest.raises(ValueError, match=r"brax:inverted_pendulum does not take the keyword arguments \['gravity'\]"):
        make_suite_env(PENDULUM, gravity=3)


def test_swimmer_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"jnp.clip\(a_min=...\), which jax 0.10 removed"):
        make_suite_env("brax:swimmer")


def test_spaces():
    env = make_suite_env(PENDULUM, backend=BACKEND)
    action = env.action_space()
    assert isinstance(action, spaces.Box) and action.shape == (1,)
    assert float(action.low) == -1.0 and float(action.high) == 1.0
    assert env.observation_space().shape == (4,)
    assert env.default_params.max_steps_in_episode == 1000  # Brax's trainers' episode_length
    nested = make_suite_env("brax:fast", obs_mode="dict_state", asymmetric_obs=True).observation_space()
    assert isinstance(nested, spaces.Dict)
    assert {k: s.shape for k, s in nested.spaces.items()} == {"state": (2,), "privileged_state": (4,)}


# ------------------------------------------------------------------ termination against Brax's step


@pytest.fixture(scope="module")
def pendulum():
    """The adapter's reset and step, and Brax's own step of the same inner state, jitted together;
    the adapter's reset and Brax's of the same key, jitted together (one program, not two)."""
    env = make_suite_env(PENDULUM, backend=BACKEND)
    suite = env.unwrapped_suite_env

    @jax.jit
    def step_both(key, state, action):
        return env.step(key, state, action), suite.step(env.suite_state(state.inner), action)

    @jax.jit
    def reset_both(key):
        return env.reset(key), suite.reset(key)

    return env, suite, lambda key: reset_both(key)[0], step_both, lambda key: reset_both(key)[1]


def test_termination_follows_brax_done_step_by_step(pendulum):
    env, suite, reset, step_both, suite_reset = pendulum
    key = jax.random.PRNGKey(3)
    obs, state = reset(key)
    np.testing.assert_array_equal(obs, suite_reset(key).obs)  # Brax's reset with the same key
    push = jnp.ones(1)  # full force one way: the pole falls past Brax's 0.2 rad
    for t in range(1, 200):
        step_key = jax.random.fold_in(key, t)
        (obs, next_state, reward, terminated, truncated, info), theirs = step_both(step_key, state, push)
        assert float(reward) == float(theirs.reward) == 1.0  # Brax pays 1 for every step, the last too
        np.testing.assert_array_equal(info["final_observation"], theirs.obs)
        assert bool(terminated) == bool(theirs.done) == bool(abs(float(theirs.obs[1])) > 0.2)
        assert not bool(truncated)
        if terminated:
            break
        np.testing.assert_array_equal(obs, theirs.obs)
        for ours_leaf, their_leaf in zip(next_state.inner, jax.tree.leaves(theirs)):
            np.testing.assert_array_equal(ours_leaf, their_leaf)
        assert int(next_state.time) == t
        state = next_state
    assert bool(terminated) and t > 5, f"the pole never fell past 0.2 rad within {t} steps"
    # auto-reset: a fresh episode from the step key's reset half, the clock back at 0
    np.testing.assert_array_equal(obs, suite_reset(jax.random.split(step_key)[1]).obs)
    assert int(next_state.time) == 0
    assert not np.array_equal(obs, suite_reset(key).obs)


# ------------------------------------------------------------------ time limit and auto-reset, by hand


def fast_positions(actions):
    """Brax `fast`'s (pos, vel) after each action, by hand."""
    pos = vel = 0.0
    out = []
    for action in actions:
        vel += FAST_DT * float(action > 0)
        pos += FAST_DT * vel
        out.append((pos, vel))
    return out


@pytest.mark.parametrize("auto_reset", ["full", "cached"])
def test_time_limit_truncates_with_the_final_observation(auto_reset):
    env = make_suite_env("brax:fast", episode_length=3, auto_reset=auto_reset)
    step = jax.jit(env.step)
    actions = [1.0, -1.0, 1.0, 1.0]
    expected = fast_positions(actions[:3]) + fast_positions(actions[3:])  # the 4th step starts a new episode
    obs, state = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(obs, [0.0, 0.0])
    for t, (action, (pos, vel)) in enumerate(zip(actions, expected), start=1):
        obs, state, reward, terminated, truncated, info = step(jax.random.PRNGKey(t), state, jnp.array([action]))
        np.testing.assert_allclose(info["final_observation"], [pos, vel], rtol=1e-6)
        np.testing.assert_allclose(reward, pos, rtol=1e-6)
        assert not bool(terminated)  # `fast` never terminates
        assert bool(truncated) == (t == 3)
        np.testing.assert_allclose(obs, [0.0, 0.0] if t == 3 else [pos, vel], rtol=1e-6)
        assert int(state.time) == t % 3


def test_termination_wins_over_a_time_limit_on_the_same_step(pendulum):
    env, _, reset, step_both, _ = pendulum
    key = jax.random.PRNGKey(3)

    def steps_to_end(time_offset: int) -> tuple[int, bool, bool]:
        _, state = reset(key)
        state = dataclasses.replace(state, time=jnp.asarray(time_offset, jnp.int32))
        for t in range(1, 200):
            (_, state, _, terminated, truncated, _), _ = step_both(jax.random.fold_in(key, t), state, jnp.ones(1))
            if terminated or truncated:
                return t, bool(terminated), bool(truncated)
        raise AssertionError("the episode never ended")

    steps_to_fall, terminated, _ = steps_to_end(0)
    assert terminated
    # the same episode with exactly that many steps left before the limit: both end it, termination wins
    limit = env.default_params.max_steps_in_episode
    assert steps_to_end(limit - steps_to_fall) == (steps_to_fall, True, False)
    assert steps_to_end(limit - steps_to_fall + 1) == (steps_to_fall - 1, False, True)  # one step earlier: the limit


def test_cached_reset_restarts_from_the_first_state():
    env = make_suite_env("brax:fast", episode_length=2, auto_reset="cached")
    obs, state = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(state.first[0], obs)
    # a first state of our choosing: the episode after the limit must start there, not at a fresh reset
    marked_inner = jax.tree.leaves(env.suite_state(state.first[1]).replace(obs=jnp.array([7.0, 8.0])))
    state = SuiteState(state.inner, state.time, (jnp.array([7.0, 8.0]), tuple(marked_inner)))
    step = jax.jit(env.step)
    for t in range(2):
        obs, state, _, _, truncated, _ = step(jax.random.PRNGKey(t), state, jnp.ones(1))
    assert bool(truncated)
    np.testing.assert_array_equal(obs, [7.0, 8.0])
    np.testing.assert_array_equal(env.suite_state(state.inner).obs, [7.0, 8.0])
    np.testing.assert_array_equal(state.first[0], [7.0, 8.0])  # the cache itself is kept


class _RandomStepEnv:
    """A Brax-API env whose step draws its observation from `info["rng"]`, as Playground's
    locomotion envs draw their commands and pushes (they need MuJoCo Menagerie, not on disk here)."""

    action_size = 1

    def reset(self, key):
        return BraxState(pipeline_state=None, obs=jnp.zeros(1), reward=jnp.zeros(()), done=jnp.zeros(()),
                         metrics={}, info={"rng": key})

    def step(self, state, action):
        rng, draw = jax.random.split(state.info["rng"])
        return state.replace(obs=jax.random.uniform(draw, (1,)), info={"rng": rng})


def test_a_cached_restart_lets_the_steps_random_stream_go_on():
    """Restored with the first state, the stream would repeat every episode; Brax's and
    Playground's cached auto-resets restore the physics and observation alone."""
    env = BraxApiEnv(_RandomStepEnv(), "test:random-step", max_steps_in_episode=2, auto_reset="cached")
    obs, state = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    seen = []
    for t in range(4):  # two episodes of two steps
        obs, state, _, _, truncated, info = step(jax.random.PRNGKey(t), state, jnp.ones(1))
        seen.append(float(info["final_observation"][0]))
    assert bool(truncated)
    np.testing.assert_array_equal(obs, np.zeros(1))  # restarted from the first reset's observation
    assert len(set(seen)) == 4, seen  # the second episode's draws are new ones


def test_make_env_wraps_the_adapter_and_keeps_state_arrays():
    env, params = make_env(PENDULUM, backend=BACKEND)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(state))  # checkpointable
    # Brax truncates only at our time limit (1000 steps): the rollout values one truncated step an env
    assert max_truncations(env, params, 128) == 1 and max_truncations(env, params, 1001) == 2


# ------------------------------------------------------------------ runs through train()


# PPO's run is test_async_run_matches_fused_at_lag_0's fused run, checked there the same way
@pytest.mark.parametrize("algo", ["a2c", "reinforce", "impala", "sac"])
def test_every_box_learner_trains_on_brax(algo, tmp_path):
    changes = dict(algo=algo)
    if algo == "sac":
        changes.update(num_envs=2, num_steps=4, total_timesteps=2 * 4 * 8)
    cfg = small(tmp_path / algo, **changes)
    if algo == "sac":
        cfg = cfg.with_fields(replay_capacity=256, learning_starts=16, replay_ratio=1, replay_batch_size=16)
    result = train(cfg, console=False)
    assert result.completed and result.summary["env_steps"] == cfg.total_timesteps
    assert np.isfinite(result.summary["final_eval_return_mean"])


def test_dict_observations_train(tmp_path):
    cfg = small(tmp_path / "dict", env_kwargs=("episode_length=20", "obs_mode=dict_state", "asymmetric_obs=true"))
    result = train(cfg, console=False)
    assert result.completed and np.isfinite(result.summary["final_eval_return_mean"])


@pytest.mark.optimized_compile  # lag 0 equals fused to the bit compiled optimised (compilation.py)
def test_async_run_matches_fused_at_lag_0(tmp_path):
    cfg = small(tmp_path / "fused")
    fused = train(cfg, console=False)
    # PPO trains on Brax (every other learner: test_every_box_learner_trains_on_brax)
    assert cfg.algo == "ppo" and fused.completed and fused.summary["env_steps"] == cfg.total_timesteps
    assert np.isfinite(fused.summary["final_eval_return_mean"])
    lag0 = train(small(tmp_path / "lag0", mode="async", lag="0"), console=False)
    assert lag0.completed and lag0.summary["params_digest"] == fused.summary["params_digest"]


def test_pendulum_fused_run_resumes_to_the_same_bits(tmp_path):
    cfg = small(tmp_path / "full", env=PENDULUM, env_kwargs=(f"backend={BACKEND}", "episode_length=50"),
                total_timesteps=4 * 8 * 6, iterations_per_call=2, checkpoint_interval=2)
    full = train(cfg, console=False)
    stopped_cfg = dataclasses.replace(cfg, run_dir=str(tmp_path / "resumed"))
    stopped = train(stopped_cfg, console=False, stop_after_updates=2)
    assert not stopped.completed
    resumed = train(stopped_cfg, console=False, resume=True)
    assert resumed.completed and resumed.summary["params_digest"] == full.summary["params_digest"]


# ------------------------------------------------------------------ learning


LEARNING_SEEDS, SEEDS_THAT_MUST_LEARN = 8, 7
# Within a 200-step limit (spring backend), over 64 episodes: uniform random actions hold the pole up for
# 23.2 steps on average (69 at most), no force at all for 71.7 (148 at most); a trained policy for all 200
ZERO_FORCE_RETURN = 71.7
LEARNED_RETURN = 150.0


@pytest.mark.slow
def test_ppo_balances_the_inverted_pendulum(tmp_path):
    """Greedy returns well above what no force at all gets (71.7 of 200) on at least 7 seeds of 8,
    within 328k steps, with Brax's policy: the tanh-squashed Gaussian whose std is a state-dependent
    output, and rewards scaled (by 0.1 here: the small critic fits values of 0-10 better than 0-100).

    The rule is over 8 seeds because a seed's result hangs on the float code XLA makes. Measured on a
    2-core AMD EPYC, compiled as here, all 8 seeds end at 200; the same program compiled fast
    (`fast_compile`, another rounding of the same maths, as another CPU's may be) all 8 at 200 too.
    The Gaussian clipped to the bounds, as before, ended at 200, 200, 93.3, 156.6, 200, 115.1, 200,
    119.9 there; the tanh Gaussian without reward scaling at 122.8, 200, 100.4, 200, 200, 200, 122.3,
    200; with Brax's x10 scaling and discount 0.97 (compiled at XLA's default level) at 74.4-200, 6
    seeds under 120."""
    cfg = TrainConfig(env=PENDULUM, env_kwargs=(f"backend={BACKEND}", "episode_length=200"), num_envs=16,
                      num_steps=64, total_timesteps=16 * 64 * 320, num_seeds=LEARNING_SEEDS, normalize_obs=True,
                      eval_episodes=8, eval_interval=0, checkpoint_interval=0, run_dir=str(tmp_path / "learn"),
                      network=NetworkConfig(hidden_sizes=(32, 32), action_dist="tanh_gaussian"),
                      learner=LearnerConfig(update_epochs=4, num_minibatches=4, learning_rate=1e-3, gamma=0.99,
                                            reward_scale=0.1))
    result = train(cfg, console=False)
    returns = np.asarray(result.summary["final_eval_return"])
    assert returns.shape == (LEARNING_SEEDS,)
    assert (returns >= LEARNED_RETURN).sum() >= SEEDS_THAT_MUST_LEARN, f"greedy returns {returns}"
