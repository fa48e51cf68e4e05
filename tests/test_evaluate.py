"""The device evaluator (rollout/evaluate.py): each env's first episode, undiscounted, on a step
traced without the auto-reset (`autoreset.without_reset`), an env whose episode ended restarting
from its first state.

The reference is the evaluation as a Python loop over the same keys with the env's own step, its
auto-reset and all: the first episodes, and so the returns, must be the same to the bit. The
resets that run are counted with a host callback inside the suite's reset, and the states a step
starts from are recorded the same way."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async.config import NetworkConfig
from jaxrl_async.envs.suites.functional import SuiteEnv
from jaxrl_async.envs.wrappers import EpisodeStatistics
from jaxrl_async.nets.actor_critic import make_policy
from jaxrl_async.envs.suites.autoreset import without_reset
from jaxrl_async.rollout.evaluate import make_evaluator

NUM_EPISODES = 8
RESETS = []
STEPPED_FROM = []


class Walk(SuiteEnv):
    """obs = [position]; each step moves by the action plus a random 0, 1 or 2 and pays 1 + position;
    it terminates at 5 or beyond, and our time limit (5 steps) truncates it. The reset draws the
    start from 0..3 and tells the host (`RESETS`), so the resets that run can be counted."""

    name = "Walk"

    def __init__(self, auto_reset="full"):
        super().__init__(max_steps_in_episode=5, auto_reset=auto_reset)

    def reset_env(self, key, params):
        jax.debug.callback(lambda: RESETS.append(1))
        start = jax.random.randint(key, (), 0, 4)
        return start[None].astype(jnp.float32), start

    def step_env(self, key, inner, action, params):
        jax.debug.callback(lambda p: STEPPED_FROM.extend(np.ravel(p).tolist()), inner)
        position = inner + action + jax.random.randint(key, (), 0, 3)
        return (position[None].astype(jnp.float32), position, 1.0 + position.astype(jnp.float32),
                position >= 5, jnp.bool_(False))

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 10.0, (1,), jnp.float32)


class SteppingWalk(Walk):
    """`Walk`, declared a world whose step past an episode's end is an ordinary one."""

    name = "SteppingWalk"
    steps_on_past_end = True


def reference_evaluation(env, env_params, policy, params, key, greedy):
    """The first episode of each env, stepping with the env's own auto-reset, as a Python loop."""
    key, reset_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, NUM_EPISODES), env_params)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    returns, lengths = np.zeros(NUM_EPISODES, np.float32), np.zeros(NUM_EPISODES, np.int32)
    done = np.zeros(NUM_EPISODES, bool)
    for _ in range(env_params.max_steps_in_episode):
        key, act_key, step_key = jax.random.split(key, 3)
        dist, _, _ = policy.step(params, obs, ())
        action = dist.mode() if greedy else dist.sample(act_key)
        obs, state, reward, terminated, truncated, _ = step(jax.random.split(step_key, NUM_EPISODES), state, action,
                                                            env_params)
        returns += np.where(done, 0.0, np.asarray(reward))
        lengths += ~done
        done |= np.asarray(terminated | truncated)
    return returns, lengths, done


@pytest.fixture(scope="module")
def walk():
    env = EpisodeStatistics(Walk())
    env_params = env.default_params
    policy = make_policy(NetworkConfig(hidden_sizes=(8,)), env.observation_space(env_params).shape,
                         env.action_space(env_params))
    return env, env_params, policy, policy.init(jax.random.PRNGKey(0))


@pytest.mark.parametrize("greedy", [True, False])
def test_first_episodes_are_the_auto_resetting_steps_and_one_reset_runs(walk, greedy):
    env, env_params, policy, params = walk
    evaluate = make_evaluator(env, env_params, policy, num_episodes=NUM_EPISODES)
    key = jax.random.PRNGKey(7)
    RESETS.clear()
    result = jax.jit(evaluate, static_argnames="greedy")(params, None, key, greedy=greedy)
    jax.effects_barrier()
    resets = len(RESETS)
    RESETS.clear()
    jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(key, NUM_EPISODES), env_params)
    jax.effects_barrier()
    # the initial reset alone: no auto-reset ran, though episodes ended before the last one did
    assert resets == len(RESETS) > 0
    returns, lengths, complete = reference_evaluation(env, env_params, policy, params, key, greedy)
    assert complete.all() and len(set(lengths.tolist())) > 1  # episodes of several lengths, all complete
    assert np.asarray(result.lengths == 5).any() and np.asarray(result.lengths < 5).any()  # truncated, terminated
    np.testing.assert_array_equal(result.returns, returns)
    np.testing.assert_array_equal(result.lengths, lengths)
    np.testing.assert_array_equal(result.complete, complete)


@pytest.mark.parametrize("steps_on", [False, True])
def test_an_ended_env_steps_on_only_where_its_suite_says_so(walk, steps_on):
    _, env_params, policy, params = walk
    env = EpisodeStatistics(SteppingWalk() if steps_on else Walk())
    evaluate = make_evaluator(env, env_params, policy, num_episodes=NUM_EPISODES)
    key = jax.random.PRNGKey(7)
    STEPPED_FROM.clear()
    result = jax.jit(evaluate, static_argnames="greedy")(params, None, key, greedy=True)
    jax.effects_barrier()
    # a position of 5 or more is a terminal state: restarted from (the default), or stepped on from
    past_end = [position for position in STEPPED_FROM if position >= 5]
    assert bool(past_end) == steps_on
    returns, lengths, complete = reference_evaluation(env, env_params, policy, params, key, True)
    assert len(set(lengths.tolist())) > 1  # some envs ended while others went on
    np.testing.assert_array_equal(result.returns, returns)
    np.testing.assert_array_equal(result.lengths, lengths)
    np.testing.assert_array_equal(result.complete, complete)


@pytest.mark.parametrize("auto_reset", ["full", "cached"])
def test_a_step_traced_without_reset_neither_resets_nor_restarts(auto_reset):
    env = Walk(auto_reset=auto_reset)
    key = jax.random.PRNGKey(3)
    _, state = env.reset(key)
    state = state.replace(inner=jnp.int32(4))  # one step from the end: 4 + 0..3 >= 5 for action 1
    with without_reset():
        obs, stepped, _, terminated, _, _ = jax.jit(lambda k, s, a: env.step(k, s, a))(key, state, 1)
    assert bool(terminated)
    assert int(stepped.inner) >= 5 and float(obs[0]) == int(stepped.inner)  # where the episode ended
    _, restarted, _, _, _, _ = jax.jit(lambda k, s, a: env.step(k, s, a))(key, state, 1)  # with the (re)start
    assert int(restarted.inner) < 4
