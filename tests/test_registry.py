"""The learner registry: every name `--algo` takes has a learner, built by its module alone."""

import dataclasses

import pytest

from jaxrl_async import algorithms
from jaxrl_async.config import ALGORITHMS, BACKEND_DEFAULTS, TrainConfig
from jaxrl_async.types import Algorithm, HostHooks, Learner


def test_the_registry_and_the_configs_names_agree():
    assert tuple(algorithms.LEARNERS) == ALGORITHMS
    assert all(isinstance(entry, Learner) for entry in algorithms.LEARNERS.values())


def test_an_unknown_learner_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="algo='sarsa' is not known: choose one of ppo, a2c"):
        algorithms.learner("sarsa")


@pytest.mark.parametrize("algo, env", [("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"),
                                       ("td3", "Pendulum-v1"), ("pqn", "CartPole-v1")])
def test_each_learner_builds_from_its_entry_alone(algo, env):
    from jaxrl_async.envs import make_env
    from jaxrl_async.envs.spaces import observation_shapes

    cfg = TrainConfig(env=env, algo=algo, num_envs=2, num_steps=8, total_timesteps=64,
                      learner=dataclasses.replace(TrainConfig().learner, num_minibatches=2))
    env_obj, params = make_env(env)
    entry = algorithms.learner(algo)
    policy, nets = entry.networks(cfg, observation_shapes(env_obj.observation_space(params)),
                                  env_obj.action_space(params))
    algo_fns = entry.make(cfg, policy, nets, BACKEND_DEFAULTS["cpu"])
    assert isinstance(algo_fns, Algorithm)
    # only the replay learners keep state the host side treats apart (their buffer)
    assert (algo_fns.host == HostHooks()) == (algo not in ("dqn", "sac", "td3"))
