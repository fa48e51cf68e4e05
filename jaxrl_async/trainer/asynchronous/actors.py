"""The async mode's actors: what the rollout thread runs, behind one interface.

    actor = make_actor(c, placement, state)            # JaxActor (gymnax) or HostActors (gymnasium)
    rollout_state, trajectory = actor.collect(params, rollout_state)   # the pipeline's `collect`
    actor.trajectory                                   # abstract trajectory, laid out for the learner
    actor.timings()                                    # the last collect's env / inference / transfer s
    actor.to_learner(rollout_state)                    # the state where the learner's state lives

- `JaxActor`: the jitted on-device rollout (`rollout.collect`), on the learner's device or, with
  `--actor-device cpu`, compiled for a CPU device of its own; then the params are copied to it once
  per version and each trajectory reaches the learner's device as one transfer.
- `HostActors`: `--num-actors` threads of `host_rollout.HostActor`, each stepping its share of the
  host envs; their trajectories are joined along the env axis B.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxrl_async.trainer.build import Components, over_seeds, warm_up
from jaxrl_async.rollout.host import HOST_TIMING_FIELDS, HostRollout, env_seeds
from jaxrl_async.trainer.sharding import Placement
from jaxrl_async.types import TrainState


def actor_device(cfg, placement: Placement) -> Any | None:
    """The device `--actor-device` names; None: the learner's own placement (`default`).

    'cpu' is a CPU device the learner does not use: on a GPU machine the first CPU device; on a
    CPU-only machine (the CLI makes every core a device) the last core the learner leaves free."""
    if cfg.actor_device == "default":
        return None
    cpus = jax.devices("cpu")
    free = [d for d in cpus if d not in placement.devices]
    if not free:
        raise ValueError(f"actor_device='cpu' needs a CPU device the learner does not use, but the learner uses "
                         f"all {len(cpus)} ({placement.describe()}): pass --devices {max(len(cpus) - 1, 1)} (on a "
                         "CPU the CLI makes each core a device; a library caller sets "
                         "runtime.configure_cpu_runtime() before JAX starts)")
    return free[-1]


class JaxActor:
    """The jitted on-device rollout, on the learner's placement or on a device of its own."""

    def __init__(self, c: Components, placement: Placement, state: TrainState, device: Any | None):
        num_seeds = c.cfg.num_seeds
        shardings = placement.shardings(state)
        self._learner_rollout_sharding = shardings.rollout
        self._device = device
        self._source = self._params = None

        def collect_fn(params, rollout_state):
            rollout_state, trajectory = over_seeds(c.rollout.collect, num_seeds)(params, rollout_state)
            if device is None:
                rollout_state = jax.lax.with_sharding_constraint(rollout_state, shardings.rollout)
            return rollout_state, trajectory

        params, rollout = state.learner.params, state.rollout
        self.unpack = lambda trajectory: trajectory  # noqa: E731 -- applied by the learner, inside its jit
        if device is None:
            self._collect = jax.jit(collect_fn).lower(params, rollout).compile()
            # the learner is compiled for the trajectory exactly as collect lays it out
            _, trajectory = jax.eval_shape(collect_fn, params, rollout)
            _, out_shardings = self._collect.output_shardings
            self.trajectory = jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
                                           trajectory, out_shardings)
            warm_up(self._collect, params, rollout)
        else:
            # params and trajectory cross devices packed, each as one flat array: a copy per leaf
            # cost ~70 us (27 leaves) on the 2-core CPU, one copy of the packed array a few
            _, unravel_params = ravel_pytree(jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), params))
            _, trajectory = jax.eval_shape(collect_fn, params, rollout)
            _, self.unpack = ravel_pytree(jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), trajectory))

            def collect_packed(flat_params, rollout_state):
                rollout_state, trajectory = collect_fn(unravel_params(flat_params), rollout_state)
                return rollout_state, ravel_pytree(trajectory)[0]

            replicated = jax.sharding.NamedSharding(placement.mesh, jax.sharding.PartitionSpec())
            self._pack_params = jax.jit(lambda p: ravel_pytree(p)[0], out_shardings=replicated)
            flat_params, rollout = jax.device_put((self._pack_params(params), rollout), device)
            self._collect = jax.jit(collect_packed).lower(flat_params, rollout).compile()
            _, packed = jax.eval_shape(collect_packed, flat_params, rollout)
            self._out_shardings = replicated
            self.trajectory = jax.ShapeDtypeStruct(packed.shape, packed.dtype, sharding=replicated)
            warm_up(self._collect, flat_params, rollout)
        self._timings = dict.fromkeys(HOST_TIMING_FIELDS, 0.0)

    def collect(self, params, rollout_state):
        if self._device is None:
            return self._collect(params, rollout_state)
        start = time.perf_counter()
        if params is not self._source:  # once per version: the store hands out the same object
            self._params, self._source = jax.device_put(self._pack_params(params), self._device), params
        rollout_state = jax.device_put(rollout_state, self._device)  # a no-op once it lives there
        transfer_s = time.perf_counter() - start
        tick = time.perf_counter()
        rollout_state, trajectory = self._collect(self._params, rollout_state)
        jax.block_until_ready(trajectory)
        inference_s = time.perf_counter() - tick
        tick = time.perf_counter()
        trajectory = jax.block_until_ready(jax.device_put(trajectory, self._out_shardings))
        self._timings = {"env_s": 0.0, "inference_s": inference_s,
                         "transfer_s": transfer_s + time.perf_counter() - tick}
        return rollout_state, trajectory

    def timings(self) -> dict:
        return dict(self._timings)

    def to_learner(self, rollout_state):
        return rollout_state if self._device is None else jax.device_put(rollout_state,
                                                                        self._learner_rollout_sharding)

    def close(self) -> None:
        pass


class HostActors:
    """`num_actors` host actors, each stepping `num_envs / num_actors` envs in a thread of its own
    (one actor steps in the caller's thread); their trajectories are joined along B."""

    def __init__(self, c: Components, placement: Placement, state: TrainState, device: Any | None, start: int):
        cfg, rollout = c.cfg, c.rollout
        assert isinstance(rollout, HostRollout)
        self._n = cfg.num_actors
        shardings = placement.shardings(state)
        self._learner_rollout_sharding = shardings.rollout
        device = device or placement.devices[0]
        per_actor = cfg.num_envs // self._n
        seeds = env_seeds(cfg.seed, start, cfg.num_envs)
        self._out = jax.sharding.SingleDeviceSharding(placement.devices[0])
        parts = rollout if self._n == 1 else rollout.with_num_envs(per_actor)
        self._actors = [parts.actor(seeds[i * per_actor:(i + 1) * per_actor], device,
                                    self._out if self._n == 1 else jax.sharding.SingleDeviceSharding(device))
                        for i in range(self._n)]
        self._pool = concurrent.futures.ThreadPoolExecutor(self._n - 1) if self._n > 1 else None
        params = state.learner.params
        self.trajectory = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self._out),
                                       rollout.trajectory_shape(jax.tree.map(lambda x: x[0], params)))
        self.unpack = lambda trajectory: trajectory  # noqa: E731
        for i, actor in enumerate(self._actors):
            actor.warm_up(params, state.rollout if self._n == 1 else self._split(state.rollout, i, state.rollout.key))

    def _split(self, state, i: int, key):
        b = state.reset.shape[1] // self._n
        part = lambda tree: jax.tree.map(lambda x: x[:, i * b:(i + 1) * b], tree)  # noqa: E731
        return state.replace(env_state=part(state.env_state), obs=part(state.obs), carry=part(state.carry),
                             reset=part(state.reset), noise=part(state.noise), key=key)

    def collect(self, params, rollout_state):
        if self._n == 1:
            return self._actors[0].collect(params, rollout_state)
        # each actor carries its share of the envs' state; the key is split per actor
        keys = jax.vmap(lambda k: jax.random.split(k, self._n))(rollout_state.key)
        states = [self._split(rollout_state, i, keys[:, i]) for i in range(self._n)]
        futures = [self._pool.submit(a.collect, params, s) for a, s in zip(self._actors[1:], states[1:])]
        results = [self._actors[0].collect(params, states[0])] + [f.result() for f in futures]
        tick = time.perf_counter()
        trajectory = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=2),
                                  *[traj for _, traj in results])
        trajectory = jax.block_until_ready(jax.device_put(trajectory, self._out))
        join_s = time.perf_counter() - tick
        join = lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=1)  # noqa: E731
        parts = [s for s, _ in results]
        new_state = parts[0].replace(**{name: jax.tree.map(join, *[getattr(p, name) for p in parts])
                                        for name in ("env_state", "obs", "carry", "reset", "noise")})
        self._last_join_s = join_s
        return jax.device_put(new_state, self._actors[0]._device), trajectory

    def timings(self) -> dict:
        per_actor = [a.timings() for a in self._actors]
        out = {f: float(np.mean([t[f] for t in per_actor])) for f in HOST_TIMING_FIELDS}
        if self._n > 1:
            out["transfer_s"] += self._last_join_s
        return out

    def to_learner(self, rollout_state):
        return jax.device_put(rollout_state, self._learner_rollout_sharding)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for actor in self._actors:
            actor.close()


def make_actor(c: Components, placement: Placement, state: TrainState, start: int) -> JaxActor | HostActors:
    device = actor_device(c.cfg, placement)
    if isinstance(c.rollout, HostRollout):
        return HostActors(c, placement, state, device, start)
    return JaxActor(c, placement, state, device)
