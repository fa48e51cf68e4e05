"""One run over several processes (and hosts): JAX's multi-controller runtime, `jax.distributed`.

Every process runs the same program on the same config. `initialize` joins them before JAX
starts its backends; from then on `jax.devices()` lists every process's devices, the placement
(`sharding.Placement`) builds one `Mesh` over all of them, and the jitted programs run SPMD:
each process steps the seeds (or envs) on its own devices, XLA's collectives (gloo on a CPU)
carry what crosses processes. The host side keeps one rule: every process takes part in every
collective, in the same order (`fetch`, `any_process`, `agree`), and only process 0 writes
(`is_writer`).

    initialize("10.0.0.1:7000", num_processes=2, process_id=1)   # before anything uses JAX
    ...                                                          # then train(cfg) as usual
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from typing import Any

# JAX and NumPy are imported where they are used: the CLI checks the flags (`check_process`)
# before it imports either (tests/test_cli.py)

DEFAULT_TIMEOUT_S = 300  # jax.distributed.initialize's own default
AUTO = "auto"  # --coordinator auto: JAX detects the cluster (SLURM, Open MPI, TPU)


def parse_address(coordinator: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); a ValueError naming the flag for anything else."""
    host, sep, port = coordinator.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--coordinator {coordinator!r} is not HOST:PORT (e.g. 10.0.0.1:7000, or 'auto' "
                         "under SLURM / Open MPI)")
    return host, int(port)


def check_process(coordinator: str | None, num_processes: int | None, process_id: int | None) -> None:
    """The distributed flags' checks, before anything starts (one line each)."""
    if coordinator is None:
        if num_processes is not None or process_id is not None:
            raise ValueError("--num-processes and --process-id need --coordinator HOST:PORT (the address of "
                             "process 0), or --coordinator auto under SLURM / Open MPI")
        return
    if coordinator == AUTO:  # the cluster gives what is not given; what is given is checked as ever
        if num_processes is None or process_id is None:
            return
    else:
        parse_address(coordinator)
        if num_processes is None or process_id is None:
            raise ValueError(f"--coordinator {coordinator} needs --num-processes N and --process-id I "
                             "(0 <= I < N; process 0 serves the coordinator)")
    if num_processes < 1:
        raise ValueError(f"--num-processes {num_processes} must be >= 1")
    if not 0 <= process_id < num_processes:
        raise ValueError(f"--process-id {process_id} is out of range for --num-processes {num_processes}: "
                         f"give 0 to {num_processes - 1}, one process each")


def _wait_for_coordinator(host: str, port: int, timeout_s: float) -> None:
    """Until the coordinator accepts a connection. JAX aborts the process (SIGABRT, a C++ stack
    trace) when it cannot reach the coordinator; this turns that into one ValueError."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, timeout_s)):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise ValueError(f"--coordinator {host}:{port} did not answer within {timeout_s:g} s ({error}): "
                                 "start process 0 (it serves the coordinator) and check the address, or "
                                 "raise --coordinator-timeout") from None
            time.sleep(0.1)


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the coordinator's own server does
        try:
            sock.bind(("", port))
        except OSError as error:
            raise ValueError(f"--coordinator {host}:{port}: process 0 cannot serve on port {port} "
                             f"({error.strerror}); choose a free port") from None


def initialize(coordinator: str | None, num_processes: int | None = None, process_id: int | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Join the run's processes (`jax.distributed.initialize`); a no-op without a coordinator.

    Call it before anything uses JAX's backends. On a CPU the collectives go over gloo.

    Args:
      coordinator: 'HOST:PORT' of process 0, which serves it; 'auto' to let JAX read SLURM /
        Open MPI / TPU settings; None: one process, nothing to do.
      timeout_s: how long to wait for the coordinator and for every process to join.
    """
    import jax

    check_process(coordinator, num_processes, process_id)
    if coordinator is None:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if coordinator == AUTO:
        try:
            jax.distributed.initialize(num_processes=num_processes, process_id=process_id,
                                       initialization_timeout=int(timeout_s))
        except ValueError as error:  # JAX's own words say what it missed, not why
            raise ValueError(f"--coordinator auto found no cluster to join ({error}): it reads SLURM, Open MPI "
                             "or a TPU pod's environment; elsewhere give --coordinator HOST:PORT (process 0's "
                             "address) with --num-processes N and --process-id I") from None
        return
    host, port = parse_address(coordinator)
    if process_id == 0:
        _check_port_free(host, port)
    else:
        _wait_for_coordinator(host, port, timeout_s)
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                               process_id=process_id, initialization_timeout=int(timeout_s))


def is_multiprocess() -> bool:
    import jax

    return jax.process_count() > 1


def is_writer() -> bool:
    """Process 0 alone writes the run directory."""
    import jax

    return jax.process_index() == 0


def fetch(tree: Any) -> Any:
    """The whole of every array of `tree` on this host (NumPy): `jax.device_get` in one process;
    across processes an all-gather, which every process must call at the same point."""
    import jax

    if not is_multiprocess():
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


def any_process(flag: bool) -> bool:
    """True on every process when it is true on any (a stop request reaches them all at the same sync)."""
    import numpy as np

    if not is_multiprocess():
        return flag
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.array([flag], np.int32))))


def config_words(config: dict) -> list[int]:
    """The config's digest as four int32s (what the processes compare)."""
    import numpy as np

    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).digest()
    return np.frombuffer(digest[:16], np.int32).tolist()


def agree(config: dict, writer_error: ValueError | None = None) -> None:
    """Check, before anything is written, that every process got the same config and as many
    devices, and that process 0 can write the run (`writer_error`: why not). Every process
    raises the same one-line ValueError where one of them disagrees, so all stop with rc 2."""
    import jax
    import numpy as np

    if not is_multiprocess():
        if writer_error is not None:
            raise writer_error
        return
    from jax.experimental import multihost_utils

    mine = np.array([*config_words(config), jax.local_device_count(), writer_error is not None], np.int64)
    rows = np.asarray(multihost_utils.process_allgather(mine.astype(np.int32)))  # [P, 6]
    if rows[0, 5]:
        raise writer_error if writer_error is not None else ValueError(
            "process 0 refused the run directory (its console says why); nothing was written")
    differ = [i for i in range(len(rows)) if not np.array_equal(rows[i, :4], rows[0, :4])]
    if differ:
        raise ValueError(f"the processes were started with different configs: process(es) "
                         f"{', '.join(map(str, differ))} differ from process 0; give every process the same "
                         "train flags (only --process-id differs)")
    counts = rows[:, 4]
    if np.any(counts != counts[0]):
        raise ValueError(f"the processes have different device counts ({', '.join(map(str, counts))}); give "
                         "every process as many devices (launch --devices-per-process K)")
