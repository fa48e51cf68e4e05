"""`--actor-device cpu`: the actor on a CPU device of its own, the learner on another (two forced CPU
devices, in a subprocess: JAX fixes its device count when it starts); and `--num-actors`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import compilation  # tests/compilation.py

from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.training import train


@pytest.fixture(scope="module")
def two_device_results():
    # compiled optimised, as the CLI compiles: compiled fast (compilation.py), the gymnax run's params
    # on the two devices differed in one bit on a Zen 4 EPYC, not compiled optimised
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not any(name in f for name in compilation.OPTIMIZED)]
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "2",
           "XLA_FLAGS": " ".join(flags + compilation.OPTIMIZED_XLA_FLAGS.split())}
    probe = os.path.join(os.path.dirname(__file__), "actor_device_probe.py")
    out = subprocess.run([sys.executable, probe], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("env", ["CartPole-v1", "gymnasium:CartPole-v1"])
def test_lag_0_on_the_actors_own_device_gives_the_default_devices_params(two_device_results, env):
    assert two_device_results["devices"] == 2
    result = two_device_results[env]
    # the same programs on another CPU device of the same machine: bit-identical
    assert result["max_diff"] == 0.0 and result["same_digest"], result


def test_actor_device_cpu_needs_a_device_the_learner_leaves_free(two_device_results):
    assert "--devices 1" in two_device_results["error"]
    # refused before the run directory is made (a resumed one's config.json would be rewritten)
    assert not two_device_results["error_wrote_its_run_dir"]


def _cfg(tmp_path, name, core="none", **overrides):
    return TrainConfig(env="gymnasium:CartPole-v1", mode="async", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4,
                       eval_episodes=2, iterations_per_call=2, run_dir=str(tmp_path / name),
                       network=NetworkConfig(hidden_sizes=(16,), core=core, core_size=8),
                       learner=LearnerConfig(update_epochs=1, num_minibatches=2), **overrides)


@pytest.mark.parametrize("lag, core", [("0", "none"), ("1", "gru")])
def test_two_host_actors_are_deterministic(tmp_path, lag, core):
    """With a recurrent core too: the actors' fragments are joined along the envs, their initial
    carries (`[B, H]` where the other fields are `[T, B, ...]`) likewise."""
    a = train(_cfg(tmp_path, "a", core, num_actors=2, lag=lag), console=False)
    b = train(_cfg(tmp_path, "b", core, num_actors=2, lag=lag), console=False)
    assert a.summary["params_digest"] == b.summary["params_digest"]
    assert a.summary["env_steps"] == 4 * 8 * 4
