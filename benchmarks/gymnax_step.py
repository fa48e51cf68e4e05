"""gymnax's own `env.step` (auto-reset included), vmapped over N envs, T steps in one jitted scan with
random actions: steps/s. It imports nothing of ours, so it runs under any gymnax: ours (1.0.1) or
rejax's (0.0.9, its six- or five-value step alike), to tell an env's cost from a trainer's.

usage: python benchmarks/gymnax_step.py ENV_ID NUM_ENVS NUM_STEPS
prints one line: GYMNAX_STEP {"env": ..., "num_envs": ..., "num_steps": ..., "steps_per_second": ...}
(the median of 7 timed calls after a compile and a warm-up call)
"""
import json
import statistics
import sys
import time

import gymnax
import jax


def main(env_id: str, num_envs: int, num_steps: int) -> dict:
    env, params = gymnax.make(env_id)
    space = env.action_space(params)
    num_actions = getattr(space, "n", None)  # None: a Box, whose actions are sampled from it

    def random_actions(key):
        if num_actions is None:
            return jax.vmap(space.sample)(jax.random.split(key, num_envs))
        return jax.random.randint(key, (num_envs,), 0, num_actions)

    def run(key):
        obs, state = jax.vmap(env.reset, (0, None))(jax.random.split(key, num_envs), params)

        def body(carry, _):
            state, key = carry
            key, action_key, step_key = jax.random.split(key, 3)
            actions = random_actions(action_key)
            out = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(step_key, num_envs), state, actions, params)
            return (out[1], key), out[2].sum()  # out: obs, state, reward, ... in either gymnax

        return jax.lax.scan(body, (state, key), None, num_steps)[1].sum()

    compiled = jax.jit(run).lower(jax.random.PRNGKey(0)).compile()
    compiled(jax.random.PRNGKey(0)).block_until_ready()
    times = []
    for i in range(7):
        start = time.perf_counter()
        compiled(jax.random.PRNGKey(i + 1)).block_until_ready()
        times.append(time.perf_counter() - start)
    return {"env": env_id, "num_envs": num_envs, "num_steps": num_steps,
            "steps_per_second": num_envs * num_steps / statistics.median(times), "device": str(jax.devices()[0])}


if __name__ == "__main__":
    print("GYMNAX_STEP " + json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))), flush=True)
