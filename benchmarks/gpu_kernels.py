"""What one PPO iteration launches on the GPU, ours or rejax's: kernels, their busy time and the 25
costliest, from a jax.profiler (perfetto) trace of one short run after a warm-up run.

usage: python benchmarks/gpu_kernels.py ours|rejax ref|big OUT.json
  ref: CartPole-v1 4 envs x 128 steps, 4 x 4 minibatches, 1e5 steps; big: 2048 x 64, 4 x 8, 5.2e6.
  SPEED='{"scan_unroll": 8}' sets ours' speed settings (TrainConfig fields).
rejax's side imports only rejax (run it on rejax's path). Figures are per iteration (the warm-up's one
iteration included in ours); the profiler lengthens kernels and gaps, so compare sides, not speeds.
"""
import dataclasses
import glob
import gzip
import json
import os
import sys
import tempfile
import time
from collections import defaultdict

import jax

CONFIGS = {"ref": dict(env="CartPole-v1", num_envs=4, num_steps=128, minibatches=4, total=100_352),
           "big": dict(env="CartPole-v1", num_envs=2048, num_steps=64, minibatches=8, total=5_242_880)}


def ours(cfg: dict):
    """A function that runs our trainer once on `cfg`; a persistent cache of its own makes the second
    run load the first one's programs (XLA:GPU's autotuning would otherwise run kernels in the trace)."""
    from jaxrl_async import TrainConfig, train
    from jaxrl_async.config import LearnerConfig

    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp())
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    speed = json.loads(os.environ.get("SPEED", "{}"))
    config = TrainConfig(env=cfg["env"], num_envs=cfg["num_envs"], num_steps=cfg["num_steps"],
                         total_timesteps=cfg["total"], eval_episodes=1, eval_interval=0, checkpoint_interval=0,
                         learner=LearnerConfig(num_minibatches=cfg["minibatches"]), **speed)
    return lambda: train(dataclasses.replace(config, run_dir=tempfile.mkdtemp()), console=False)


def rejax(cfg: dict):
    """A function that runs rejax 0.1.3's PPO once on `cfg`, compiled beforehand."""
    from rejax import PPO

    algo = PPO.create(env=cfg["env"], agent_kwargs=dict(activation="tanh"), num_envs=cfg["num_envs"],
                      num_steps=cfg["num_steps"], num_epochs=4, num_minibatches=cfg["minibatches"],
                      learning_rate=2.5e-4, max_grad_norm=0.5, total_timesteps=cfg["total"], gamma=0.99,
                      gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, eval_freq=cfg["total"],
                      skip_initial_evaluation=True)
    compiled = jax.jit(algo.train).lower(jax.random.PRNGKey(0)).compile()
    return lambda: jax.block_until_ready(compiled(jax.random.PRNGKey(1)))


def kernels(trace_dir: str, iterations: int) -> dict:
    """Per iteration: GPU events, their summed duration, the span from first to last, the top 25."""
    path = glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)[0]
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    process = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    gpu = [e for e in events if e.get("ph") == "X" and "GPU" in process.get(e.get("pid"), "") and "dur" in e]
    by_name = defaultdict(lambda: [0, 0.0])
    for e in gpu:
        by_name[e["name"]][0] += 1
        by_name[e["name"]][1] += e["dur"]
    busy = sum(e["dur"] for e in gpu)
    span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu) if gpu else 0
    top = sorted(by_name.items(), key=lambda item: -item[1][1])[:25]
    return {"events_per_iter": round(len(gpu) / iterations, 1), "busy_us_per_iter": round(busy / iterations, 1),
            "span_us_per_iter": round(span / iterations, 1), "busy_fraction": round(busy / span, 3) if span else None,
            "top": [[name[:90], count, round(total / iterations, 1)] for name, (count, total) in top]}


def main(who: str, config: str, out: str) -> dict:
    cfg = CONFIGS[config]
    run = {"ours": ours, "rejax": rejax}[who](cfg)
    run()  # compiles (ours) and warms up
    trace_dir = tempfile.mkdtemp()
    jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
    start = time.perf_counter()
    run()
    wall = time.perf_counter() - start
    jax.profiler.stop_trace()
    iterations = cfg["total"] // (cfg["num_envs"] * cfg["num_steps"])
    result = {"who": who, "config": config, "iterations": iterations, "wall_s": round(wall, 3),
              **kernels(trace_dir, iterations)}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({key: value for key, value in result.items() if key != "top"}))
    for name, count, us in result["top"][:12]:
        print(f"  {us:9.1f} us/iter  {count:7d}x  {name}")
    return result


if __name__ == "__main__":
    main(*sys.argv[1:4])
