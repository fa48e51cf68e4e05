"""Shared by the learning tests (test_learning.py for PPO, test_algorithms.py for the other
learners, test_async_train.py): several seeds trained in one vmapped run, with rules that hold
whatever float code the machine's XLA compiles (CPU models differ; GPUs use TF32).

- Probes: every seed must find the probe's answer. The answers are exact (a value of 1, a
  probability near 1), so a correct learner meets them on each seed with room to spare, and a
  sign or bootstrap error misses them on all of them.
- CartPole: a seed's outcome is chaotic in the float details (a seed that solves on one CPU
  may settle at ~190 on another), so the rule is about the seeds together: three quarters of
  them reach the greedy return 475 (3 of 4). A bug that "still learns a little" fails it on
  every seed.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.trainer.build import build
from jaxrl_async.trainer.training import train

PROBE_SEEDS = 4  # vmapped in one program: about the cost of one seed on these tiny networks


def assert_every_seed_close(actual, expected, atol: float) -> None:
    """`actual` [S, N] (every seed's values at N observations) against `expected` [N] or a scalar."""
    np.testing.assert_allclose(actual, np.broadcast_to(expected, np.shape(actual)), atol=atol)


def learn_probe(tiny_config, env_id, *, gamma=0.99, algo="ppo", **learner):
    """About 3.8k steps per seed with a 16-unit net; returns (policy, params [S, ...], summary).
    `learner` overrides the learner config's fields beyond these."""
    cfg = tiny_config(env=env_id, algo=algo, num_envs=8, num_steps=8, total_timesteps=64 * 60,
                      num_seeds=PROBE_SEEDS, devices=1, iterations_per_call="all", eval_episodes=8,
                      learner=dict(update_epochs=4, num_minibatches=2, learning_rate=1e-2, gamma=gamma, **learner))
    result = train(cfg, console=False)
    return build(cfg).policy, result.state.learner.params, result.summary


def _episode_start(policy, observations):
    """The N scalar observations as `[N, 1]`, and the carry of N episodes at their first step."""
    obs = jnp.asarray(observations, jnp.float32)[:, None]
    return obs, policy.initial_carry(obs.shape[:1])


def values(policy, params, observations):
    """[S, N]: every seed's value of the N scalar observations (each at an episode's start)."""
    obs, carry = _episode_start(policy, observations)
    return np.asarray(jax.vmap(lambda p: policy.value_step(p, obs, carry))(params))


def probabilities(policy, params, observations):
    """[S, N, A]: every seed's action probabilities at the N scalar observations."""
    obs, carry = _episode_start(policy, observations)
    return np.asarray(jax.vmap(lambda p: jax.nn.softmax(policy.step(p, obs, carry)[0].logits))(params))


def gaussian_means(policy, params, observations):
    """[S, N, action_dim]: every seed's Gaussian mean at the N scalar observations."""
    obs, carry = _episode_start(policy, observations)
    return np.asarray(jax.vmap(lambda p: policy.step(p, obs, carry)[0].mean)(params))


CARTPOLE_SEEDS = 4
CARTPOLE_SOLVED = 475.0  # greedy return; 500 is the time limit


def assert_cartpole_solved(summary: dict, num_seeds: int = CARTPOLE_SEEDS) -> None:
    """At least three quarters of the `num_seeds` seeds reach CARTPOLE_SOLVED (see the module
    docstring)."""
    returns = summary["final_eval_return"]
    assert len(returns) == num_seeds, returns
    solved = sum(r >= CARTPOLE_SOLVED for r in returns)
    assert solved >= 3 * num_seeds // 4, f"{solved} of {num_seeds} seeds solved CartPole: {returns}"
