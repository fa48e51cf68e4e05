"""One run over several processes (jax.distributed, gloo on the CPU): the same params as one
process with as many devices, one writer, and bad input refused with one line before anything
is written. The runs are subprocesses: a process joins a distributed run before JAX starts."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_async.cli.launch import free_port, process_env
from jaxrl_async.cli.main import main
from jaxrl_async.trainer.sharding import choose_layout

# 8 seeds over 2 devices: 4 per device whether the devices are one process's or two
TINY = ["train", "--env", "CartPole-v1", "--num-seeds", "8", "--num-envs", "4", "--num-steps", "8",
        "--total-timesteps", "128", "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "8",
        "--eval-episodes", "2"]
CLI = [sys.executable, "-m", "jaxrl_async.cli"]


def _run(args, devices=1, timeout=600):
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices)}
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _summary(run_dir):
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if ": error: " in line]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny run launched over 2 processes x 1 device, and in 1 process with 2 devices."""
    root = tmp_path_factory.mktemp("distributed")
    launched = _run(["launch", "--processes", "2", "--", *TINY, "--run-dir", str(root / "two_processes")])
    assert launched.returncode == 0, launched.stderr[-3000:]
    single = _run([*TINY, "--run-dir", str(root / "one_process")], devices=2)
    assert single.returncode == 0, single.stderr[-3000:]
    return root, launched


def test_two_processes_train_the_same_params_as_two_devices_of_one(runs):
    root, _ = runs
    two, one = _summary(root / "two_processes"), _summary(root / "one_process")
    assert (two["processes"], two["devices"], two["sharding"]) == (2, 2, "seeds")
    assert (one["processes"], one["devices"], one["sharding"]) == (1, 2, "seeds")
    assert len(two["params_digest"]) == 8 and len(set(two["params_digest"])) == 8
    assert two["params_digest"] == one["params_digest"]
    # the summary's metrics cover every process's seeds
    assert two["final_eval_return"] == one["final_eval_return"]


def test_process_zero_alone_writes_one_run_directory(runs):
    root, launched = runs
    assert sorted(os.listdir(root)) == ["one_process", "two_processes"]
    assert sorted(os.listdir(root / "two_processes")) == ["checkpoints", "config.json", "metrics.jsonl",
                                                          "summary.json"]
    with open(root / "two_processes" / "config.json", encoding="utf-8") as f:
        config = json.load(f)
    # where the run executes is not part of what it computes: no process layout in the config
    assert not {"coordinator", "num_processes", "process_id"} & set(config)
    with open(root / "two_processes" / "metrics.jsonl", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    assert [line["iteration"] for line in lines][-1] == 4 and len(lines[-1]["episode_return_per_seed"]) == 8
    # process 0's console, streamed by the launcher, and only one final line
    assert launched.stdout.count("final greedy return") == 1


def test_the_gathered_checkpoint_holds_the_one_process_runs_state(runs):
    # every leaf of the whole state (params, optimiser, envs, keys, counters), bit for bit
    import jax
    import numpy as np

    from jaxrl_async.trainer import checkpoint as ckpt

    root, _ = runs
    two, one = (ckpt.load(ckpt.latest_checkpoint(str(root / name))) for name in ("two_processes", "one_process"))
    assert two["counters"] == one["counters"] and two["counters"]["updates"] == 4
    two_leaves, one_leaves = jax.tree.leaves(two["state"]), jax.tree.leaves(one["state"])
    assert len(two_leaves) == len(one_leaves) > 10
    for a, b in zip(two_leaves, one_leaves):
        assert np.asarray(a).shape[:1] == (8,) and np.array_equal(a, b)


def test_the_gathered_checkpoint_resumes_in_one_process(runs, tmp_path):
    # the checkpoint holds the whole state: a one-process run (2 devices) continues it
    root, _ = runs
    import shutil

    shutil.copytree(root / "two_processes", tmp_path / "run")
    done = _run(["train", "--resume", str(tmp_path / "run"), "--total-timesteps", "256"], devices=2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _summary(tmp_path / "run")["num_updates"] == 8


def test_a_process_id_out_of_range_is_one_line_and_rc_2(capsys, tmp_path):
    code = main([*TINY, "--run-dir", str(tmp_path / "run"), "--coordinator", "127.0.0.1:1234",
                 "--num-processes", "2", "--process-id", "2"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--process-id 2 is out of range for --num-processes 2" in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags, message", [
    (["--num-processes", "2", "--process-id", "0"], "need --coordinator HOST:PORT"),
    (["--coordinator", "nohostport", "--num-processes", "2", "--process-id", "0"], "is not HOST:PORT"),
    (["--coordinator", "127.0.0.1:1234"], "needs --num-processes N and --process-id I"),
])
def test_incomplete_distributed_flags_are_one_line(flags, message, capsys, tmp_path):
    assert main([*TINY, "--run-dir", str(tmp_path / "run"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_coordinator_that_never_answers_is_one_line_and_rc_2(tmp_path):
    port = free_port()  # nobody listens there
    done = _run([*TINY, "--run-dir", str(tmp_path / "run"), "--coordinator", f"127.0.0.1:{port}",
                 "--num-processes", "2", "--process-id", "1", "--coordinator-timeout", "1"], timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(_error_lines(done.stderr)) == 1 and f"127.0.0.1:{port} did not answer within 1 s" in done.stderr
    assert not (tmp_path / "run").exists()


def test_mismatched_configs_are_refused_by_every_process(tmp_path):
    port = free_port()
    common = ["--run-dir", str(tmp_path / "run"), "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
              "--coordinator-timeout", "60"]
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "1"}
    processes = [subprocess.Popen([*CLI, *TINY, *common, "--process-id", str(i), "--learning-rate", rate],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i, rate in enumerate(["0.001", "0.002"])]
    outputs = [p.communicate(timeout=300) for p in processes]
    for p, (_, err) in zip(processes, outputs):
        assert p.returncode == 2, err[-3000:]
        lines = _error_lines(err)
        assert len(lines) == 1 and "started with different configs: process(es) 1 differ from process 0" in lines[0]
    assert not (tmp_path / "run").exists()


def test_the_launcher_stops_all_and_names_the_process_that_failed(runs):
    # the run directory already holds a run: process 0 refuses it, and so every process stops
    root, _ = runs
    done = _run(["launch", "--processes", "2", "--coordinator-timeout", "60", "--", *TINY,
                 "--run-dir", str(root / "two_processes")], timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("jaxrl-async launch: error: process ") and "already holds a run" in last + done.stderr
    assert "failed with exit code 2" in last


@pytest.mark.parametrize("args, message", [
    (["launch", "--processes", "2", "train"], "give the train command after --"),
    (["launch", "--processes", "2", "--", "eval", "x"], "launch runs the train command"),
    (["launch", "--processes", "2", "--", "train", "--process-id", "1"], "sets --coordinator"),
    (["launch", "--processes", "0", "--", "train"], "--processes 0 must be >= 1"),
])
def test_launch_refuses_bad_input_with_one_line(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_each_launched_process_gets_its_own_block_of_devices():
    assert process_env(1, 2, base={})["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert process_env(1, 2, base={})["JAX_NUM_CPU_DEVICES"] == "2"
    assert process_env(1, 1, base={"CUDA_VISIBLE_DEVICES": "4,6"})["CUDA_VISIBLE_DEVICES"] == "6"


@pytest.mark.parametrize("seeds, envs, devices, processes, expected", [
    (8, 4, 4, 2, ("seeds", 4)),
    (6, 4, 4, 2, ("seeds", 2)),   # 3 devices would split 6 seeds, but not over 2 processes evenly
    (1, 4, 2, 2, ("envs", 2)),
    (3, 4, 2, 2, ("single", 1)),  # refused by the placement: every process needs a shard
])
def test_layouts_over_processes_use_a_multiple_of_the_process_count(seeds, envs, devices, processes, expected):
    assert choose_layout(seeds, envs, devices, num_processes=processes) == expected
