"""Whole-training-state checkpoints: atomic, checksummed msgpack, no code run on load.

A checkpoint file is a msgpack map

    {"format": "jaxrl_async-checkpoint", "version": 1, "sha256": <hex>, "payload": <bytes>}

whose payload (flax's msgpack serialisation of plain dicts and arrays, never
pickle) holds the config, the counters, the state dict of the `TrainState` —
params, optimiser state, rollout state (env states, observations, normaliser
statistics), every PRNG key — and extras such as the best evaluation so far. The
checksum turns a truncated or bit-flipped file into a clear error instead of
silently wrong numbers. Files are written to a temporary name, flushed, fsynced
and renamed, so a crash leaves either the old file or the new one, never half.

A run writes its checkpoints with a `CheckpointWriter`: the state is copied to the host
at the sync (`host_content`), and the serialisation, the write, the fsync and the rename
run on a background thread while training goes on, one write in flight at a time.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import queue
import re
import threading
import time
from typing import Any, Callable

import jax
import msgpack
from flax import serialization

from jaxrl_async.core.trees import check_same_tree

FORMAT = "jaxrl_async-checkpoint"
VERSION = 1
CHECKPOINT_DIR = "checkpoints"
BEST = "best.ckpt"
_NUMBERED = re.compile(r"update_(\d+)\.ckpt$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, corrupted, or from an incompatible run."""


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CHECKPOINT_DIR)


def numbered_path(run_dir: str, updates: int) -> str:
    return os.path.join(checkpoint_dir(run_dir), f"update_{updates:09d}.ckpt")


def list_checkpoints(run_dir: str) -> list[str]:
    """Numbered checkpoints, oldest first."""
    paths = glob.glob(os.path.join(checkpoint_dir(run_dir), "update_*.ckpt"))
    return sorted(p for p in paths if _NUMBERED.search(p))


def latest_checkpoint(run_dir: str) -> str | None:
    paths = list_checkpoints(run_dir)
    return paths[-1] if paths else None


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """Temporary file, flush, fsync, rename (then fsync the directory). A write that fails (a full
    disk, say) removes its temporary file, which would otherwise hold the disk's space for good: a
    run that goes on names its next checkpoints otherwise. A process killed mid-write leaves it."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _fsync_dir(os.path.dirname(path) or ".")


def encode(content: dict) -> bytes:
    payload = serialization.msgpack_serialize(content)
    return msgpack.packb({"format": FORMAT, "version": VERSION,
                          "sha256": hashlib.sha256(payload).hexdigest(), "payload": payload})


CONTENT_KEYS = ("config", "counters", "state", "extra")


RESUME_FIX = ("move it aside to resume from the previous checkpoint in the same folder (--resume takes the newest), "
              "or start a new run")


def decode(data: bytes, path: str = "<bytes>", how_to: str = RESUME_FIX) -> dict:
    """The checkpoint's content; where it is damaged, a CheckpointError that names what is wrong and
    ends with `how_to`."""
    try:
        outer = msgpack.unpackb(data, raw=False)
    except Exception:  # msgpack raises several types for damaged input
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted; {how_to}") from None
    if not isinstance(outer, dict) or outer.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a jaxrl_async checkpoint; {how_to}")
    if outer.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {path} has format version {outer.get('version')}, this "
                              f"jaxrl_async reads version {VERSION}; use the jaxrl_async that wrote it")
    payload = outer.get("payload")
    if not isinstance(payload, bytes) or hashlib.sha256(payload).hexdigest() != outer.get("sha256"):
        raise CheckpointError(f"checkpoint {path} is corrupted (checksum mismatch); {how_to}")
    try:
        content = serialization.msgpack_restore(payload)
    except Exception:  # a payload that matches its checksum but was not written by `encode`
        content = None
    if not isinstance(content, dict) or any(key not in content for key in CONTENT_KEYS):
        raise CheckpointError(f"checkpoint {path} has a malformed payload (expected the keys "
                              f"{', '.join(CONTENT_KEYS)}); {how_to}")
    return content


def content_of(*, state: Any, config: dict, counters: dict, extra: dict | None = None) -> dict:
    """What a checkpoint holds: `state` (any flax-serialisable pytree) as a state dict."""
    return {"config": config, "counters": counters, "state": serialization.to_state_dict(state),
            "extra": extra or {}}


def host_content(*, state: Any, config: dict, counters: dict, extra: dict | None = None) -> dict:
    """`content_of` with every array copied to the host (NumPy), so that it can be serialised
    while the device buffers move on (the next fused call donates them). Encodes to the same
    bytes as the device arrays would."""
    content = content_of(state=state, config=config, counters=counters, extra=extra)
    content["state"], content["extra"] = jax.device_get((content["state"], content["extra"]))
    return content


def save(path: str, *, state: Any, config: dict, counters: dict, extra: dict | None = None) -> str:
    """Write one checkpoint atomically, in this thread; `state` is any flax-serialisable pytree."""
    write_atomic(path, encode(content_of(state=state, config=config, counters=counters, extra=extra)))
    return path


class CheckpointWriteError(CheckpointError):
    """A background checkpoint write failed (raised in the thread that waits for it)."""


class CheckpointWriter:
    """Writes checkpoints on a background thread, one write in flight at a time.

        with CheckpointWriter() as writer:
            writer.submit([path], host_content(state=state, ...), then=lambda: prune(run_dir, 3))
            ...                      # training goes on while it serialises, writes and fsyncs
            writer.wait()            # on disk now, or its error is raised here

    `submit` first waits for the previous write, so at most one is in flight and writes land
    in order. Each file is written with `write_atomic`: a crash mid-write leaves the previous
    checkpoint readable. A failed write is raised in the caller's thread, naming the path, by
    the next `submit`, `wait` or `close`. `encode_s` and `write_s` sum the thread's time
    serialising and writing (write, fsync, rename); read them after `wait`.

    One thread for the writer's life (started by the first `submit`, stopped by `close`):
    starting a thread per write costs the caller a thread's start at every checkpoint.
    """

    _STOP = object()

    def __init__(self):
        self._jobs: queue.Queue = queue.Queue(maxsize=1)
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._error: tuple[str, BaseException] | None = None
        self.encode_s = 0.0
        self.write_s = 0.0

    def submit(self, paths: list[str], content: dict, then: Callable[[], None] | None = None) -> None:
        """Write `content` (host arrays: `host_content`) to each of `paths`, then call `then`
        (in the writer's thread, after every file is in place: pruning older checkpoints)."""
        self.wait()
        if self._thread is None:
            # a daemon: a write cut short by the interpreter's exit leaves the previous file (atomic)
            self._thread = threading.Thread(target=self._serve, name="checkpoint-writer", daemon=True)
            self._thread.start()
        self._idle.clear()
        self._jobs.put((list(paths), content, then))

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not self._STOP:
            try:
                self._write(*job)
            finally:
                self._idle.set()

    def _write(self, paths: list[str], content: dict, then: Callable[[], None] | None) -> None:
        path = paths[0]
        try:
            start = time.perf_counter()
            data = encode(content)
            self.encode_s += time.perf_counter() - start
            for path in paths:
                start = time.perf_counter()
                write_atomic(path, data)
                self.write_s += time.perf_counter() - start
            if then is not None:
                then()
        except BaseException as error:  # handed to the waiting thread, never lost
            self._error = (path, error)

    def wait(self) -> None:
        """Block until the write in flight (if any) is done; raise its error, if it failed."""
        self._idle.wait()
        if self._error is not None:
            path, error = self._error
            self._error = None
            raise CheckpointWriteError(
                f"writing checkpoint {path} failed: {type(error).__name__}: {error}; the checkpoints "
                f"written before it are intact; check the space and permissions of "
                f"{os.path.dirname(path) or '.'}") from error

    def close(self) -> None:
        """Wait for the write in flight (raising its error) and stop the thread."""
        try:
            self.wait()
        finally:
            if self._thread is not None:
                self._jobs.put(self._STOP)
                self._thread.join()
                self._thread = None

    def __enter__(self) -> "CheckpointWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def load(path: str, how_to: str = RESUME_FIX) -> dict:
    """The checkpoint's content: `config`, `counters`, `state` (a state dict), `extra`; a damaged
    one's error ends with `how_to` (the resume's advice by default)."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}")
    with open(path, "rb") as f:
        return decode(f.read(), path, how_to)


def _key_paths(tree: Any, prefix: str = "") -> set[str]:
    if isinstance(tree, dict):
        return set().union(*(_key_paths(v, f"{prefix}/{k}") for k, v in tree.items())) if tree else {prefix}
    return {prefix}


def _with_empty_fields(target: Any, saved: Any) -> Any:
    """`saved` with an empty entry wherever `target` has an empty field that `saved` lacks: a
    field added to the state after a checkpoint was written (e.g. `RolloutState.noise`) holds
    no arrays where it is unused, so the older checkpoint still fits."""
    if not (isinstance(target, dict) and isinstance(saved, dict)):
        return saved
    filled = {k: _with_empty_fields(target[k], v) if k in target else v for k, v in saved.items()}
    filled.update({k: {} for k, v in target.items() if k not in saved and isinstance(v, dict) and not v})
    return filled


CONFIG_FIX = "resume with the config the run was trained with"
# where the config's state-shaping fields already match the checkpoint's (`TrainConfig.
# state_shaping_difference`), a state that still differs is the code's doing, not the config's
VERSION_FIX = ("its config matches this run's in every field that shapes the state, so the code differs: "
               "another version of jaxrl_async (or of the env's package) wrote it, one whose network or "
               "observation space differs; resume or evaluate it with that version, or start a new run")


def restore_state(target: Any, state_dict: Any, path: str = "<checkpoint>", fix: str = CONFIG_FIX) -> Any:
    """Fill `target`'s structure with the saved arrays, checking that every saved leaf has a
    place (flax would drop extras silently) and every leaf's shape and dtype; a CheckpointError
    ending with `fix` where they differ."""
    target_dict = serialization.to_state_dict(target)
    state_dict = _with_empty_fields(target_dict, state_dict)
    expected, saved = _key_paths(target_dict), _key_paths(state_dict)
    if expected != saved:
        extra, missing = sorted(saved - expected), sorted(expected - saved)
        detail = f"it holds {extra[0]}, which this config's state has not" if extra else \
            f"it lacks {missing[0]}, which this config's state needs"
        raise CheckpointError(f"checkpoint {path} does not fit this config: {detail}; {fix}")
    try:
        restored = serialization.from_state_dict(target, state_dict)
        check_same_tree(target, restored, what="checkpoint state", reference_name="this config's state",
                        fix=fix)
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint {path} does not fit this config: {error}") from None
    return restored


def drop_best_after(run_dir: str, updates: int) -> int | None:
    """Remove the run's best checkpoint where it was written past `updates` (the checkpoint a run
    resumes from): its policy belongs to the updates that the crash or stop lost and the resumed
    run trains anew, perhaps otherwise (another learning rate, a host env). Left, it would stand for
    the run's best while the run's best return counts from the resumed checkpoint. Returns the
    update it was written at, or None where it is kept (or there is none)."""
    path = os.path.join(checkpoint_dir(run_dir), BEST)
    if not os.path.isfile(path):
        return None
    written = int(load(path)["counters"]["updates"])
    if written <= updates:
        return None
    os.remove(path)
    return written


def prune(run_dir: str, keep: int) -> None:
    """Delete all but the newest `keep` numbered checkpoints (the best one is kept apart)."""
    for path in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        os.remove(path)
