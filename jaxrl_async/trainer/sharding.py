"""Place the training state on several devices with `jax.sharding` (JAX's own SPMD runtime).

Two layouts, chosen from the number of seeds S, envs B and devices D:

- **seeds**: every leaf's leading seed axis is split over the devices (S % D == 0).
  Seeds are independent, so XLA partitions the vmapped program with no
  communication: each device runs the same per-seed program on S / D seeds.
- **envs** (fewer seeds than devices, and only when a device count is asked for:
  `--devices N`): the env axis of the rollout state is split (B % D == 0) and
  everything else is replicated. Each device steps its envs; the update's minibatch
  gathers and gradient reductions span the devices, so the gradient is the average
  over all envs, exactly as on one device up to the order of floating-point sums.

The default, `--devices all`, never splits envs. Env sharding pays for a collective
at every minibatch step and a cross-device gather for every shuffle; that is worth it
for big per-device batches on accelerators, but on CPU cores it loses many times over
(docs/runs.md, "Several devices"). So 'all' shards seeds when they split evenly, else runs
on one device.

On a CPU the cores become devices only if JAX is told so before it starts
(`runtime.configure_cpu_runtime`); the commands do this, the library never does.

Over several processes (`distributed.py`) the mesh spans every process's devices, the same
number from each, so that every process holds a shard: process p's devices come after
process p-1's, and with the seed layout process p runs the p-th block of seeds. One
process cannot run the whole state there ('single'), so the env axis is split where the
seeds do not divide evenly, also with `--devices all`.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_async.types import TrainState

AXIS = "shard"


def resolve_devices(requested: int | str) -> list:
    available = jax.devices()
    if requested == "all":
        return available
    if requested > len(available):
        raise ValueError(f"devices={requested} asks for more devices than the {len(available)} available "
                         f"({available[0].platform}: {', '.join(str(d) for d in available)}); use --devices "
                         f"{len(available)} or 'all' (on a CPU the CLI exposes every core as a device)")
    return available[:requested]


def choose_layout(num_seeds: int, num_envs: int, num_devices: int, *, split_envs: bool = True,
                  num_processes: int = 1) -> tuple[str, int]:
    """('seeds' | 'envs' | 'single', devices used): the most devices that split evenly.

    `split_envs=False` (what `devices='all'` uses) considers the seed axis only.
    `num_processes`: the device count used must be a multiple of it (every process a shard).
    """
    for d in range(num_devices, 1, -1):
        if d % num_processes:
            continue
        if num_seeds % d == 0:
            return "seeds", d
        if split_envs and num_seeds < d and num_envs % d == 0:
            return "envs", d
    return "single", 1


def _across_processes(requested: int | str, num_seeds: int, num_envs: int, processes: int) -> tuple[str, list]:
    """The layout and the devices over several processes: the same count from each process."""
    local = jax.local_device_count()
    if requested == "all":
        per_process = local
    elif requested % processes or requested // processes > local:
        raise ValueError(f"devices={requested} cannot be split over {processes} processes of {local} device(s) "
                         f"each: give a multiple of {processes} up to {processes * local}, or 'all'")
    else:
        per_process = requested // processes
    layout, used = choose_layout(num_seeds, num_envs, per_process * processes, num_processes=processes)
    if layout == "single":
        raise ValueError(f"num_seeds={num_seeds} and num_envs={num_envs} cannot be split evenly over the "
                         f"{processes} processes' {per_process * processes} devices, and every process needs "
                         f"a shard: give a seed count (or, for one seed, an env count) that is a multiple of "
                         f"{processes}")
    by_process = [sorted((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                  for p in range(processes)]
    return layout, [d for devices in by_process for d in devices[:used // processes]]


class Placement:
    """Where the state lives: a mesh and a sharding for every leaf of the `[S, ...]` state."""

    def __init__(self, requested: int | str, num_seeds: int, num_envs: int):
        processes = jax.process_count()
        if processes > 1:
            self.layout, self.devices = _across_processes(requested, num_seeds, num_envs, processes)
        else:
            devices = resolve_devices(requested)
            # envs are split only on request: see the module docstring for why 'all' does not
            self.layout, used = choose_layout(num_seeds, num_envs, len(devices), split_envs=requested != "all")
            self.devices = devices[:used]
        self.mesh = Mesh(np.array(self.devices), (AXIS,))

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def shardings(self, state: TrainState) -> Any:
        """A NamedSharding per leaf of a TrainState (or of an abstract one)."""
        replicated = NamedSharding(self.mesh, PartitionSpec())
        if self.layout == "seeds":
            return jax.tree.map(lambda _: NamedSharding(self.mesh, PartitionSpec(AXIS)), state)
        everything = jax.tree.map(lambda _: replicated, state)
        if self.layout == "single":
            return everything
        env_axis = NamedSharding(self.mesh, PartitionSpec(None, AXIS))  # [S, B, ...]
        rollout = everything.rollout.replace(
            env_state=jax.tree.map(lambda _: env_axis, state.rollout.env_state), obs=env_axis)
        return everything.replace(rollout=rollout)

    def place(self, state: TrainState) -> TrainState:
        return jax.device_put(state, self.shardings(state))

    def describe(self) -> str:
        if self.layout == "single":
            return f"1 device ({self.devices[0]})"
        return f"{self.num_devices} devices, {self.layout} axis sharded ({', '.join(map(str, self.devices))})"
