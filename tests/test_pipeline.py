"""Tests for jaxrl_async.trainer.asynchronous.pipeline: versioned params hand-off and the rollout thread.

The pipeline knows nothing about RL, so the real component here is a tiny jitted
`collect(params, state) -> (state, trajectory)` on integer arrays: the state is a
counter, the trajectory `params["w"] * counter`. Integer arithmetic is exact, so a
plain NumPy loop that replays a lag policy is an exact reference.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
import traceback
import tracemalloc
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.trainer.asynchronous import pipeline
from jaxrl_async.trainer.asynchronous.loop import actor_closed
from jaxrl_async.trainer.asynchronous.pipeline import ParamStore, PipelineClosed, RolloutWorker

WIDTH = 3  # params["w"], the counter and the trajectory are all [WIDTH] int32
THREAD_NAME = "rollout-worker"


@jax.jit
def counter_collect(params, counter):
    """Advance the counter; the trajectory is the params times the new counter."""
    counter = counter + 1
    return counter, params["w"] * counter


@jax.jit
def counter_update(params, trajectory):
    """A learner step whose result depends on which params produced the trajectory."""
    return {"w": params["w"] + trajectory + 1}


def initial_params():
    return {"w": jnp.zeros(WIDTH, jnp.int32)}


def initial_counter():
    return jnp.zeros(WIDTH, jnp.int32)


class CountingCollect:
    """The jitted collect, counting calls (and optionally raising on one of them)."""

    def __init__(self, fail_on_call: int | None = None):
        self.calls = 0
        self.fail_on_call = fail_on_call
        self.failed = threading.Event()

    def __call__(self, params, counter):
        self.calls += 1
        if self.calls == self.fail_on_call:
            self.failed.set()
            collect_that_fails_on_third_call()
        return counter_collect(params, counter)


def collect_that_fails_on_third_call():
    raise ArithmeticError("collect blew up on call 3")


def wait_until(condition, timeout_s=10.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.005)


def call_with_timeout(fn, timeout_s=10.0):
    """Run fn in a thread; return ("ok", value) or ("raised", exception); fail if it hangs."""
    outcome = {}

    def target():
        try:
            outcome["ok"] = fn()
        except BaseException as error:  # noqa: BLE001 -- reported to the test
            outcome["raised"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"{fn} still blocked after {timeout_s} s"
    (kind, value), = outcome.items()
    return kind, value


def worker_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


@pytest.fixture(autouse=True)
def no_worker_thread_leaks():
    before = set(worker_threads())
    yield
    leaked = [t for t in worker_threads() if t not in before]
    assert not leaked, f"test left {len(leaked)} rollout-worker thread(s) running"


def run_learner(lag, num_rollouts=8, buffer_size=1):
    """The deterministic learner loop: get rollout k, update, publish version k + 1."""
    store = ParamStore()
    params = initial_params()
    store.publish(params)
    items = []
    with RolloutWorker(CountingCollect(), initial_counter(), store, lag=lag, num_rollouts=num_rollouts,
                       buffer_size=buffer_size) as worker:
        for _ in range(num_rollouts):
            item = worker.get()
            items.append(item)
            params = counter_update(params, item.trajectory)
            store.publish(params)
    return items


def reference_trajectories(behaviour_version, num_rollouts=8):
    """Plain NumPy replay: rollout k acts with params version behaviour_version(k)."""
    versions = [np.zeros(WIDTH, np.int64)]  # versions[v] = params["w"] of version v
    counter = np.zeros(WIDTH, np.int64)
    trajectories = []
    for k in range(num_rollouts):
        counter = counter + 1
        trajectory = versions[behaviour_version(k)] * counter
        trajectories.append(trajectory)
        versions.append(versions[-1] + trajectory + 1)
    return trajectories


# -- ParamStore ------------------------------------------------------------

def test_versions_start_at_zero_and_increase_by_one():
    store = ParamStore()
    assert store.version == -1
    for expected in range(5):
        params = {"w": jnp.full(WIDTH, expected, jnp.int32)}
        assert store.publish(params) == expected
        version, latest = store.latest()
        assert version == expected == store.version
        np.testing.assert_array_equal(latest["w"], np.full(WIDTH, expected))


def test_latest_before_any_publish_raises_lookup_error():
    with pytest.raises(LookupError, match="publish"):
        ParamStore().latest()


def test_history_must_be_positive():
    with pytest.raises(ValueError, match="history=0"):
        ParamStore(history=0)


def _layer(kernel_shape=(2, 3), dtype=jnp.float32):
    return {"dense": {"kernel": jnp.zeros(kernel_shape, dtype), "bias": jnp.zeros(kernel_shape[-1:], dtype)}}


@pytest.mark.parametrize("candidate, leaf", [
    ({"dense": {"kernel": jnp.zeros((2, 3))}}, "['dense']['bias']"),  # a missing key
    ({"dense": {**_layer()["dense"], "scale": jnp.ones(3)}}, "['dense']['scale']"),  # an extra key
    (_layer(kernel_shape=(2, 4)), "['dense']['bias']"),  # shapes changed (bias comes first in tree order)
    ({"dense": {"kernel": jnp.zeros((4, 3)), "bias": jnp.zeros(3)}}, "['dense']['kernel']"),  # one shape
    ({"dense": {"kernel": jnp.zeros((2, 3), jnp.int32), "bias": jnp.zeros(3)}}, "['dense']['kernel']"),
    (_layer(dtype=jnp.bfloat16), "['dense']['bias']"),  # dtypes changed
], ids=["missing-key", "extra-key", "all-shapes", "one-shape", "one-dtype", "all-dtypes"])
def test_publishing_a_different_tree_names_the_first_mismatching_leaf(candidate, leaf):
    store = ParamStore()
    store.publish(_layer())
    with pytest.raises(ValueError) as excinfo:
        store.publish(candidate)
    assert leaf in str(excinfo.value)
    # a rejected tree is not published
    assert store.version == 0
    assert store.latest()[1]["dense"]["kernel"].shape == (2, 3)


def test_publish_relies_on_no_deprecated_dtype_conversion():
    # np.result_type(jax_array) goes through jax.Array.__numpy_dtype__, deprecated by JAX
    # ("in the future this will result in an error"): every publish would then fail
    store = ParamStore()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.publish(_layer())
        store.publish(_layer())
        with pytest.raises(ValueError, match=r"\['dense'\]\['kernel'\]"):
            store.publish({"dense": {"kernel": jnp.zeros((2, 3), jnp.int32), "bias": jnp.zeros(3)}})
    deprecations = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert deprecations == []


def test_same_tree_with_new_values_is_accepted():
    store = ParamStore()
    store.publish(_layer())
    assert store.publish(jax.tree.map(lambda x: x + 1, _layer())) == 1


def test_publish_waits_for_the_values_only_when_told_to(monkeypatch):
    # the async learner publishes a fixed lag's versions unwaited, so that the actor's next rollout
    # is queued behind the update on the device (the CPU runtime dispatches synchronously, so the
    # wait is watched, not seen: the real block_until_ready, spied on)
    waited = []
    real = pipeline.jax.block_until_ready
    monkeypatch.setattr(pipeline.jax, "block_until_ready", lambda tree: waited.append(tree) or real(tree))
    store = ParamStore()
    first, second = _layer(), jax.tree.map(lambda x: x + 1, _layer())
    store.publish(first, wait=False)
    assert waited == [] and store.latest() == (0, first)
    store.publish(second)
    assert waited == [second] and store.latest() == (1, second)


def test_readers_never_see_a_torn_pair_or_a_version_going_backwards():
    num_versions = 1500
    store = ParamStore()
    store.publish({"w": jnp.full(WIDTH, 0, jnp.int32)})
    observed = []
    done = threading.Event()

    def reader():
        while not done.is_set():
            version, params = store.latest()
            observed.append((version, np.asarray(params["w"])))

    thread = threading.Thread(target=reader, daemon=True)
    # The GIL passes between the threads every 5 ms by default; every 10 us they interleave more
    # finely. On a busy machine the OS still runs each thread in slices of milliseconds (9 versions
    # seen over the whole loop, a CI run), so every 100 versions the writer also waits until the
    # reader has seen the newest one: at least 15 versions are seen, whatever the scheduling.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread.start()
    try:
        for version in range(1, num_versions):
            assert store.publish({"w": jnp.full(WIDTH, version, jnp.int32)}) == version
            deadline = time.monotonic() + 10
            while version % 100 == 0 and (not observed or observed[-1][0] < version) and time.monotonic() < deadline:
                time.sleep(1e-4)
    finally:
        done.set()
        thread.join(10)
        sys.setswitchinterval(switch_interval)
    assert not thread.is_alive()
    assert len(observed) > 100, "the reader barely ran; the test says nothing"
    assert len({version for version, _ in observed}) > 10, "the reader saw too few versions to say anything"
    for (version, w), (next_version, _) in zip(observed, observed[1:]):
        np.testing.assert_array_equal(w, np.full(WIDTH, version), err_msg=f"torn pair at version {version}")
        assert next_version >= version, f"version went back from {version} to {next_version}"
    np.testing.assert_array_equal(observed[-1][1], np.full(WIDTH, observed[-1][0]))


def test_wait_for_returns_exactly_the_requested_version():
    store = ParamStore(history=2)
    for version in range(3):
        store.publish({"w": jnp.full(WIDTH, version, jnp.int32)})
    stop = threading.Event()
    for version in (1, 2):  # history 2 holds the two newest
        got_version, params = store.wait_for(version, stop)
        assert got_version == version
        np.testing.assert_array_equal(params["w"], np.full(WIDTH, version))
    with pytest.raises(LookupError, match="version 0 is not held"):
        store.wait_for(0, stop)


def test_wait_for_blocks_until_the_version_is_published():
    store = ParamStore()
    store.publish({"w": jnp.full(WIDTH, 0, jnp.int32)})
    stop = threading.Event()
    result = {}
    waiter = threading.Thread(target=lambda: result.update(got=store.wait_for(2, stop)), daemon=True)
    waiter.start()
    store.publish({"w": jnp.full(WIDTH, 1, jnp.int32)})
    time.sleep(0.1)
    assert waiter.is_alive() and not result, "wait_for(2) returned with only version 1 published"
    store.publish({"w": jnp.full(WIDTH, 2, jnp.int32)})
    store.publish({"w": jnp.full(WIDTH, 3, jnp.int32)})
    waiter.join(5)
    version, params = result["got"]
    assert version == 2  # exactly the version asked for, even once a newer one exists
    np.testing.assert_array_equal(params["w"], np.full(WIDTH, 2))


def test_wait_for_raises_pipeline_closed_when_stopped():
    store = ParamStore()
    store.publish(initial_params())
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    start = time.perf_counter()
    kind, error = call_with_timeout(lambda: store.wait_for(5, stop), timeout_s=5)
    assert kind == "raised" and isinstance(error, PipelineClosed), error
    assert 0.05 < time.perf_counter() - start < 2


# -- RolloutWorker: lag policies ---------------------------------------------

def test_lag_0_rollout_k_uses_version_k():
    items = run_learner("0")
    assert [item.index for item in items] == list(range(8))
    assert [item.version for item in items] == list(range(8))
    expected = reference_trajectories(lambda k: k)
    for item, trajectory in zip(items, expected):
        np.testing.assert_array_equal(item.trajectory, trajectory)


def test_lag_1_rollout_k_uses_version_k_minus_1():
    items = run_learner("1")
    assert [item.version for item in items] == [0, 0, 1, 2, 3, 4, 5, 6]
    assert [item.index - item.version for item in items][1:] == [1] * 7
    expected = reference_trajectories(lambda k: max(k - 1, 0))
    for item, trajectory in zip(items, expected):
        np.testing.assert_array_equal(item.trajectory, trajectory)


def test_lag_accepts_an_int():
    assert [item.version for item in run_learner(1, num_rollouts=3)] == [0, 0, 1]


@pytest.mark.parametrize("lag", ["0", "1"])
def test_fixed_lag_trajectories_are_deterministic(lag):
    first = [np.asarray(item.trajectory) for item in run_learner(lag, buffer_size=2)]
    second = [np.asarray(item.trajectory) for item in run_learner(lag, buffer_size=2)]
    np.testing.assert_array_equal(np.stack(first), np.stack(second))
    assert np.stack(first).max() > 1000  # the params really fed back into later rollouts


def test_latest_versions_never_decrease_and_match_the_trajectory():
    store = ParamStore()
    params = initial_params()
    store.publish(params)
    versions_seen = {0: np.asarray(params["w"])}
    items = []
    with RolloutWorker(CountingCollect(), initial_counter(), store, lag="latest", num_rollouts=20) as worker:
        for k in range(20):
            item = worker.get()
            items.append(item)
            if k % 3 == 0:
                time.sleep(0.01)  # let the actor run ahead now and then
            params = counter_update(params, item.trajectory)
            versions_seen[store.publish(params)] = np.asarray(params["w"])
    versions = [item.version for item in items]
    assert versions == sorted(versions)
    assert all(0 <= item.version <= item.index for item in items)
    for item in items:  # the version recorded is the version the rollout acted with
        np.testing.assert_array_equal(item.trajectory, versions_seen[item.version] * (item.index + 1))


@pytest.mark.parametrize("buffer_size", [1, 3])
def test_a_full_buffer_blocks_the_actor(buffer_size):
    store = ParamStore()
    store.publish(initial_params())
    collect = CountingCollect()
    with RolloutWorker(collect, initial_counter(), store, lag="latest", buffer_size=buffer_size) as worker:
        wait_until(lambda: collect.calls >= buffer_size + 1, what="the buffer to fill")
        time.sleep(0.3)
        assert collect.calls == buffer_size + 1  # buffer_size waiting, one held for the next free slot
        assert worker.get().index == 0
        wait_until(lambda: collect.calls >= buffer_size + 2, what="the freed slot to be used")
        time.sleep(0.2)
        assert collect.calls == buffer_size + 2


@pytest.mark.parametrize("lag, rollouts_before_version_1", [("0", 1), ("1", 2)])
def test_actor_waits_for_the_params_its_lag_policy_needs(lag, rollouts_before_version_1):
    store = ParamStore()
    store.publish(initial_params())
    collect = CountingCollect()
    with RolloutWorker(collect, initial_counter(), store, lag=lag, buffer_size=4) as worker:
        wait_until(lambda: collect.calls >= rollouts_before_version_1, what="the first rollouts")
        time.sleep(0.3)
        # lag 1 collects rollout 1 with version 0 while the learner is still learning: the overlap
        assert collect.calls == rollouts_before_version_1
        store.publish({"w": jnp.ones(WIDTH, jnp.int32)})
        wait_until(lambda: collect.calls >= rollouts_before_version_1 + 1, what="a rollout with version 1")
        assert [worker.get().version for _ in range(rollouts_before_version_1 + 1)][-1] == 1


def test_held_waits_for_the_rollout_in_flight_and_starts_none_until_released():
    """The loop's host syncs run `held()`: the time they take is no actor's collecting time."""
    store = ParamStore()
    store.publish(initial_params())
    started, finished = [], []

    def slow_collect(params, counter):
        started.append(time.monotonic())
        time.sleep(0.2)
        finished.append(time.monotonic())
        return counter_collect(params, counter)

    with RolloutWorker(slow_collect, initial_counter(), store, lag="latest", buffer_size=8) as worker:
        wait_until(lambda: len(started) == 1, what="the first rollout to start")
        with worker.held():
            entered = time.monotonic()
            assert len(finished) == 1 and finished[0] <= entered  # the rollout in flight ended first
            time.sleep(0.5)  # a host sync: nothing starts meanwhile
            assert len(started) == 1
            released = time.monotonic()
        wait_until(lambda: len(started) >= 2, what="the next rollout after the hold")
        assert started[1] >= released
        assert [worker.get().index for _ in range(2)] == [0, 1]


@pytest.mark.parametrize("how", ["stop", "raise"])
def test_a_run_that_ends_at_a_held_sync_starts_no_rollout_after_it(how):
    """A stop decided at a sync (Ctrl-C, SIGTERM, stop_after_updates), or an error in it: the actor
    starts nothing once the hold ends, so `close` does not wait for a whole new fragment (a slow
    host env's may take longer than it waits)."""
    store = ParamStore()
    store.publish(initial_params())
    started = []

    def slow_collect(params, counter):
        started.append(time.monotonic())
        time.sleep(0.5)
        return counter_collect(params, counter)

    worker = RolloutWorker(slow_collect, initial_counter(), store, lag="latest", buffer_size=8, join_timeout_s=5)
    wait_until(lambda: len(started) == 1, what="the first rollout to start")
    with contextlib.suppress(RuntimeError), worker.held():
        if how == "stop":
            worker.stop()
        else:
            raise RuntimeError("the sync failed")
    released = time.monotonic()
    time.sleep(0.1)  # time enough for a rollout to start, were one allowed to
    closing = time.monotonic()
    worker.close()
    assert time.monotonic() - closing < 0.25  # nothing in flight to wait for (before: the rest of a 0.5 s fragment)
    assert len(started) == 1 and started[0] < released


def _blocked_worker(**kwargs):
    """A worker whose first rollout is in flight until `release` is set (a slow simulator's fragment)."""
    store = ParamStore()
    store.publish(initial_params())
    started, release = threading.Event(), threading.Event()

    def blocked_collect(params, counter):
        started.set()
        release.wait(30)
        return counter_collect(params, counter)

    worker = RolloutWorker(blocked_collect, initial_counter(), store, lag="latest", **kwargs)
    assert started.wait(10)
    return worker, release


def test_an_abort_at_once_waits_not_for_the_fragment_in_flight():
    """A second Ctrl-C raises KeyboardInterrupt through the worker: it stops the actor and goes on at
    once, leaving the fragment in flight to end on its own (before: it waited up to the join timeout,
    then raised a RuntimeError in the KeyboardInterrupt's place)."""
    worker, release = _blocked_worker(join_timeout_s=5)
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt), worker:
            raise KeyboardInterrupt
        assert time.monotonic() - start < pipeline.ABORT_JOIN_S + 2.0  # not the 5 s join timeout
        assert worker.alive  # still in its fragment
    finally:
        release.set()
    wait_until(lambda: not worker.alive, what="the actor to end after its fragment")


def test_a_learner_error_stays_the_one_raised_when_the_actor_outlives_the_join():
    worker, release = _blocked_worker(join_timeout_s=0.2)
    try:
        with pytest.raises(ValueError, match="the learner failed") as info, worker:
            raise ValueError("the learner failed")
        assert "rollout worker did not stop within 0.2 s" in "".join(info.value.__notes__)
    finally:
        release.set()
    wait_until(lambda: not worker.alive, what="the actor to end after its fragment")


def test_the_actors_envs_are_not_closed_under_a_thread_still_stepping_them(capsys):
    class Actor:
        closed = 0

        def close(self):
            self.closed += 1

    worker, release = _blocked_worker(join_timeout_s=5)
    actor = Actor()
    try:
        with pytest.raises(KeyboardInterrupt), actor_closed(actor) as workers, worker:
            workers.append(worker)
            raise KeyboardInterrupt
        assert actor.closed == 0 and "its envs are not closed under it" in capsys.readouterr().err
    finally:
        release.set()
    wait_until(lambda: not worker.alive, what="the actor to end after its fragment")
    with actor_closed(actor) as workers:  # a worker that ended: its actor is closed
        workers.append(worker)
    assert actor.closed == 1


# -- RolloutWorker: errors --------------------------------------------------

def test_actor_exception_reaches_the_learner_with_its_traceback():
    store = ParamStore()
    store.publish(initial_params())
    collect = CountingCollect(fail_on_call=3)
    worker = RolloutWorker(collect, initial_counter(), store, lag="1", num_rollouts=10, join_timeout_s=5)
    try:
        received, error = [], None
        for _ in range(10):
            kind, value = call_with_timeout(worker.get, timeout_s=10)
            if kind == "raised":
                error = value
                break
            received.append(value.index)
            store.publish({"w": jnp.full(WIDTH, len(received), jnp.int32)})  # lag 1 needs the next version
        assert type(error) is ArithmeticError and str(error) == "collect blew up on call 3", repr(error)
        assert received in ([], [0], [0, 1])  # an error wins over rollouts still buffered
        formatted = "".join(traceback.format_exception(error))
        assert "collect_that_fails_on_third_call" in formatted
        assert not worker.alive
    finally:
        worker.close()


def test_actor_exception_with_a_full_buffer_is_raised_promptly():
    """Rollout 1 fills the buffer, then rollout 2 fails: get() must raise at once, not
    wait on a thread that is itself waiting for a free slot for its end marker."""
    store = ParamStore()
    store.publish(initial_params())
    collect = CountingCollect(fail_on_call=3)
    worker = RolloutWorker(collect, initial_counter(), store, lag="latest", num_rollouts=10,
                           buffer_size=1, join_timeout_s=3)
    try:
        assert worker.get().index == 0
        assert collect.failed.wait(5)
        time.sleep(0.2)  # the actor has recorded the error and holds its end marker
        start = time.perf_counter()
        with pytest.raises(ArithmeticError, match="collect blew up on call 3"):
            worker.get()
        assert time.perf_counter() - start < 1.0, "get() waited on the actor's join timeout"
        assert not worker.alive
    finally:
        worker.close()


def test_get_after_the_last_rollout_raises_pipeline_closed():
    store = ParamStore()
    store.publish(initial_params())
    with RolloutWorker(CountingCollect(), initial_counter(), store, lag="latest", num_rollouts=2) as worker:
        assert [worker.get().index for _ in range(2)] == [0, 1]
        for _ in range(2):  # and again: it stays closed
            kind, error = call_with_timeout(worker.get, timeout_s=5)
            assert kind == "raised" and isinstance(error, PipelineClosed), error
        assert not worker.alive


def test_get_after_close_raises_pipeline_closed():
    store = ParamStore()
    store.publish(initial_params())
    worker = RolloutWorker(CountingCollect(), initial_counter(), store, lag="latest")
    worker.close()
    worker.close()  # twice is fine
    kind, error = call_with_timeout(worker.get, timeout_s=5)
    assert kind == "raised" and isinstance(error, PipelineClosed), error


@pytest.mark.parametrize("kwargs, message", [
    (dict(lag="2"), "lag='2'"),
    (dict(lag="newest"), "lag='newest'"),
    (dict(lag=-1), "lag='-1'"),
    (dict(buffer_size=0), "buffer_size=0"),
])
def test_invalid_arguments_raise_value_error(kwargs, message):
    store = ParamStore()
    store.publish(initial_params())
    before = len(worker_threads())
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        RolloutWorker(CountingCollect(), initial_counter(), store, **kwargs)
    assert len(worker_threads()) == before  # no thread started for a bad config


# -- RolloutWorker: lifecycle -------------------------------------------------

def _open_and_close(cycle: int) -> float:
    """One worker life, closed in one of three states; returns how long close() took."""
    scenario = cycle % 3
    store = ParamStore()
    collect = CountingCollect()
    if scenario == 0:  # closed while blocked on a full buffer
        store.publish(initial_params())
        worker = RolloutWorker(collect, initial_counter(), store, lag="latest", buffer_size=1)
        wait_until(lambda: collect.calls >= 2, what="the buffer to fill")
    elif scenario == 1:  # closed while waiting for params nobody published
        worker = RolloutWorker(collect, initial_counter(), store, lag="0")
        time.sleep(0.01)
    else:  # closed mid-stream after the learner took a rollout
        store.publish(initial_params())
        worker = RolloutWorker(collect, initial_counter(), store, lag="1", buffer_size=2)
        worker.get()
    start = time.perf_counter()
    worker.close()
    elapsed = time.perf_counter() - start
    assert not worker.alive
    if scenario == 1:
        assert collect.calls == 0
    return elapsed


def test_open_close_many_times_leaks_neither_threads_nor_memory():
    for cycle in range(6):  # warm up: compile, caches, thread-local state
        _open_and_close(cycle)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        close_times = [_open_and_close(cycle) for cycle in range(50)]
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    growth = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert growth < 1_000_000, f"memory grew by {growth} bytes over 50 workers"
    assert max(close_times) < 3.0, f"slowest close took {max(close_times):.2f} s"
    assert worker_threads() == []


def test_context_manager_joins_the_thread_when_the_body_raises():
    store = ParamStore()
    store.publish(initial_params())
    with pytest.raises(KeyError, match="learner failed"):
        with RolloutWorker(CountingCollect(), initial_counter(), store, lag="1") as worker:
            worker.get()
            raise KeyError("learner failed")
    assert not worker.alive
    assert worker_threads() == []
