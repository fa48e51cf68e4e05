"""The async mode (`--mode async`): a rollout thread acts while the learner learns.

The actor thread runs the jitted `rollout.collect` with the params the lag
policy allows and double-buffers the results; the learner runs the jitted
`algo.update` on each rollout and publishes the new params to the `ParamStore`.
The same `collect` and `update` as the fused mode, and the same sync step at the
same host syncs (`Run.sync`), so with `lag=0` the two modes reach bit-identical
params and write the same metrics lines in everything but the timings (with
several seeds a reduction such as explained variance may differ in its last
bits: XLA may order it differently inside the fused loop).

The learner never waits for an update between two host syncs: it publishes a fixed lag's
params before they are computed and brings an update's metrics to the host once the next
update is dispatched. On an accelerator the actor's rollout and the learner's update take
turns on one device, which then always has the next program queued rather than idling while
the two threads hand over.

The replay learners (dqn, sac, td3) run the same loop: each fragment the actor hands over is added
to the device buffer by `algo.update` (the buffer alone is donated to the learner's jit, so it
is written in place: `HostHooks.donated`), which then takes `replay_ratio` gradient steps on
it; the actor acts with `Algorithm.behaviour` applied to the params it gets, so DQN's epsilon and SAC's warm-up
follow the env steps taken as in the fused mode. The learner publishes its params every
`sync_interval` updates (versions count updates). The replay ratio is held by the pipeline
itself: one fragment per update, the learner waiting for the actor or the actor for a free
buffer slot (`buffer_size`) and for the params its lag policy names.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from jaxrl_async.algorithms.sgd import env_steps_of
from jaxrl_async.trainer import metrics as metrics_lib
from jaxrl_async.core.programs import over_seeds, warm_up
from jaxrl_async.rollout.collector import HOST_TIMING_FIELDS
from jaxrl_async.trainer.build import Components, all_finite
from jaxrl_async.trainer.asynchronous.pipeline import Lag, ParamStore, RolloutWorker
from jaxrl_async.trainer.run import TRAINING_LOOP, Run, Window
from jaxrl_async.trainer.runtime import collector_paused
from jaxrl_async.trainer.sharding import Placement
from jaxrl_async.types import TrainState

# Per-iteration pipeline timings, averaged over each log window.
TIMING_FIELDS = ("policy_lag", "learner_wait_s", "actor_wait_s", "rollout_s", "update_s", *HOST_TIMING_FIELDS)
# The first rollouts wait on a pipeline still filling: the steady state starts after them.
PIPELINE_FILL = 2


class RolloutFailed(RuntimeError):
    """The actor's rollout raised (an env's step, a host env's simulator): the run failed while it
    trained, not for its input, whatever the error's type (`__cause__` is the actor's error)."""


def compile_learner(c: Components, placement: Placement, state: TrainState, trajectory, unpack=None):
    """AOT-compile the learner's update for `trajectory` (abstract, with the shardings the actor
    hands it over in) and this state's placement (the learner keeps its state's shardings from
    call to call); warmed up on a zero trajectory (the result dropped).

    `learn(learner, trajectory) -> (learner, metrics, update_finite, params_finite)`, the last
    three per seed: only they come to the host. `unpack` (inside the jit) turns what the actor hands
    over into the `Trajectory` (an actor on another device packs it into one array)."""
    num_seeds = c.cfg.num_seeds
    shardings = placement.shardings(state)
    # made once per placement and hand-over (the trajectory as the actor lays it out: `unpack`
    # follows from it) for these pieces (`Components.program`)
    leaves, structure = jax.tree.flatten((shardings.learner, trajectory))
    name = (num_seeds, tuple((x.shape, x.dtype, x.sharding) if hasattr(x, "shape") else x for x in leaves), structure)

    def learn_fn(learner, trajectory):
        if unpack is not None:
            trajectory = unpack(trajectory)

        def learn_one(learner, trajectory):
            learner, update_metrics = c.algo.update(learner, trajectory)
            return (learner, metrics_lib.iteration_metrics(trajectory, update_metrics),
                    metrics_lib.update_is_finite(update_metrics), all_finite(learner.params))

        learner, *outputs = over_seeds(learn_one, num_seeds)(learner, trajectory)
        return jax.lax.with_sharding_constraint(learner, shardings.learner), *outputs

    example = jax.tree.map(lambda x: jax.device_put(np.zeros(x.shape, x.dtype), x.sharding), trajectory)
    if c.algo.host.donated is None:
        # nothing is donated: the learner's params are published, and no output could reuse the trajectory
        learn = c.program(("learn", *name), lambda: jax.jit(learn_fn)).lower(state.learner, trajectory).compile()
        warm_up(learn, state.learner, example)
        return learn

    # a learner whose state holds a part it may overwrite in place (a replay learner's buffer): that
    # part alone is donated; the rest of the learner state holds the published params and is not
    split, join = c.algo.host.donated
    rest, donated = split(state.learner)
    learn_donated = c.program(("learn_donated", *name), lambda: jax.jit(
        lambda rest, donated, trajectory: learn_fn(join(rest, donated), trajectory),
        donate_argnums=1)).lower(rest, donated, trajectory).compile()
    warm_up(learn_donated, rest, donated, example)
    return lambda learner, trajectory: learn_donated(*split(learner), trajectory)


def behaviour_hook(c: Components, state: TrainState):
    """The pipeline's `behaviour(params, version, index)` for a learner with `Algorithm.behaviour`
    (dqn, sac), else None: rollout `index` acts with the published params of `version` as the
    fused mode acts after `index` updates (DQN's epsilon, SAC's warm-up follow the env steps
    taken, `index * num_envs * num_steps`); the params of version `index` are that already."""
    if c.algo.behaviour is None:
        return None
    batch_size = c.cfg.batch_size
    # the env steps counted as the learner counts them (`env_steps_of`), so lag 0 stays the fused run's
    act_params = jax.jit(lambda params, updates: c.algo.behaviour(params, env_steps_of(updates, batch_size)))
    jax.block_until_ready(act_params(state.learner.params, jnp.int32(0)))  # compiled here, not in rollout 0

    def behaviour(params, version: int, index: int):
        return params if version == index else act_params(params, jnp.int32(index))

    return behaviour


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


def compile_pipeline(c: Components, placement: Placement, state: TrainState, start: int = 0):
    """The collector's actor (`Collector.make_actor`: the jitted device rollout, or the host envs'
    actor threads) and the learner compiled for the trajectory as the actor lays it out; both
    warmed up."""
    cfg = c.cfg
    actor = c.rollout.make_actor(placement, state, device=actor_device(cfg, placement), num_seeds=cfg.num_seeds,
                                 seed=cfg.seed, start=start, num_actors=cfg.num_actors, program=c.program)
    try:
        return actor, compile_learner(c, placement, state, actor.trajectory, actor.unpack)
    except BaseException:
        actor.close()
        raise


def older_version_needed(lag: Lag, done: int, sync_interval: int) -> int | None:
    """The version older than `done` that rollout `done` acts with (lag 1: done - 1; with
    sync_interval N > 1 the last published one), else None: what a checkpoint at `done` keeps
    beside the learner (`behaviour_params`) for an exact resume."""
    needed = lag.version_for(done, sync_interval)
    if needed is None:  # latest: the newest version published by `done`
        needed = done // sync_interval * sync_interval
    return needed if needed < done else None


def _param_store(state: TrainState, start: int, saved: dict | None, lag: Lag, sync_interval: int) -> ParamStore:
    """Versions count updates (the learner publishes those that are multiples of sync_interval). A
    resumed run also needs the older version its next rollout acts with (`older_version_needed`)."""
    store = ParamStore()
    older = older_version_needed(lag, start, sync_interval) if start > 0 else None
    if older is not None:
        behaviour = (saved or {}).get("extra", {}).get("behaviour_params")
        # a checkpoint without them (the fused mode's) holds no older params: the current ones stand in (not bit-exact)
        store.publish(state.learner.params if behaviour is None else
                      serialization.from_state_dict(state.learner.params, behaviour), version=older)
    if start % sync_interval == 0:
        store.publish(state.learner.params, version=start)
    return store


class PipelineAccounting:
    """What the async loop counts: each log window's metric and timing sums (handed to the sync
    step as a `Window`), and the steady state's totals for the summary (overlap efficiency,
    learner wait, policy lag), which leave out the pipeline's fill and the host syncs."""

    def __init__(self, start: int, num_updates: int, samples_per_update: int):
        self._steady_from = start + min(PIPELINE_FILL, num_updates - start - 1)
        self._samples_per_update = samples_per_update
        self._train_start = time.perf_counter()
        self._steady_start: float | None = None
        self._host_s_before_steady = 0.0
        self._steady = dict.fromkeys(("rollout_s", "update_s", "learner_wait_s"), 0.0)
        self._lags: list[int] = []
        self._new_window()

    def _new_window(self) -> None:
        self._sums = None
        self._timings = dict.fromkeys(TIMING_FIELDS, 0.0)
        self._window_start: float | None = None
        self._iterations = 0
        self._first_bad: int | None = None

    def start_iteration(self, index: int, host_s: float) -> None:
        now = time.perf_counter()
        if index == self._steady_from:
            self._steady_start, self._host_s_before_steady = now, host_s
        if self._window_start is None:
            self._window_start = now

    def add(self, index: int, metrics: dict, update_finite, timings: dict) -> None:
        """One iteration's metrics ([S] host arrays), finite flags, `TIMING_FIELDS` timings and its
        rollout's `rollout_start`."""
        if self._first_bad is None and not np.all(update_finite):
            self._first_bad = index
        self._sums = metrics if self._sums is None else jax.tree.map(np.add, self._sums, metrics)
        self._timings = {f: self._timings[f] + timings[f] for f in TIMING_FIELDS}
        self._lags.append(timings["policy_lag"])
        self._iterations += 1
        if index >= self._steady_from:
            for f in self._steady:
                self._steady[f] += timings[f]
            # a rollout collected before the steady state began (prefetched while the pipeline
            # filled): only its part inside the steady state overlaps it
            before = self._steady_start - timings["rollout_start"]
            self._steady["rollout_s"] -= min(max(before, 0.0), timings["rollout_s"])

    def window(self, updates_done: int, params_finite) -> Window:
        """The window since the last sync, for the sync step; starts the next one."""
        elapsed = time.perf_counter() - self._window_start
        n = self._iterations
        extra = {f: self._timings[f] / n for f in TIMING_FIELDS}
        extra.update(updates_per_second=n / elapsed, samples_per_update=self._samples_per_update)
        window = Window(updates_done=updates_done, num_iterations=n, elapsed_s=elapsed, sums=self._sums,
                        first_nonfinite_update=self._first_bad, params_finite=params_finite, extra=extra)
        self._new_window()
        return window

    def summary(self, host_s: float) -> dict:
        """`train_s` (the loop's time less the host syncs') and the steady-state figures."""
        end = time.perf_counter()
        steady_start = self._steady_start or self._train_start
        steady_wall = end - steady_start - (host_s - self._host_s_before_steady)
        return {
            "train_s": end - self._train_start - host_s,
            # (rollout + update) / wall over the steady state: 1.0 = no overlap, 2.0 = perfect overlap
            "overlap_efficiency": (self._steady["rollout_s"] + self._steady["update_s"]) / steady_wall,
            "learner_wait_fraction": self._steady["learner_wait_s"] / steady_wall,
            "policy_lag_mean": float(np.mean(self._lags)),
            "policy_lag_max": int(np.max(self._lags)),
        }


@contextlib.contextmanager
def actor_closed(actor):
    """Close the actor's envs and threads however the loop ends; yields a list in which the loop
    puts its rollout worker. An abort at once (a second Ctrl-C) leaves a worker's thread finishing
    the fragment in flight (`RolloutWorker.__exit__`): its envs are left to it, not closed under it
    (a simulator closed mid-step may crash the process), and go with the process."""
    workers: list = []
    try:
        yield workers
    finally:
        if any(worker.alive for worker in workers):
            print("warning: the actor's thread is finishing the fragment in flight; its envs are not closed "
                  "under it", file=sys.stderr, flush=True)
        else:
            actor.close()


def train_async(c: Components, run: Run, state: TrainState, saved: dict | None = None) -> tuple[TrainState, dict]:
    """Train from `run.start_update` to the end of the schedule (or a stop) with the rollout
    thread; `saved` is the checkpoint a resumed run continues from. Returns the state and the
    loop's figures (`compile_s`, `train_s`, `updates_done`, the pipeline's)."""
    cfg = c.cfg
    lag = Lag.parse(cfg.lag)
    compile_start = time.perf_counter()
    start = done = run.start_update
    behaviour = behaviour_hook(c, state)
    with run.compiling(TRAINING_LOOP), collector_paused():
        actor, learn = compile_pipeline(c, run.placement, state, start)
    with actor_closed(actor) as workers:  # its envs and threads are open from the compile on, however the run ends
        run.loop_compiled(state)  # the evaluation compiles on copies: the first call gives the state away
        compile_s = time.perf_counter() - compile_start

        sync_at = set(run.schedule.remaining(start))
        interval = cfg.sync_interval
        store = _param_store(state, start, saved, lag, interval)
        published = 0
        learner, rollout_state = state.learner, state.rollout
        accounting = PipelineAccounting(start, cfg.num_updates, cfg.num_seeds * cfg.batch_size)
        in_flight = None  # the update whose outputs come to the host next: (index, outputs, timings)

        def fetch(update) -> Any:
            """Bring an update's outputs to the host and count them; its `params_finite`."""
            index, outputs, timings = update
            fetch_start = time.perf_counter()
            metrics, update_finite, params_finite = jax.device_get(outputs)
            timings["update_s"] += time.perf_counter() - fetch_start
            accounting.add(index, metrics, update_finite, timings)
            return params_finite

        with RolloutWorker(actor.collect, rollout_state, store, lag=lag, num_rollouts=cfg.num_updates - start,
                           buffer_size=cfg.buffer_size, first_index=start, timings=actor.timings,
                           sync_interval=interval, behaviour=behaviour) as worker:
            workers.append(worker)
            for k in range(start, cfg.num_updates):
                accounting.start_iteration(k, run.host_s)
                wait_start = time.perf_counter()
                try:
                    item = worker.get()
                except Exception as error:  # an env's ValueError is no bad flag: exit 1 with the traceback
                    raise RolloutFailed(f"a rollout failed in the actor thread: {type(error).__name__}: "
                                        f"{error}") from error
                learner_wait_s = time.perf_counter() - wait_start
                update_start = time.perf_counter()
                # only the metrics come to the host: the learner state stays on the device
                learner, *outputs = learn(learner, item.trajectory)
                rollout_state, done = item.rollout_state, k + 1
                if done % interval == 0:
                    # a fixed lag's actor waits for this version anyway: hand it over before it is
                    # computed, so the actor's next rollout is queued on the device behind this update
                    store.publish(learner.params, version=done, wait=lag is Lag.LATEST)
                    published += 1
                # update_s: the learner's time dispatching the update and, below, waiting for its outputs
                update = (k, outputs, {
                    "policy_lag": k - item.version, "learner_wait_s": learner_wait_s,
                    "actor_wait_s": item.actor_wait_s, "rollout_s": item.rollout_s, "rollout_start": item.rollout_start,
                    "update_s": time.perf_counter() - update_start,
                    **{f: item.timings.get(f, 0.0) for f in HOST_TIMING_FIELDS}})
                # the previous update's outputs come to the host now that this one is queued behind it:
                # the learner's host work (and the actor's hand-over) overlaps the device's, which on
                # an accelerator runs both programs in turn and would otherwise idle between them
                if in_flight is not None:
                    fetch(in_flight)
                in_flight = update
                if done not in sync_at:
                    continue
                params_finite, in_flight = fetch(in_flight), None
                # the next rollout may be collected with an older version (lag 1, or a sync interval):
                # keep it for an exact resume
                older = None if lag is Lag.LATEST else older_version_needed(lag, done, interval)
                with worker.held():  # the actor's rollout in flight ends first: a sync's time is not collecting time
                    stop = run.sync(accounting.window(done, params_finite),
                                    TrainState(learner=learner, rollout=actor.to_learner(rollout_state)),
                                    counters={"params_version": store.version},
                                    extra_state=None if older is None else
                                    {"behaviour_params": serialization.to_state_dict(store.get(older))})
                    if stop:
                        worker.stop()  # before the hold ends, so that the actor starts nothing more
                if stop:
                    break
            if in_flight is not None:  # the schedule syncs at its last update; counted all the same
                fetch(in_flight)
        if worker.error is not None:  # the rollout in flight at a stop failed: no later `get` raised it
            raise RolloutFailed(f"a rollout failed in the actor thread as the run stopped (its checkpoint is "
                                f"written): {type(worker.error).__name__}: {worker.error}") from worker.error
    return TrainState(learner=learner, rollout=actor.to_learner(rollout_state)), {
        "compile_s": compile_s, "updates_done": done, "lag": cfg.lag, "params_version": store.version,
        "sync_interval": interval, "params_published": published,
        **accounting.summary(run.host_s)}
