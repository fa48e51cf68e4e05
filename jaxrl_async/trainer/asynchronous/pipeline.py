"""The async pipeline: versioned parameter hand-off and a double-buffering rollout thread.

    store = ParamStore()
    store.publish(learner.params)                      # version 0
    with RolloutWorker(collect, rollout_state, store, lag=1, num_rollouts=n) as worker:
        for _ in range(n):
            item = worker.get()                        # (version, trajectory, timings)
            learner = update(learner, item.trajectory)
            store.publish(learner.params)              # version k + 1

Nothing here knows about RL: `collect(params, rollout_state) -> (rollout_state,
trajectory)` is any jitted function. Lag policies (which params rollout k uses):

- `0`: version k, the newest: lock step, deterministic, identical to the fused mode;
- `1`: version k - 1 (0 for the first two): deterministic, acting overlaps learning;
- `latest`: whatever is newest when the rollout starts: fastest, not reproducible.

Versions count updates. A learner that publishes only every `sync_interval` = N updates
(`store.publish(params, version=k)` for k a multiple of N) has its fixed lags rounded down
to the published versions: rollout k uses version N floor(k / N) (lag 0) or
N floor((k - 1) / N) (lag 1). `behaviour(params, version, index)`, if given, turns the
published params into those rollout `index` acts with (e.g. an exploration rate that follows
the env steps taken rather than the version's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import queue
import threading
import time
from typing import Any, Callable

import jax

from jaxrl_async.core.trees import check_same_tree, leaf_spec


class Lag(enum.Enum):
    """Which params version rollout k is collected with (the `--lag` flag's values)."""

    LOCKSTEP = "0"  # version k: lock step, identical to the fused mode
    ONE = "1"  # version k - 1 (0 for the first two): deterministic and overlapped
    LATEST = "latest"  # whatever is newest when the rollout starts

    @classmethod
    def parse(cls, value: "Lag | str | int") -> "Lag":
        """The policy a flag value names (`0`, `1`, `latest`; ints too); a clear error otherwise."""
        if isinstance(value, Lag):
            return value
        try:
            return cls(str(value))
        except ValueError:
            raise ValueError(f"lag={str(value)!r} is invalid: choose one of "
                             f"{', '.join(lag.value for lag in cls)}") from None

    def version_for(self, index: int, sync_interval: int = 1) -> int | None:
        """The params version rollout `index` must use when versions are published every
        `sync_interval` updates; None: the latest published."""
        if self is Lag.LOCKSTEP:
            return index // sync_interval * sync_interval
        if self is Lag.ONE:
            return max(index - 1, 0) // sync_interval * sync_interval
        return None


class PipelineClosed(RuntimeError):
    """The worker stopped (closed, or ran out of rollouts) while someone waited on it."""


class ParamStore:
    """Holds the latest `(version, params)`, plus a short history for the fixed-lag policy.

    `publish` checks the params against the first published tree, then rebinds one
    reference, so a reader never sees a torn (version, params) pair and versions never
    go backwards. Published arrays must not be donated afterwards: a reader may hold them.
    """

    def __init__(self, history: int = 2, first_version: int = 0):
        if history < 1:
            raise ValueError(f"history={history} must be >= 1")
        self._history = history
        self._first_version = first_version  # a resumed run continues its numbering
        self._latest: tuple[int, Any] | None = None
        self._recent: dict[int, Any] = {}
        self._reference: Any = None
        self._changed = threading.Condition()

    def publish(self, params: Any, version: int | None = None, wait: bool = True) -> int:
        """Publish `params` as `version` (default: the newest + 1, or `first_version`); versions
        may skip (a learner that publishes every N updates numbers them by update) but never
        go backwards. `wait`: first wait until the params are computed. Without it a reader may
        get arrays still being computed, and its first use of them waits: right for a reader
        that asks for a fixed version (it would wait for that version anyway, and a rollout
        dispatched on the learner's device queues behind the update, keeping the device busy),
        wrong for one that takes the latest so as not to wait."""
        if wait:
            params = jax.block_until_ready(params)
        if self._reference is None:
            self._reference = jax.tree.map(lambda x: jax.ShapeDtypeStruct(*leaf_spec(x)), params)
        else:
            check_same_tree(self._reference, params)
        with self._changed:
            if version is None:
                version = self._first_version if self._latest is None else self._latest[0] + 1
            elif self._latest is not None and version <= self._latest[0]:
                raise ValueError(f"version {version} must be newer than the latest published, {self._latest[0]}")
            self._recent[version] = params
            for old in sorted(self._recent)[:-self._history]:  # keep the newest `history` versions
                del self._recent[old]
            self._latest = (version, params)  # the one atomic rebinding readers see
            self._changed.notify_all()
        return version

    def latest(self) -> tuple[int, Any]:
        latest = self._latest
        if latest is None:
            raise LookupError("nothing published yet: call publish(params) first")
        return latest

    @property
    def version(self) -> int:
        return self._first_version - 1 if self._latest is None else self._latest[0]

    def get(self, version: int) -> Any:
        """The params of a version still held (the newest `history` versions)."""
        try:
            return self._recent[version]
        except KeyError:
            raise LookupError(f"params version {version} is not held (newest {self.version}, "
                              f"history {self._history})") from None

    def wait_for(self, version: int, stop: threading.Event, poll_s: float = 0.05) -> tuple[int, Any]:
        """Block until `version` is published; return exactly that version's params."""
        with self._changed:
            while self.version < version:
                if stop.is_set():
                    raise PipelineClosed("stopped while waiting for params")
                self._changed.wait(poll_s)
            return version, self.get(version)


@dataclasses.dataclass(frozen=True)
class RolloutItem:
    """One collected rollout as the learner receives it."""

    index: int  # rollout number k, from 0
    version: int  # params version it was collected with
    trajectory: Any
    rollout_state: Any  # the actor's state right after this rollout (for checkpoints)
    rollout_s: float  # time inside the jitted rollout
    actor_wait_s: float  # time the actor waited, before this rollout, for params and for a free slot
    timings: dict = dataclasses.field(default_factory=dict)  # the collect's own split of rollout_s, if it gives one
    rollout_start: float = 0.0  # `time.perf_counter()` when the rollout began (a prefetched one's is before its use)


_END = object()
ABORT_JOIN_S = 1.0  # how long an abort (a KeyboardInterrupt through `__exit__`) waits for the actor's thread


class RolloutWorker:
    """A background thread that collects rollouts into a bounded buffer.

    An exception in the thread reaches the learner at its next `get()` (the
    original exception, with its traceback). `close()` (also on `__exit__`) stops
    and joins the thread; it is safe to call more than once.
    """

    def __init__(self, collect: Callable, rollout_state: Any, store: ParamStore, *, lag: Lag | str | int = Lag.ONE,
                 num_rollouts: int | None = None, buffer_size: int = 1, first_index: int = 0,
                 join_timeout_s: float = 60.0, timings: Callable[[], dict] | None = None,
                 sync_interval: int = 1, behaviour: Callable[[Any, int, int], Any] | None = None):
        """`timings()`, if given, is called after each collect (in the actor's thread) and its dict
        travels with the rollout (`RolloutItem.timings`). `sync_interval`: the learner publishes
        every that many versions (the fixed lags wait for published ones); `behaviour(params,
        version, index)`, if given, makes the params rollout `index` acts with (timed with it)."""
        lag = Lag.parse(lag)
        if buffer_size < 1:
            raise ValueError(f"buffer_size={buffer_size} must be >= 1")
        if sync_interval < 1:
            raise ValueError(f"sync_interval={sync_interval} must be >= 1")
        self.lag = lag
        self._sync_interval = sync_interval
        self._behaviour = behaviour
        self._collect = collect
        self._timings = timings
        self._state = rollout_state
        self._store = store
        self._num_rollouts = num_rollouts
        self._first_index = first_index
        self._join_timeout_s = join_timeout_s
        self._buffer: queue.Queue = queue.Queue(maxsize=buffer_size)
        self._stop = threading.Event()
        self._hold = threading.Condition()  # `held()`: no rollout starts while the learner holds the actor
        self._holding = self._collecting = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rollout-worker", daemon=True)
        self._thread.start()

    # -- actor side ------------------------------------------------------
    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._buffer.put(item, timeout=0.05)
                return
            except queue.Full:
                continue
        raise PipelineClosed("stopped while waiting for a free buffer slot")

    def _run(self) -> None:
        try:
            index = self._first_index
            blocked_s = 0.0  # time the previous item waited for a free slot
            while not self._stop.is_set() and (self._num_rollouts is None
                                               or index < self._first_index + self._num_rollouts):
                wait_start = time.perf_counter()
                wanted = self.lag.version_for(index, self._sync_interval)
                version, params = (self._store.latest() if wanted is None
                                   else self._store.wait_for(wanted, self._stop))
                if not self._start_collecting():  # stopped while the learner held it: no rollout after a stop
                    break
                actor_wait_s = blocked_s + time.perf_counter() - wait_start
                start = time.perf_counter()
                try:
                    if self._behaviour is not None:
                        params = self._behaviour(params, version, index)
                    self._state, trajectory = self._collect(params, self._state)
                    jax.block_until_ready(trajectory)
                finally:
                    self._stop_collecting()
                rollout_s = time.perf_counter() - start
                put_start = time.perf_counter()
                timings = self._timings() if self._timings is not None else {}
                self._put(RolloutItem(index, version, trajectory, self._state, rollout_s, actor_wait_s, timings,
                                      rollout_start=start))
                blocked_s = time.perf_counter() - put_start
                index += 1
        except PipelineClosed:
            pass
        except BaseException as error:  # noqa: BLE001 -- handed to the learner, never lost
            self._error = error
        finally:
            try:
                self._put(_END)
            except PipelineClosed:
                pass

    def _start_collecting(self) -> bool:
        """Wait while the learner holds the actor; False, starting nothing, where the pipeline
        stopped meanwhile (a stop decided at a sync, an error in it)."""
        with self._hold:
            while self._holding and not self._stop.is_set():
                self._hold.wait(0.05)
            if self._stop.is_set():
                return False
            self._collecting = True
            return True

    def _stop_collecting(self) -> None:
        with self._hold:
            self._collecting = False
            self._hold.notify_all()

    # -- learner side ----------------------------------------------------
    @contextlib.contextmanager
    def held(self):
        """Hold the actor for the block's duration: the rollout in flight (if any) finishes first, and
        no new one starts until the block ends. The loop's host syncs (evaluation, checkpoints) run
        held, so the time they take, counted apart from training, is not time the actor spent
        collecting: without it, the fragments an actor made during a long evaluation on host envs
        counted as steps trained in no time. Results are unchanged (the lag policy fixes each
        rollout's params). A block that raises, or calls `stop`, stops the actor before it lets
        go: no rollout starts after a run's last sync (a fragment of slow host envs can take
        longer than `close` waits)."""
        with self._hold:
            self._holding = True
            while self._collecting and self._thread.is_alive():
                self._hold.wait(0.05)
        try:
            yield
        except BaseException:
            self._stop.set()
            raise
        finally:
            with self._hold:
                self._holding = False
                self._hold.notify_all()

    def get(self, poll_s: float = 0.05) -> RolloutItem:
        """The next rollout; re-raises the actor's exception if it failed."""
        while True:
            if self._error is not None:  # an error wins over rollouts still buffered
                self._stop.set()  # the actor may be blocked putting its end marker into a full buffer
                self._thread.join(self._join_timeout_s)
                raise self._error
            try:
                item = self._buffer.get(timeout=poll_s)
            except queue.Empty:
                if not self._thread.is_alive() and self._buffer.empty():
                    item = _END
                else:
                    continue
            if item is _END:
                self._thread.join(self._join_timeout_s)
                if self._error is not None:
                    raise self._error
                raise PipelineClosed("the rollout worker has no more rollouts")
            return item

    def stop(self) -> None:
        """Start no more rollouts (the one in flight ends); `close` then joins the actor."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self._join_timeout_s)
        if self._thread.is_alive():
            raise RuntimeError(f"rollout worker did not stop within {self._join_timeout_s} s")
        while not self._buffer.empty():  # drop references to unread trajectories
            self._buffer.get_nowait()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        """The exception the actor's thread ended with, if any. `get` raises it; a learner that stops
        without another `get` (a stop decided at a sync while the rollout in flight failed) asks
        here, once `close` has joined the thread."""
        return self._error

    def __enter__(self) -> "RolloutWorker":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is KeyboardInterrupt:  # a second Ctrl-C, "abort at once": no wait for the fragment in flight
            self._stop.set()
            self._thread.join(ABORT_JOIN_S)  # a short one finishes here; a slow simulator's is left to end on its own
            return
        try:
            self.close()
        except RuntimeError as error:  # the thread outlived the join
            if exc is None:
                raise
            exc.add_note(str(error))  # the learner's error on its way stays the one raised
