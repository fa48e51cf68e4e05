"""Tests for the background checkpoint writer (`checkpoint.CheckpointWriter`) and its use by a run.

The writer must write the same bytes as a checkpoint written in the loop's thread, keep at
most one write in flight, leave the previous checkpoint readable when the process dies
mid-write, raise a failed write in the waiting thread naming the path, and have the last
write on disk before the run returns (at its end and on a stop). A run resumed from a
checkpoint written while training went on must reach the same bits. summary.json splits
the host syncs' time into evaluation and checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import threading
import time

import jax
import numpy as np
import pytest

from crash_checks import kill_at_the_rename  # tests/crash_checks.py
from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.cli.main import main
from jaxrl_async.trainer.build import build, forget_builds, initial_states
from jaxrl_async.trainer.run_dir import read_json
from jaxrl_async.trainer.training import train

WRITE_DELAY_S = 0.3  # a slowed write: long beside a tiny run's sync-to-sync time
# every run here: 16 updates of tiny_config's 4 envs x 8 steps, a sync every 2, evaluation and
# checkpoint every 4 (one program shape for all, compiled once)
RUN = dict(total_timesteps=16 * 32, iterations_per_call=2, eval_interval=4)


@pytest.fixture(scope="module")
def state(tiny_config):
    """A real TrainState `[S=1, ...]` on the device."""
    return initial_states(build(tiny_config()))


def content(state, updates: int = 7) -> dict:
    return ckpt.host_content(state=state, config={"env": "CartPole-v1"}, counters={"updates": updates},
                             extra={"best_eval_return": 1.5})


@pytest.fixture
def slow_writes(monkeypatch):
    """Every checkpoint file waits WRITE_DELAY_S before it is written (the real write follows);
    yields the list of the paths whose write has started."""
    write, started = ckpt.write_atomic, []

    def slowed(path, data):
        started.append(path)
        time.sleep(WRITE_DELAY_S)
        write(path, data)

    monkeypatch.setattr(ckpt, "write_atomic", slowed)
    return started


def writer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "checkpoint-writer" and t.is_alive()}


def leaves_bytes(tree) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(tree)]


# ------------------------------------------------------------------ the writer


def test_writes_the_bytes_a_save_in_this_thread_writes(state, tmp_path):
    expected = ckpt.save(str(tmp_path / "direct.ckpt"), state=state, config={"env": "CartPole-v1"},
                         counters={"updates": 7}, extra={"best_eval_return": 1.5})
    paths = [str(tmp_path / "checkpoints" / "best.ckpt"), str(tmp_path / "checkpoints" / "update_7.ckpt")]
    with ckpt.CheckpointWriter() as writer:
        writer.submit(paths, content(state))
    for path in paths:
        assert open(path, "rb").read() == open(expected, "rb").read()
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path / "checkpoints"))
    assert writer.encode_s > 0 and writer.write_s > 0


def test_at_most_one_write_in_flight(state, tmp_path):
    first_done, release = threading.Event(), threading.Event()

    def hold():  # runs in the writer's thread once the first file is in place
        first_done.set()
        release.wait(60)

    writer = ckpt.CheckpointWriter()
    writer.submit([str(tmp_path / "a.ckpt")], content(state, 1), then=hold)
    assert first_done.wait(60)
    second = threading.Thread(target=writer.submit, args=([str(tmp_path / "b.ckpt")], content(state, 2)))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # the second submit waits for the first write ...
    assert not os.path.exists(tmp_path / "b.ckpt")
    release.set()
    second.join(60)
    writer.close()
    assert ckpt.load(str(tmp_path / "b.ckpt"))["counters"] == {"updates": 2}  # ... then writes


def test_a_failed_write_is_raised_in_the_waiting_thread_naming_the_path(state, tmp_path):
    (tmp_path / "not-a-dir").write_text("a file where the checkpoint folder should be")
    path = str(tmp_path / "not-a-dir" / "update_000000005.ckpt")
    writer = ckpt.CheckpointWriter()
    writer.submit([path], content(state))  # returns at once: the error is the thread's
    with pytest.raises(ckpt.CheckpointWriteError, match=f"writing checkpoint {path} failed: ") as info:
        writer.wait()
    assert isinstance(info.value.__cause__, OSError)
    assert "the checkpoints written before it are intact" in str(info.value)
    writer.wait()  # raised once: the writer is usable again
    good = str(tmp_path / "update_000000010.ckpt")
    writer.submit([path], content(state))
    with pytest.raises(ckpt.CheckpointWriteError, match=path):  # the next submit raises it too
        writer.submit([good], content(state))
    writer.submit([good], content(state))
    writer.close()
    assert ckpt.load(good)["counters"] == {"updates": 7}


def test_process_killed_mid_write_leaves_the_previous_checkpoint_readable(tmp_path):
    """A real process dies (SIGKILL) while its writer thread is between the write and the rename."""
    old = ckpt.numbered_path(str(tmp_path), 5)
    ckpt.save(old, state={"w": np.zeros(3, np.float32)}, config={}, counters={"updates": 5})
    old_bytes = open(old, "rb").read()
    kill_at_the_rename(f"""
        writer = ckpt.CheckpointWriter()
        writer.submit([{old!r}], ckpt.host_content(state={{"w": np.arange(1_000_000, dtype=np.float32)}},
                                                   config={{}}, counters={{"updates": 10}}))
        writer.wait()
    """)
    assert os.path.getsize(old + ".tmp") > 4_000_000  # the new content reached the temporary file ...
    assert open(old, "rb").read() == old_bytes  # ... never the checkpoint
    assert ckpt.load(old)["counters"]["updates"] == 5
    assert ckpt.latest_checkpoint(str(tmp_path)) == old


# ------------------------------------------------------------------ in a run


def test_the_last_checkpoint_is_on_disk_when_the_run_returns(tiny_config, slow_writes):
    cfg = tiny_config(**RUN, keep_checkpoints=2)
    writers_before = writer_threads()
    result = train(cfg, console=False)
    final = ckpt.numbered_path(cfg.run_dir, cfg.num_updates)
    assert ckpt.list_checkpoints(cfg.run_dir) == [ckpt.numbered_path(cfg.run_dir, cfg.num_updates - 4), final]
    assert ckpt.load(final)["counters"]["updates"] == cfg.num_updates
    assert leaves_bytes(ckpt.load(final)["state"]["learner"]["params"]) == leaves_bytes(result.state.learner.params)
    assert not any(name.endswith(".tmp") for name in os.listdir(ckpt.checkpoint_dir(cfg.run_dir)))
    # every write that started had finished when the summary was made
    assert result.summary["checkpoint_write_s"] >= WRITE_DELAY_S * len(slow_writes)
    assert len(slow_writes) > cfg.num_updates // 4  # the numbered checkpoints and the best one
    assert writer_threads() == writers_before  # the run's writer thread stopped with the run


def test_ctrl_c_waits_for_its_checkpoint(tiny_config, slow_writes, capsys):
    cfg = tiny_config(**{**RUN, "total_timesteps": 200 * 32, "eval_interval": 0}, checkpoint_interval=0)
    metrics = os.path.join(cfg.run_dir, "metrics.jsonl")

    def interrupt_once_logging():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics)):
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_once_logging, daemon=True)
    watcher.start()
    result = train(cfg, console=False)
    watcher.join()
    assert "interrupt: finishing the current step" in capsys.readouterr().out
    assert not result.completed
    assert ckpt.list_checkpoints(cfg.run_dir) == [result.summary["checkpoint"]]
    assert ckpt.load(result.summary["checkpoint"])["counters"]["updates"] == result.summary["updates_done"]


def test_resume_from_a_checkpoint_written_while_training_went_on_is_bit_identical(tiny_config, slow_writes,
                                                                                   tmp_path):
    # every checkpoint's write outlasts the iterations after it: the state must be the sync's
    cfg = tiny_config(**RUN, keep_checkpoints=10)
    full = train(cfg, console=False)
    run_dir = shutil.copytree(cfg.run_dir, tmp_path / "resumed")
    for path in ckpt.list_checkpoints(str(run_dir)):
        if ckpt.load(path)["counters"]["updates"] > 8:
            os.remove(path)
    assert ckpt.latest_checkpoint(str(run_dir)) == ckpt.numbered_path(str(run_dir), 8)
    resumed = train(dataclasses.replace(cfg, run_dir=str(run_dir)), console=False, resume=True)
    assert leaves_bytes(resumed.state.learner.params) == leaves_bytes(full.state.learner.params)
    assert leaves_bytes(resumed.state.learner.opt_state) == leaves_bytes(full.state.learner.opt_state)
    assert resumed.summary["params_digest"] == full.summary["params_digest"]


def test_a_failed_checkpoint_write_stops_the_run_naming_the_path(tiny_config, capsys):
    cfg = tiny_config(**RUN)
    os.makedirs(cfg.run_dir)
    with open(ckpt.checkpoint_dir(cfg.run_dir), "w") as f:
        f.write("a file where the checkpoint folder should be")
    with pytest.raises(ckpt.CheckpointWriteError, match=r"writing checkpoint \S+checkpoints/\S+\.ckpt failed"):
        train(cfg, console=False)
    cfg = tiny_config(**RUN)
    os.makedirs(cfg.run_dir)
    with open(ckpt.checkpoint_dir(cfg.run_dir), "w") as f:
        f.write("a file where the checkpoint folder should be")
    assert main(["train", "--env", "CartPole-v1", "--preset", "none", "--num-envs", "4", "--num-steps", "8",
                 "--total-timesteps", str(cfg.total_timesteps), "--iterations-per-call", "2", "--eval-interval", "4",
                 "--hidden-sizes", "16", "--update-epochs", "1", "--num-minibatches", "2", "--eval-episodes", "2",
                 "--run-dir", cfg.run_dir]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "writing checkpoint" in err[0] and "Traceback" not in err[0], err


def test_summary_splits_the_host_time_into_evaluation_and_checkpoints(tiny_config):
    forget_builds()  # a run that compiles its programs: none kept from this module's other runs of RUN
    cfg = tiny_config(**RUN, eval_stochastic=True)
    summary = train(cfg, console=False).summary
    assert read_json(os.path.join(cfg.run_dir, "summary.json")) == summary
    for key in ("eval_s", "eval_compile_s", "checkpoint_s", "checkpoint_encode_s", "checkpoint_write_s",
                "eval_checkpoint_s", "eval_checkpoint_fraction"):
        assert summary[key] > 0, key
    assert summary["eval_s"] + summary["checkpoint_s"] <= summary["eval_checkpoint_s"]
    assert summary["eval_compile_s"] <= summary["wall_s"]  # beside the loop, not inside compile_s
    # the compile time split into tracing, lowering and XLA, for the loop and for the evaluation
    # (compiled beside it, in a thread of its own)
    for prefix in ("compile", "eval_compile"):
        phases = [summary[f"{prefix}_{phase}_s"] for phase in ("trace", "lower", "xla")]
        assert min(phases) > 0 and max(phases) <= summary[f"{prefix}_s"], (prefix, phases)
    assert summary["compile_s"] + summary["train_s"] + summary["eval_checkpoint_s"] <= summary["wall_s"]
    assert summary["eval_checkpoint_fraction"] == pytest.approx(summary["eval_checkpoint_s"] / summary["train_s"])
