"""One run over several processes (jax.distributed, gloo on the CPU): the same params as one
process with as many devices, one writer, and bad input refused with one line before anything
is written. The runs are subprocesses: a process joins a distributed run before JAX starts."""

import json
import os
import shutil
import signal
import subprocess
import sys
import types

import pytest

from jaxrl_async.cli.launch import core_shares, free_port, process_env
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


def _probe(out_dir, port=None, runs="envs,straight,resumed,sweep", cli_args=()):
    """tests/distributed_probe.py as two processes of one run (with `port`), or one with 2 devices:
    the library runs `runs`, then the `jaxrl-async` commands `cli_args` in the same process."""
    probe = os.path.join(os.path.dirname(__file__), "distributed_probe.py")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # a script's own folder comes first on its path: the package is this checkout's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "PROBE_RUNS": runs, "PROBE_CLI_ARGS": json.dumps([list(args) for args in cli_args])}
    if port is None:
        return [subprocess.Popen([sys.executable, probe, str(out_dir)], env={**env, "JAX_NUM_CPU_DEVICES": "2"},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    return [subprocess.Popen([sys.executable, probe, str(out_dir), str(port), str(i)],
                             env={**env, "JAX_NUM_CPU_DEVICES": "1"}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for i in range(2)]


@pytest.fixture(scope="module")
def everything(tmp_path_factory):
    """Every run the module's tests read, in as few processes as they allow (each process pays
    JAX's import and start, and its run's compilations where the shared cache misses):
    - the tiny run launched over 2 processes x 1 device (`jaxrl-async launch`, the CLI);
    - the probes (tests/distributed_probe.py): the library's runs (a stop and a resume, a sweep,
      one seed's envs split, that split again) over two processes;
    - one process with 2 devices: the probes' sweep and env split, then, as commands run by
      `jaxrl_async.cli.main.main` in that process, the tiny run and the resume of a copy of the
      launched run (it waits for the launch: the copy must be whole)."""
    root = tmp_path_factory.mktemp("distributed")
    launched = _run(["launch", "--processes", "2", "--", *TINY, "--run-dir", str(root / "two_processes")])
    assert launched.returncode == 0, launched.stderr[-3000:]
    copy = tmp_path_factory.mktemp("resume") / "run"
    shutil.copytree(root / "two_processes", copy)
    probes = tmp_path_factory.mktemp("probes")
    (probes / "one").mkdir()
    commands = [[*TINY, "--run-dir", str(root / "one_process")],
                ["train", "--resume", str(copy), "--total-timesteps", "256"]]
    outputs = []
    for p in (*_probe(probes / "two", free_port(), runs="envs,envs_again,straight,resumed,sweep"),
              *_probe(probes / "one", runs="envs,sweep", cli_args=commands)):
        output, _ = p.communicate(timeout=900)
        assert p.returncode == 0, output[-3000:]
        outputs.append(output)
    with open(probes / "one" / "cli_exit_codes.json", encoding="utf-8") as f:
        single_code, resume_code = json.load(f)
    assert single_code == 0, outputs[-1][-3000:]
    return types.SimpleNamespace(root=root, launched=launched, probes=probes, resumed_copy=copy,
                                 resume=(resume_code, outputs[-1]))


@pytest.fixture(scope="module")
def runs(everything):
    """The tiny run launched over 2 processes x 1 device, and in 1 process with 2 devices."""
    return everything.root, everything.launched


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


def test_the_gathered_checkpoint_resumes_in_one_process(everything):
    # the checkpoint holds the whole state: a one-process run (2 devices) continues it
    code, output = everything.resume
    assert code == 0, output[-3000:]
    assert _summary(everything.resumed_copy)["num_updates"] == 8


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
    (["--coordinator", "auto", "--num-processes", "4", "--process-id", "9"], "--process-id 9 is out of range"),
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


def test_coordinator_auto_outside_a_cluster_says_what_to_give_instead(tmp_path):
    # no SLURM / Open MPI here: JAX's "coordinator_address should be defined" said neither why nor what to do
    done = _run([*TINY, "--run-dir", str(tmp_path / "run"), "--coordinator", "auto"], timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = _error_lines(done.stderr)
    assert len(lines) == 1 and "--coordinator auto found no cluster to join" in lines[0], done.stderr[-3000:]
    assert "--coordinator HOST:PORT" in lines[0]
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
    (["launch", "--processes", "2", "--", "train", "--coordinator-timeout", "5"], "drop --coordinator-timeout"),
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


def test_each_launched_process_gets_an_equal_share_of_the_cores():
    assert core_shares([0, 1], 2) == [{0}, {1}]
    assert core_shares([0, 1, 2, 3, 4, 5, 6], 2) == [{0, 1, 2}, {3, 4, 5, 6}]  # the remainder to the last
    assert core_shares([4, 7], 2) == [{4}, {7}]  # the launcher's own cores, not 0..n-1
    assert core_shares([0], 2) == [None, None]  # fewer cores than processes: unbound


@pytest.mark.parametrize("seeds, envs, devices, processes, expected", [
    (8, 4, 4, 2, ("seeds", 4)),
    (6, 4, 4, 2, ("seeds", 2)),   # 3 devices would split 6 seeds, but not over 2 processes evenly
    (1, 4, 2, 2, ("envs", 2)),
    (3, 4, 2, 2, ("single", 1)),  # refused by the placement: every process needs a shard
])
def test_layouts_over_processes_use_a_multiple_of_the_process_count(seeds, envs, devices, processes, expected):
    assert choose_layout(seeds, envs, devices, num_processes=processes) == expected


@pytest.fixture(scope="module")
def probes(everything):
    """The library's runs (a stop and a resume, a sweep, one seed's envs split, twice) in both layouts."""
    return everything.probes


def test_a_resume_over_two_processes_is_bit_identical_to_a_run_that_never_stopped(probes):
    straight, resumed = _summary(probes / "two" / "straight"), _summary(probes / "two" / "resumed")
    assert straight["processes"] == 2 and straight["num_updates"] == 8
    assert resumed["params_digest"] == straight["params_digest"]


def test_a_sweep_over_two_processes_matches_one_process(probes):
    two, one = _summary(probes / "two" / "sweep"), _summary(probes / "one" / "sweep")
    assert two["processes"] == 2 and one["processes"] == 1
    assert two["params_digest"] == one["params_digest"]
    # the swept learning rates (seeds 0-1: 1e-3, 2-3: 3e-3, neither the config's) reached every seed
    plain = _summary(probes / "two" / "straight")
    assert all(a != b for a, b in zip(two["params_digest"], plain["params_digest"]))


def test_one_seeds_envs_split_over_two_processes_match_one_process(probes):
    import jax
    import numpy as np

    from jaxrl_async.trainer import checkpoint as ckpt

    two, one = _summary(probes / "two" / "envs"), _summary(probes / "one" / "envs")
    assert (two["sharding"], two["devices"], one["sharding"], one["devices"]) == ("envs", 2, "envs", 2)
    saved = [ckpt.load(ckpt.latest_checkpoint(str(probes / layout / "envs"))) for layout in ("two", "one")]
    params = [jax.tree.leaves(content["state"]["learner"]["params"]) for content in saved]
    assert max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(*params)) < 1e-5


def test_one_seeds_envs_split_over_two_processes_are_reproducible_bit_for_bit(probes):
    # the same two processes train the split a second time, from the start, in a run directory of
    # its own: its collectives run again on the same inputs
    first, again = _summary(probes / "two" / "envs"), _summary(probes / "two" / "envs_again")
    assert again["processes"] == 2 and again["sharding"] == "envs"
    assert again["params_digest"] == first["params_digest"]


def _child_process(parent_pid, process_id):
    """The pid of the launcher's child with --process-id `process_id` (Linux's /proc)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", encoding="utf-8") as f:
                args = f.read().split("\0")
        except OSError:  # it ended while we looked
            continue
        if parent == parent_pid and "--process-id" in args and args[args.index("--process-id") + 1] == str(process_id):
            return int(entry)
    raise AssertionError(f"no child with --process-id {process_id} under pid {parent_pid}")


def test_a_killed_process_makes_the_launcher_stop_the_others_and_name_it(tmp_path):
    import glob
    import time

    from jaxrl_async.trainer import checkpoint as ckpt

    run_dir = tmp_path / "run"
    # far more updates than the test waits for: it stops when process 1 is killed
    flags = [*TINY, "--total-timesteps", str(32 * 1_000_000), "--checkpoint-interval", "2", "--run-dir", str(run_dir)]
    launcher = subprocess.Popen([*CLI, "launch", "--processes", "2", "--", *flags], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not glob.glob(str(run_dir / "checkpoints" / "update_*.ckpt")):
            assert launcher.poll() is None, launcher.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 600 s"
            time.sleep(0.2)
        survivor, victim = _child_process(launcher.pid, 0), _child_process(launcher.pid, 1)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = launcher.communicate(timeout=120)
        stopped_s = time.monotonic() - killed_at
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 128 + signal.SIGKILL
    last = err.strip().splitlines()[-1]
    assert f"process 1 of 2 (pid {victim}) failed with exit code 137: killed by SIGKILL" in last, last
    # the launcher's grace period is 5 s; the rest is polling and the survivor's exit
    assert stopped_s < 15, stopped_s
    with pytest.raises(ProcessLookupError):
        os.kill(survivor, 0)
    # the last checkpoint process 0 wrote is whole (written atomically) and loads
    assert ckpt.load(ckpt.latest_checkpoint(str(run_dir)))["counters"]["updates"] >= 2


def _ctrl_c(launcher):  # the terminal's Ctrl-C reaches the launcher and its processes
    os.killpg(launcher.pid, signal.SIGINT)


def _sigterm_to_the_launcher(launcher):  # a scheduler's or a user's kill: the launcher passes it on
    launcher.send_signal(signal.SIGTERM)


def _sigterm_to_process_1(launcher):  # one process preempted: the others learn of it at the next sync
    os.kill(_child_process(launcher.pid, 1), signal.SIGTERM)


@pytest.mark.parametrize("stop", [_ctrl_c, _sigterm_to_the_launcher, _sigterm_to_process_1])
def test_a_stop_request_stops_every_process_at_one_sync_with_a_checkpoint(tmp_path, stop):
    import glob
    import re
    import time

    from jaxrl_async.trainer import checkpoint as ckpt

    run_dir = tmp_path / "run"
    # a constant step size: the run's params do not depend on its total, which its resume changes
    flags = [*TINY, "--no-anneal-lr", "--checkpoint-interval", "2"]
    launch = [*CLI, "launch", "--processes", "2", "--bind-cores", "--"]
    # a session of its own, as a terminal's: its Ctrl-C reaches the launcher and its processes
    launcher = subprocess.Popen([*launch, *flags, "--total-timesteps", str(32 * 1_000_000), "--run-dir", str(run_dir)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not glob.glob(str(run_dir / "checkpoints" / "update_*.ckpt")):
            assert launcher.poll() is None, launcher.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 600 s"
            time.sleep(0.2)
        # --bind-cores: each process runs on its share of the cores (the launcher's are this process's)
        shares = core_shares(sorted(os.sched_getaffinity(0)), 2)
        for process_id, share in enumerate(shares):
            assert os.sched_getaffinity(_child_process(launcher.pid, process_id)) == (share or os.sched_getaffinity(0))
        stop(launcher)
        # a process that stopped at another sync than the other would leave it blocked: a timeout here
        out, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 130, err[-3000:]
    assert ": error: " not in err, err[-3000:]
    stopped = re.search(r"stopped at update (\d+); checkpoint (\S+);", out)
    assert stopped, out[-2000:]
    assert ckpt.latest_checkpoint(str(run_dir)) == stopped.group(2)
    assert ckpt.load(stopped.group(2))["counters"]["updates"] == int(stopped.group(1))
    if stop is _sigterm_to_process_1:
        # the resume is exact: resumed over the 2 processes for 2 more updates, the run ends with the
        # params of one that never stopped
        total = ["--total-timesteps", str(32 * (int(stopped.group(1)) + 2))]
        straight = [*flags, *total, "--run-dir", str(tmp_path / "straight")]
        for args in (["train", "--resume", str(run_dir), *total], straight):
            done = subprocess.run([*launch, *args], capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
        assert _summary(run_dir)["params_digest"] == _summary(tmp_path / "straight")["params_digest"]
