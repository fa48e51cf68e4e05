"""Run by tests/test_actor_device.py in a subprocess with two forced CPU devices (JAX_NUM_CPU_DEVICES=2):
the learner on one, the actor (`--actor-device cpu`) on the other."""

import dataclasses
import json
import os
import tempfile

import jax
import numpy as np

from jaxrl_async.trainer.runtime import configure_cpu_runtime

configure_cpu_runtime(expose_cores=False)  # the device count comes from JAX_NUM_CPU_DEVICES

from jaxrl_async import TrainConfig, train  # noqa: E402
from jaxrl_async.config import LearnerConfig, NetworkConfig  # noqa: E402


def max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def main():
    out = {"devices": len(jax.devices())}
    with tempfile.TemporaryDirectory() as tmp:
        for env in ("CartPole-v1", "gymnasium:CartPole-v1"):
            base = TrainConfig(env=env, mode="async", lag="0", num_envs=4, num_steps=16, total_timesteps=64 * 6,
                               iterations_per_call=3, eval_episodes=2, devices=1,
                               network=NetworkConfig(hidden_sizes=(16,)),
                               learner=LearnerConfig(update_epochs=1, num_minibatches=2))
            results = {}
            for actor_device in ("default", "cpu"):
                cfg = dataclasses.replace(base, actor_device=actor_device, run_dir=f"{tmp}/{env[:4]}{actor_device}")
                result = train(cfg, console=False)
                results[actor_device] = (result.summary, jax.device_get(result.state.learner.params))
            (s_default, p_default), (s_cpu, p_cpu) = results["default"], results["cpu"]
            out[env] = {"max_diff": max_diff(p_default, p_cpu),
                        "same_digest": s_default["params_digest"] == s_cpu["params_digest"],
                        "eval": [s_default["final_eval_return_mean"], s_cpu["final_eval_return_mean"]]}
        try:
            TrainConfig(mode="async", actor_device="cpu", num_seeds=2)
            train(TrainConfig(mode="async", actor_device="cpu", num_seeds=2, total_timesteps=512,
                              run_dir=f"{tmp}/err"), console=False)
            out["error"] = None
        except ValueError as error:
            out["error"] = str(error)
        out["error_wrote_its_run_dir"] = os.path.exists(f"{tmp}/err")
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
