"""`jaxrl-async launch --processes N [--devices-per-process K] -- train ...`: one run over N local
processes (a workstation's GPUs, or the CPU tests of `jax.distributed`).

It picks a free coordinator port, starts N `jaxrl-async train` processes with `--coordinator
127.0.0.1:PORT --num-processes N --process-id I`, each with its own K devices
(`JAX_NUM_CPU_DEVICES=K`; `CUDA_VISIBLE_DEVICES` the I-th block of K GPUs), with `--bind-cores`
each on its own equal share of the launcher's cores (`core_shares`), and streams process 0's
console (the others print nothing but their errors). When any process fails, the others are
stopped (SIGTERM, then SIGKILL after a grace period) and one line names the process and its error:
a process that dies mid-run leaves the rest blocked in a collective, so the launcher, not JAX's
heartbeat (minutes), bounds the wait.

A stop on request is not a failure: Ctrl-C reaches every process of the terminal's group, a SIGTERM
sent to the launcher (a scheduler's preemption) is passed on to every process, and a SIGTERM sent
to one process alone reaches the others through the stop flag the processes agree on at each sync;
every process then stops at one sync, process 0 writes the checkpoint, and the launcher exits 130.

This module imports no JAX: the launcher never starts a backend of its own.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time

PROG = "jaxrl-async launch"
GRACE_S = 5.0  # from SIGTERM to SIGKILL for the processes still running after one failed
POLL_S = 0.05
STOPPED = 130  # `train`'s exit code when a Ctrl-C or SIGTERM stopped it at a host sync
SETTLE_S = 1.0  # after a failure, how long the others may take to fail on their own
# the launcher gives each process these (its own --coordinator-timeout, which it would override)
DISTRIBUTED_FLAGS = ("--coordinator", "--num-processes", "--process-id", "--coordinator-timeout")


@dataclasses.dataclass(frozen=True)
class LaunchCommand:
    """Run `jaxrl-async train` over N local processes: launch --processes N [--devices-per-process K] -- train FLAGS."""

    processes: int
    """How many processes, 1 or more (process 0 writes the run directory and prints)."""
    devices_per_process: int = 1
    """Devices each process gets: K CPU devices (JAX_NUM_CPU_DEVICES), or the I-th block of K GPUs
    (CUDA_VISIBLE_DEVICES)."""
    coordinator_timeout: float = 60.0
    """Seconds every process waits for the coordinator and for the others to join."""
    bind_cores: bool = False
    """Give each process an equal share of the launcher's cores: the processes' XLA runtimes, each
    sizing its threads to every core, no longer oversubscribe them, but a large matmul, split over
    fewer threads, may round differently from one process's (measured: docs/distributed.md,
    "Measured")."""

    def __post_init__(self):
        if self.processes < 1:
            raise ValueError(f"--processes {self.processes} must be >= 1")
        if self.devices_per_process < 1:
            raise ValueError(f"--devices-per-process {self.devices_per_process} must be >= 1")
        if not self.coordinator_timeout > 0:
            raise ValueError(f"--coordinator-timeout {self.coordinator_timeout} must be > 0 seconds")


def free_port() -> int:
    """A port no one listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def core_shares(cores: list[int], processes: int) -> list[set[int] | None]:
    """Each process's equal share of `cores` (in order; the remainder left to the last), or None
    for every process where there are fewer cores than processes (left unbound)."""
    per = len(cores) // processes
    if per == 0:
        return [None] * processes
    return [set(cores[i * per:(i + 1) * per if i < processes - 1 else len(cores)]) for i in range(processes)]


def process_env(process_id: int, devices_per_process: int, base: dict | None = None) -> dict:
    """Process `process_id`'s environment: its K CPU devices and its block of K GPUs."""
    env = dict(os.environ if base is None else base)
    env["JAX_NUM_CPU_DEVICES"] = str(devices_per_process)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    gpus = visible.split(",") if visible else [str(i) for i in range((process_id + 1) * devices_per_process)]
    block = gpus[process_id * devices_per_process:(process_id + 1) * devices_per_process]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(block)
    env["PYTHONUNBUFFERED"] = "1"  # process 0's console arrives as it prints
    return env


class _Process:
    """One child: its Popen and the tail of its stderr (echoed for process 0), read by a thread."""

    def __init__(self, process_id: int, args: list[str], env: dict, cores: set[int] | None = None):
        self.process_id = process_id
        bind = None if cores is None else (lambda: os.sched_setaffinity(0, cores))
        self.popen = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, preexec_fn=bind,
                                      stdout=None if process_id == 0 else subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, errors="replace")
        self.tail: collections.deque[str] = collections.deque(maxlen=50)
        self._reader = threading.Thread(target=self._read, name=f"launch-stderr-{process_id}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.popen.stderr:
            self.tail.append(line.rstrip("\n"))
            if self.process_id == 0:
                sys.stderr.write(line)
                sys.stderr.flush()

    def join_reader(self, timeout_s: float = 2.0) -> None:
        self._reader.join(timeout_s)

    def error_line(self) -> str:
        """The process's own one-line error where it printed one, else what ended it."""
        rc = self.popen.returncode
        lines = [line.strip() for line in self.tail if line.strip()]
        ours = [line for line in lines if ": error: " in line and line.startswith("jaxrl-async")]
        if ours:
            return ours[-1]
        if rc is not None and rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
            return f"killed by {name}"
        return lines[-1] if lines else f"exit code {rc}"


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # a signal, as a shell reports it


def _stop(processes: list[_Process], grace_s: float) -> None:
    """SIGTERM every running process, SIGKILL those still running after `grace_s`."""
    running = [p for p in processes if p.popen.poll() is None]
    for p in running:
        p.popen.terminate()
    deadline = time.monotonic() + grace_s
    for p in running:
        try:
            p.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait()


def _first_cause(processes: list[_Process], failed: _Process, settle_s: float = SETTLE_S) -> _Process:
    """The process to name: where others fail on their own within `settle_s` (a refusal that every
    process reaches together: process 0 refuses, the others say process 0 did), the lowest id."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline and any(p.popen.poll() is None for p in processes):
        time.sleep(POLL_S)
    failures = [p for p in processes if p.popen.poll() not in (None, 0)]
    return min(failures, key=lambda p: p.process_id) if failures else failed


def launch(command: LaunchCommand, train_args: list[str], grace_s: float = GRACE_S) -> int:
    """Start the processes, wait for them; the exit code (0: all finished)."""
    port = free_port()
    processes: list[_Process] = []
    previous = None  # the SIGTERM handler before ours
    shares = [None] * command.processes
    if command.bind_cores and hasattr(os, "sched_getaffinity"):  # Linux
        shares = core_shares(sorted(os.sched_getaffinity(0)), command.processes)
    try:
        for process_id in range(command.processes):
            args = [sys.executable, "-m", "jaxrl_async.cli", *train_args,
                    "--coordinator", f"127.0.0.1:{port}", "--num-processes", str(command.processes),
                    "--process-id", str(process_id), "--coordinator-timeout", str(command.coordinator_timeout)]
            processes.append(_Process(process_id, args, process_env(process_id, command.devices_per_process),
                                      shares[process_id]))
        interrupted = False

        def pass_on(signum, frame):  # a SIGTERM for the launcher is one for every process
            nonlocal interrupted
            interrupted = True
            for p in processes:
                if p.popen.poll() is None:
                    p.popen.send_signal(signum)

        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, pass_on)
        # exit code 130 is a process that stopped as asked, with its checkpoint: at one sync, all of them
        ended = (0, STOPPED)
        while True:
            try:
                failed = next((p for p in processes if p.popen.poll() not in (None, *ended)), None)
                if failed is not None:
                    failed = _first_cause(processes, failed)
                    _stop(processes, grace_s)
                    failed.join_reader()
                    rc = failed.popen.returncode
                    print(f"{PROG}: error: process {failed.process_id} of {command.processes} (pid {failed.popen.pid}) "
                          f"failed with exit code {_exit_code(rc)}: {failed.error_line()}; the others were stopped",
                          file=sys.stderr)
                    return _exit_code(rc)
                if all(p.popen.poll() in ended for p in processes):
                    return STOPPED if interrupted or any(p.popen.returncode == STOPPED for p in processes) else 0
                time.sleep(POLL_S)
            except KeyboardInterrupt:
                # Ctrl-C reached every process of the group: they stop together at the next sync;
                # a second one stops them at once
                if interrupted:
                    raise
                interrupted = True
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        _stop(processes, grace_s)
        for p in processes:
            p.join_reader()


def launch_command(args: list[str], cpu_runtime: bool = False) -> int:
    from jaxrl_async.cli.flags import parse, refuse

    if "--" not in args:
        if any(arg in ("-h", "--help") for arg in args):
            parse(LaunchCommand, ["--help"], PROG)
        refuse(PROG, "give the train command after --: jaxrl-async launch --processes N -- train FLAGS")
    split = args.index("--")
    own, train_args = args[:split], args[split + 1:]
    try:
        command = parse(LaunchCommand, own, PROG)
    except ValueError as error:
        refuse(PROG, str(error))
    if train_args[:1] != ["train"]:
        refuse(PROG, f"launch runs the train command: -- train FLAGS, got -- {' '.join(train_args[:1]) or '(nothing)'}")
    given = [arg for arg in train_args if arg.split("=")[0] in DISTRIBUTED_FLAGS]
    if given:
        refuse(PROG, f"the launcher sets {', '.join(DISTRIBUTED_FLAGS)} itself: drop {' '.join(given)} "
                     "(give the wait as launch --coordinator-timeout S, before the --)")
    return launch(command, train_args)
