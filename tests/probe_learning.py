"""Shared by the probe learning tests (test_learning.py for PPO, test_algorithms.py for the
other learners): a short training run on a probe, and the learned values and action
probabilities at chosen observations."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.training import build, train


def learn_probe(tiny_config, env_id, *, gamma=0.99, algo="ppo", **learner):
    """About 3.8k steps with a 16-unit net; returns (policy, params of seed 0, summary).
    `learner` overrides the learner config's fields beyond these."""
    cfg = tiny_config(env=env_id, algo=algo, num_envs=8, num_steps=8, total_timesteps=64 * 60,
                      iterations_per_call="all", eval_episodes=8,
                      ppo=dict(update_epochs=4, num_minibatches=2, learning_rate=1e-2, gamma=gamma, **learner))
    result = train(cfg, console=False)
    params = jax.tree.map(lambda x: x[0], result.state.learner.params)
    return build(cfg).policy, params, result.summary


def values(policy, params, observations):
    return np.asarray(policy.value(params, jnp.asarray(observations, jnp.float32)[:, None]))


def probabilities(policy, params, observations):
    dist, _ = policy.apply(params, jnp.asarray(observations, jnp.float32)[:, None])
    return np.asarray(jax.nn.softmax(dist.logits))
