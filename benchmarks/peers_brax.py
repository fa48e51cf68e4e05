"""Brax 0.14.2's own PPO and SAC trainers (`brax.training.agents.ppo.train`, `...sac.train`) timed on
this machine, PPO driven by `benchmarks/brax_ppo.py`. This file imports nothing of ours.

Brax 0.14.2's trainer calls `jax.device_put_replicated`, which jax 0.10 removed: where this jax lacks
it, this file puts back an equivalent (`_device_put_replicated`: each leaf stacked once per device,
laid over them as `pmap` takes it), so the trainer runs on our own jax, on the CPU and on a GPU alike.
The shim is this runner's alone, never our package's. A virtualenv with jax 0.9.2 needs no shim.

usage: python benchmarks/peers_brax.py PRESET TOTAL_TIMESTEPS SEED NUM_EPOCHS
  PRESET: a key of PRESETS;  NUM_EPOCHS: Brax's training epochs (`num_evals - 1`), >= 2

Brax's trainer runs `num_evals - 1` training epochs, each one jitted call of equal size,
evaluating after each (128 envs, one episode each, greedy here). The first epoch pays the
compilation, so `steps_per_second` is the env steps of the later epochs over their time
(Brax's own `training/sps`, which times the epoch's call and nothing else); `final_return` is
the last evaluation's mean return. One JSON line per epoch, then a SUMMARY line.
"""
import json
import statistics
import sys
import time

import jax
import numpy as np


def _device_put_replicated(tree, devices):
    """`jax.device_put_replicated` as jax < 0.10 had it, which Brax 0.14.2's trainers call: each leaf
    stacked once per device on a new leading axis, that axis laid over `devices` (what `pmap` takes)."""
    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.asarray(devices), ("devices",)),
                                          jax.sharding.PartitionSpec("devices"))
    return jax.tree.map(lambda x: jax.device_put(np.stack([np.asarray(x)] * len(devices)), sharding), tree)


# the shim, only where this jax lacks the call (jax >= 0.10): then Brax's trainer runs on our own jax
if not hasattr(jax, "device_put_replicated"):
    jax.device_put_replicated = _device_put_replicated

from brax import envs  # noqa: E402
from brax.training.agents.ppo import train as ppo  # noqa: E402
from brax.training.agents.sac import train as sac  # noqa: E402

TRAINERS = {"ppo": ppo.train, "sac": sac.train}


def _notebook(env_name: str, backend: str, **train) -> dict:
    """A case at the training notebook's PPO settings: those all its tasks share, and `train`'s."""
    return dict(trainer="ppo", env=dict(env_name=env_name, backend=backend),
                train=dict(episode_length=1000, normalize_observations=True, action_repeat=1, num_minibatches=32,
                           learning_rate=3e-4, **train))


def _notebook_sac(env_name: str, **train) -> dict:
    """A case at the training notebook's SAC settings: those its two SAC tasks share, and `train`'s."""
    return dict(trainer="sac", env=dict(env_name=env_name, backend="positional"),
                train=dict(episode_length=1000, normalize_observations=True, action_repeat=1, discounting=0.997,
                           learning_rate=6e-4, num_envs=128, max_devices_per_host=1, max_replay_size=1_048_576,
                           min_replay_size=8192, **train))


PRESETS = {
    # Brax's published inverted_pendulum settings (its training notebook), on the MJX backend
    "inverted_pendulum": _notebook("inverted_pendulum", "mjx", unroll_length=5, num_updates_per_batch=4,
                                   discounting=0.97, entropy_cost=1e-2, num_envs=2048, batch_size=1024,
                                   reward_scaling=10),
    # the flagship tasks at the notebook's published settings, on the `positional` backend it trains
    # them with (the settings our presets `brax:ant`, `brax:humanoid`, `brax:halfcheetah` take: issue
    # #57); run at 50M steps, as published
    "ant": _notebook("ant", "positional", unroll_length=5, num_updates_per_batch=4, discounting=0.97,
                     entropy_cost=1e-2, num_envs=4096, batch_size=2048, reward_scaling=10),
    "humanoid": _notebook("humanoid", "positional", unroll_length=10, num_updates_per_batch=8, discounting=0.97,
                          entropy_cost=1e-3, num_envs=2048, batch_size=1024, reward_scaling=0.1),
    "halfcheetah": _notebook("halfcheetah", "positional", unroll_length=20, num_updates_per_batch=8,
                             discounting=0.95, entropy_cost=1e-3, num_envs=2048, batch_size=512, reward_scaling=1),
    # the notebook's SAC for hopper and walker2d (our presets `brax:hopper`, `brax:walker2d`), on the
    # same `positional` backend as ours
    "hopper_sac": _notebook_sac("hopper", reward_scaling=30, batch_size=512, grad_updates_per_step=64),
    "walker2d_sac": _notebook_sac("walker2d", reward_scaling=5, batch_size=128, grad_updates_per_step=32),
}


def main(argv):
    preset, total, seed, epochs = argv[1], int(float(argv[2])), int(argv[3]), int(argv[4])
    if epochs < 2:
        raise SystemExit("NUM_EPOCHS must be >= 2: the first epoch's time holds the compilation")
    cfg = PRESETS[preset]
    env = envs.get_environment(**cfg["env"])
    epoch_rows = []
    last = {}

    def progress(step, metrics):
        if "training/sps" in metrics:  # not the evaluation before training
            epoch_rows.append({"env_steps": int(step), "sps": float(metrics["training/sps"]),
                               "epoch_s": float(metrics["training/walltime"]),
                               "eval_return": float(metrics["eval/episode_reward"])})
            print(json.dumps(epoch_rows[-1]), flush=True)
        last.update(metrics)

    start = time.perf_counter()
    TRAINERS[cfg["trainer"]](environment=env, num_timesteps=total, seed=seed, num_evals=epochs + 1,
                             deterministic_eval=True, progress_fn=progress, **cfg["train"])
    wall_s = time.perf_counter() - start
    later = epoch_rows[1:]
    steps_per_epoch = later[0]["env_steps"] - epoch_rows[0]["env_steps"]
    # training/walltime is cumulative: each later epoch's own time is its difference
    epoch_times = [b["epoch_s"] - a["epoch_s"] for a, b in zip(epoch_rows, epoch_rows[1:])]
    print("SUMMARY", json.dumps({
        "side": "brax", "preset": preset, "seed": seed, "env_steps": epoch_rows[-1]["env_steps"],
        "steps_per_second": len(later) * steps_per_epoch / sum(epoch_times),
        "epoch_sps": [round(row["sps"]) for row in epoch_rows],
        "compile_and_first_epoch_s": epoch_rows[0]["epoch_s"],
        "final_return": float(last["eval/episode_reward"]), "wall_s": wall_s,
        "median_later_sps": statistics.median(row["sps"] for row in later),
        "config": cfg, "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main(sys.argv)
