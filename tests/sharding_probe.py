"""Run by tests/test_sharding.py in a subprocess with two forced CPU devices (JAX_NUM_CPU_DEVICES=2):
JAX fixes its device count when it starts, so the test process itself keeps one device."""

import dataclasses
import json
import sys
import tempfile

import jax
import numpy as np

from jaxrl_async.trainer.runtime import configure_cpu_runtime

configure_cpu_runtime(expose_cores=False)  # the device count comes from JAX_NUM_CPU_DEVICES

import jax.numpy as jnp  # noqa: E402

from jaxrl_async import TrainConfig, train  # noqa: E402
from jaxrl_async.config import NetworkConfig  # noqa: E402
from jaxrl_async.envs import make_env, register_env  # noqa: E402
from jaxrl_async.envs.wrappers import Wrapper  # noqa: E402


class EmptyLeaf(Wrapper):
    """CartPole whose state also holds an empty array, as MJX's `Data` does (Brax, Playground)."""

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return obs, (state, jnp.zeros((0, 3)))

    def step(self, key, state, action, params=None):
        obs, inner, *rest = self._env.step(key, state[0], action, params)
        return (obs, (inner, state[1]), *rest)


register_env("CartPole-EmptyLeaf", lambda: EmptyLeaf(make_env("CartPole-v1")[0].unwrapped))


def run(base, tmp, name, **changes):
    cfg = dataclasses.replace(base, run_dir=f"{tmp}/{name}", **changes)
    result = train(cfg, console=False)
    return result.summary, jax.device_get(result.state.learner.params)


def max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def main():
    base = TrainConfig(num_envs=4, num_steps=16, total_timesteps=64 * 12, iterations_per_call=4, eval_episodes=4,
                       network=NetworkConfig(hidden_sizes=(16,)))
    out = {"devices": len(jax.devices())}
    with tempfile.TemporaryDirectory() as tmp:
        # references on one device: 4 seeds (seeds 0 and 1 are bit-identical to a 2-seed run:
        # any vmapped batch of >= 2 seeds gives the same per-seed results) and 1 seed
        ref4, p_ref4 = run(base, tmp, "ref4", num_seeds=4, devices=1)
        ref1, p_ref1 = run(base, tmp, "ref1", num_seeds=1, devices=1)
        first_two = lambda params: jax.tree.map(lambda x: x[:2], params)
        # async with lag 0 is bit-identical to fused, so both modes compare with the fused references
        for mode in ("fused", "async"):
            four, p_four = run(base, tmp, f"{mode}4", mode=mode, lag="0", num_seeds=4, devices=2)
            out[f"{mode}/seeds=4"] = {"layout": four["sharding"], "devices": four["devices"],
                                      "identical": four["params_digest"] == ref4["params_digest"],
                                      "max_diff": max_diff(p_four, p_ref4)}
            env, p_env = run(base, tmp, f"{mode}_env", mode=mode, lag="0", num_seeds=1, devices=2)
            out[f"{mode}/envs"] = {"layout": env["sharding"], "max_diff": max_diff(p_env, p_ref1),
                                   "identical": env["params_digest"] == ref1["params_digest"]}
        two, p_two = run(base, tmp, "fused2", num_seeds=2, devices=2)
        out["fused/seeds=2"] = {"layout": two["sharding"], "devices": two["devices"],
                                "identical": two["params_digest"] == ref4["params_digest"][:2],
                                "max_diff": max_diff(p_two, first_two(p_ref4)),
                                "eval_equal": two["final_eval_return"] == ref4["final_eval_return"][:2]}
        # resume with a sharded state: stop half way, resume, compare with the straight run above
        cfg = dataclasses.replace(base, num_seeds=2, devices=2, run_dir=f"{tmp}/resumed")
        train(cfg, console=False, stop_after_updates=4)
        resumed = train(cfg, console=False, resume=True).summary
        out["resume"] = {"identical": two["params_digest"] == resumed["params_digest"]}
        # a state with an empty leaf, seeds over both devices, several calls of the loop: each call's
        # empty outputs must come back on the sharding the next call was compiled for
        for mode in ("fused", "async"):
            empty, _ = run(base, tmp, f"empty_leaf_{mode}", env="CartPole-EmptyLeaf", num_seeds=2, devices=2, mode=mode)
            out[f"{mode}/empty_leaf"] = {"layout": empty["sharding"], "env_steps": empty["env_steps"]}
        try:
            run(base, tmp, "too_many", devices=3)
        except ValueError as error:
            out["too_many_devices_error"] = str(error)
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
