"""A run's evaluation videos: the greedy evaluation episode of the first seed, every
`--video-interval`-th evaluation and the final one, as `videos/update-<the update, six digits>.mp4` in the run
directory.

    videos = Videos.create(c, writer=True, console=True)    # None: off, or cannot render
    if videos.due(updates):                                 # at the evaluations the schedule marks
        videos.record(params, obs_stats, seed_keys, updates, run_dir)
    videos.finished(run_dir)                                # the videos written since, for the sinks

Recording is a program of its own, built only when videos are on (the training and evaluation
programs are the same with them on or off): a loop over one env that replays the first evaluation
episode of seed 0 (`rollout.evaluate.make_recorder`) and writes what the env's renderer needs of
each step's state (`envs.render`) into a buffer of `video_max_frames` steps (or the env's time
limit). At the sync it runs once and its result is copied to the host; the frames are drawn by the
suite's renderer and encoded (imageio's ffmpeg writer, H.264) on a writer thread while training
goes on, as checkpoints are written (`checkpoint.CheckpointWriter`), at a low CPU priority. At
most `MAX_PENDING` recordings wait to be drawn (a further one waits for room); the run's last sync
waits until its video is on disk.

An env that cannot render (no renderer, a missing package, no OpenGL context, a host env) says so
in one line and the run goes on without videos; so does a video whose drawing fails, after which no
more are recorded.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import queue
import sys
import threading
import time
import warnings
from typing import Any, Callable, Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.envs.render import CannotRender, Renderer, headless_gl, renderer_for
from jaxrl_async.rollout.evaluate import jit_evaluation
from jaxrl_async.trainer import distributed
from jaxrl_async.trainer.run import EVAL_STREAM
from jaxrl_async.trainer.schedule import Schedule

# imageio starts ffmpeg with subprocess's fork-and-exec, which JAX's fork warning does not tell from a
# fork that goes on running Python: the child runs only ffmpeg
warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning, module="subprocess")

VIDEO_DIR = "videos"
INSTALL = "pip install 'jaxrl_async[video]'"
MIN_FRAME_SIDE = 128  # pixels: a smaller frame (a grid's cells) is scaled up by a whole factor
# recordings waiting for the writer's thread (a few MB each, a Craftax world's 21 MB), the next one
# waiting for room: drawing is slower than training for a fast env (CartPole's 500 frames against a
# tenth of a run), so the queue, not the training loop, absorbs a run's worth of videos
MAX_PENDING = 8
# the writer thread's nice value: Linux weighs nice 10 against 0 about 1 to 10 on a shared core, where
# 19 starved a run's last videos while other processes kept the cores busy
WRITER_NICE = 10


def require_encoder() -> None:
    """A ValueError naming the pip line where the encoder (imageio and its ffmpeg plugin) is missing."""
    missing = [name for name in ("imageio", "imageio_ffmpeg") if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(f"videos need {' and '.join(missing)} to encode them (MP4, H.264): {INSTALL}")


def prepare(cfg: TrainConfig) -> None:
    """Before a run's pieces are built, where it records videos: the encoder is there (else a
    ValueError with its pip line, at once), and MuJoCo will draw without a display."""
    if cfg.video_interval:
        require_encoder()
        headless_gl()


def video_path(run_dir: str, updates: int) -> str:
    return os.path.join(run_dir, VIDEO_DIR, f"update-{updates:06d}.mp4")


def _video_frame(frame: np.ndarray) -> np.ndarray:
    """An `[H, W, 3]` uint8 frame as the encoder takes it: a small one scaled up by a whole factor
    (nearest: a grid's cells stay sharp) to at least `MIN_FRAME_SIDE` a side, then padded to even
    sides (H.264's 4:2:0 colour halves both)."""
    frame = np.asarray(frame, np.uint8)
    if frame.ndim != 3 or frame.shape[-1] != 3:
        raise ValueError(f"a frame must be [H, W, 3] uint8, got shape {frame.shape}")
    scale = math.ceil(MIN_FRAME_SIDE / min(frame.shape[:2]))
    if scale > 1:
        frame = np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1)
    pad = [(0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0)]
    return np.pad(frame, pad, mode="edge") if any(after for _, after in pad) else frame


def encode_mp4(path: str, frames: Iterable[np.ndarray], fps: int) -> int:
    """Encode `frames` (`[H, W, 3]` uint8, one size) as an H.264 MP4 at `path` with imageio's ffmpeg
    writer: written under a temporary name, then renamed, so a reader never sees half a video.
    Returns the frame count."""
    import imageio.v2 as imageio

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # the temporary name ends in .mp4: ffmpeg picks the container from it, whatever `path` is called
    partial_path = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.partial.mp4")
    count, writer = 0, None
    try:
        for frame in frames:
            frame = _video_frame(frame)
            if writer is None:
                # one encoder thread, x264's veryfast preset: the video is encoded beside training, which
                # keeps the other cores (veryfast encodes these flat frames faster than the default and smaller)
                writer = imageio.get_writer(partial_path, format="FFMPEG", mode="I", fps=fps, codec="libx264",
                                            macro_block_size=1, ffmpeg_log_level="error",
                                            ffmpeg_params=["-threads", "1", "-preset", "veryfast"])
            writer.append_data(frame)
            count += 1
    except BaseException:
        if writer is not None:
            writer.close()
        if os.path.exists(partial_path):
            os.remove(partial_path)
        raise
    if writer is None:
        raise ValueError(f"no frames to encode for {path}")
    writer.close()
    os.replace(partial_path, path)
    return count


class _Abandoned(Exception):
    """The writer was closed without waiting: the video in progress is dropped."""


class VideoWriter:
    """Draws and encodes videos on a background thread, one at a time, `MAX_PENDING` waiting.

    `submit` hands it a recording on the host; `finished` returns the videos written since the last
    call and the first failure, if any (after which it draws nothing more); `wait` blocks until
    every recording handed over is written; `close(wait=False)` drops what is not yet written.
    `draw_s` sums the thread's time drawing and encoding.
    """

    _STOP = object()

    def __init__(self, renderer: Renderer):
        self._renderer = renderer
        self._jobs: queue.Queue = queue.Queue(maxsize=MAX_PENDING)
        self._thread: threading.Thread | None = None
        self._abandon = threading.Event()
        self._lock = threading.Lock()
        self._written: list[dict] = []
        self._error: str | None = None
        self.draw_s = 0.0

    def submit(self, path: str, states: Any, info: dict) -> None:
        """Draw `states` (leaves `[n, ...]`, NumPy) into the video at `path`; `info` goes with it
        into `finished`'s entry."""
        if self._error is not None:
            return
        if self._thread is None:
            # a daemon: a video cut short by the interpreter's exit leaves only its partial file
            self._thread = threading.Thread(target=self._serve, name="video-writer", daemon=True)
            self._thread.start()
        self._jobs.put((path, states, info))

    def _serve(self) -> None:
        _low_priority()
        while (job := self._jobs.get()) is not self._STOP:
            try:
                if self._error is None and not self._abandon.is_set():
                    self._write(*job)
            except _Abandoned:
                pass
            except BaseException as error:  # told in the training thread (`finished`), never lost
                with self._lock:
                    self._error = f"drawing {job[0]} failed: {_one_line(error)}"
            finally:
                self._jobs.task_done()

    def _write(self, path: str, states: Any, info: dict) -> None:
        start = time.perf_counter()
        try:
            frames = encode_mp4(path, self._frames(states), self._renderer.fps)
        finally:
            self.draw_s += time.perf_counter() - start
        with self._lock:
            self._written.append({"path": path, "frames": frames, **info,
                                  "seconds": time.perf_counter() - start})

    def _frames(self, states: Any) -> Iterator[np.ndarray]:
        for frame in self._renderer.draw(states):
            if self._abandon.is_set():
                raise _Abandoned()
            yield frame

    def finished(self) -> tuple[list[dict], str | None]:
        with self._lock:
            written, self._written = self._written, []
            return written, self._error

    def wait(self) -> None:
        self._jobs.join()

    def close(self, wait: bool = True) -> None:
        if self._thread is None:
            return
        if not wait:
            self._abandon.set()
            while True:  # the recordings not yet drawn are dropped
                try:
                    self._jobs.get_nowait()
                    self._jobs.task_done()
                except queue.Empty:
                    break
        self._jobs.put(self._STOP)
        self._thread.join()
        self._thread = None


def _low_priority() -> None:
    """This thread at a low CPU priority (`WRITER_NICE`; Linux schedules each thread on its own, and
    the ffmpeg it starts inherits it): drawing takes a core training leaves idle whole, and about a
    tenth of one it shares with training. A video of CartPole's 500 frames costs more CPU than the
    tenth of the run it follows, so at an equal share it slowed training down. Elsewhere, a no-op."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICE)
    except (AttributeError, OSError):  # no per-thread priority here (not Linux), or not allowed
        pass


def _first_seed(tree: Any) -> Any:
    return jax.tree.map(lambda leaf: leaf[0], tree)


def episode_video(c: Any) -> Callable[[Any, Any, jax.Array, str], dict]:
    """`write(params, obs_stats, key, path) -> {"frames", "length", "episode_return", "complete"}`
    for the run built as `c`: seed 0's greedy evaluation episode with `key` (the first of those its
    evaluation runs with that key), at most `video_max_frames` steps, drawn and encoded at `path`
    in the caller's thread (`jaxrl-async eval --video`); `params` and `obs_stats` have the seed
    axis. Raises CannotRender at once where the env cannot render."""
    record = c.rollout.recorder(c.cfg.eval_episodes, c.cfg.video_max_frames)
    renderer = renderer_for(c.env, c.env_params)
    program = jit_evaluation(lambda params, obs_stats, key: record(_first_seed(params), _first_seed(obs_stats), key,
                                                                   renderer.select))

    def write(params: Any, obs_stats: Any, key: jax.Array, path: str) -> dict:
        recording = jax.device_get(program(params, obs_stats, key))
        length = int(recording.length)
        frames = encode_mp4(path, renderer.draw(jax.tree.map(lambda leaf: leaf[:length], recording.states)),
                            renderer.fps)
        return {"frames": frames, "length": length, "episode_return": float(recording.episode_return),
                "complete": bool(recording.complete)}

    return write


def _record_first_seed(record: Callable, select: Callable, params: Any, obs_stats: Any,
                       keys_of_seeds: jax.Array, updates: jax.Array) -> Any:
    """Seed 0's evaluation episode: its params, statistics and evaluation key (`run._evaluate_at`'s)."""
    key = jax.random.fold_in(jax.random.fold_in(keys_of_seeds[0], EVAL_STREAM), updates)
    return record(_first_seed(params), _first_seed(obs_stats), key, select)


class Videos:
    """A run's videos: which evaluations record one (`due`), the recording program, and (in the
    process that writes the run directory) the writer's thread. Build it with `create`."""

    def __init__(self, cfg: TrainConfig, schedule: Schedule, program: Callable, writer: VideoWriter | None,
                 console: bool):
        self._cfg, self._schedule, self._program = cfg, schedule, program
        self._writer = writer
        self._console = console
        self._off = False  # the recording or a drawing failed: no more recordings
        self.record_s = 0.0  # the recordings in the training thread: the program and the copy to the host
        self.compile_s = 0.0

    @classmethod
    def create(cls, c: Any, *, writer: bool = True, console: bool = True) -> "Videos | None":
        """The videos of the run built as `c` (`build.Components`); None where `video_interval` is 0
        or the env cannot render (said in one line). Over several processes every process records
        (the params are spread over them) and only the writer draws; all skip videos where any
        cannot render."""
        cfg = c.cfg
        if not cfg.video_interval:
            return None
        reason = None
        try:
            record = c.rollout.recorder(cfg.eval_episodes, cfg.video_max_frames)
            renderer = renderer_for(c.env, c.env_params)
        except CannotRender as cannot:
            reason = str(cannot)
        if distributed.any_process(reason is not None):
            if console:
                _say(f"video: cannot render: {reason or 'another process cannot'}; the run goes on without videos")
            return None
        program = c.program(("recording", cfg.eval_episodes, cfg.video_max_frames),
                            lambda: jit_evaluation(functools.partial(_record_first_seed, record, renderer.select)))
        return cls(cfg, Schedule.from_config(cfg), program, VideoWriter(renderer) if writer else None, console)

    def due(self, updates: int) -> bool:
        """Whether the sync after `updates` updates records a video (every process asks at the same
        syncs: one process's failed drawing stops the recordings, a collective, in all)."""
        if not self._schedule.is_video_point(updates, self._cfg.video_interval):
            return False
        self._off = distributed.any_process(self._off)
        return not self._off

    def warm_up(self, params: Any, obs_stats: Any, keys_of_seeds: Any, updates: int) -> None:
        """Compile the recording program and run it once (result dropped): beside the loop's
        compile, in the evaluation's thread (`Run.compile_evaluation`)."""
        start = time.perf_counter()
        try:
            jax.block_until_ready(self._program(params, obs_stats, keys_of_seeds, jnp.uint32(updates)))
        except Exception as error:  # a recording that cannot run stops the videos, never the training
            self._stop(f"the recording failed: {_one_line(error)}")
        self.compile_s = time.perf_counter() - start

    def record(self, params: Any, obs_stats: Any, keys_of_seeds: Any, updates: int, run_dir: str) -> None:
        """Record seed 0's evaluation episode after `updates` updates and hand it to the writer."""
        start = time.perf_counter()
        recording = distributed.fetch(self._program(params, obs_stats, keys_of_seeds, jnp.uint32(updates)))
        self.record_s += time.perf_counter() - start
        if self._writer is None:
            return
        length = int(recording.length)
        states = jax.tree.map(lambda leaf: leaf[:length], recording.states)
        self._writer.submit(video_path(run_dir, updates), states, {
            "update": updates, "env_steps": updates * self._cfg.batch_size, "length": length,
            "episode_return": float(recording.episode_return), "complete": bool(recording.complete)})

    def finished(self, run_dir: str) -> list[dict]:
        """The videos written since the last call, each {"path" (relative to the run directory),
        "frames", "update", "env_steps", "length", "episode_return", "complete", "seconds"}; a
        failed drawing is said in one line, and no more videos are recorded."""
        if self._writer is None:
            return []
        written, error = self._writer.finished()
        if error is not None:
            self._stop(error)
        for video in written:
            video["path"] = os.path.relpath(video["path"], run_dir)
            if self._console:
                _say(f"video: {video['path']} ({video['frames']} frames, return {video['episode_return']:.2f})")
        return written

    def _stop(self, why: str) -> None:
        """No more recordings, said in one line."""
        if not self._off and self._console:
            _say(f"video: {why}; the run goes on without videos")
        self._off = True

    def wait(self) -> None:
        """Until every recording handed over is written (or failed)."""
        if self._writer is not None:
            self._writer.wait()

    def close(self, wait: bool = True) -> None:
        if self._writer is not None:
            self._writer.close(wait)

    def timings(self) -> dict:
        """summary.json's: `video_s`, the recordings in the training loop's thread; `video_draw_s`,
        drawing and encoding in the writer's, beside training; `video_compile_s`, compiling and first
        running the recording, beside the loop's compile."""
        return {"video_s": self.record_s, "video_draw_s": self._writer.draw_s if self._writer else 0.0,
                "video_compile_s": self.compile_s}


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _say(line: str) -> None:
    """One console line in one write (the writer's lines and the loop's do not run together)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
