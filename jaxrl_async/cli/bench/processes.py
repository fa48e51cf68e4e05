"""The `processes` benchmark case: one run over two processes (`jaxrl-async launch`, gloo
collectives) against one process with as many devices, and the time from the launch to the
first host sync. The runs are the commands themselves, in fresh processes, as a user starts them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from jaxrl_async.cli.bench.configs import REFERENCE
from jaxrl_async.trainer.sinks import METRICS_FILE

NUM_SEEDS = 8
FIRST_SYNC_TIMEOUT_S = 1200


def _command(run_dir: str, budget: int) -> list[str]:
    return ["train", "--env", REFERENCE["env"], "--num-envs", str(REFERENCE["num_envs"]),
            "--num-steps", str(REFERENCE["num_steps"]), "--num-seeds", str(NUM_SEEDS),
            "--total-timesteps", str(budget), "--eval-interval", "0", "--checkpoint-interval", "0",
            "--eval-episodes", "1", "--compilation-cache", "off", "--run-dir", run_dir]


def _timed(args: list[str], env: dict, run_dir: str) -> dict:
    """Run one command; the seconds from its start to the first metrics line, and its windows' steps/s."""
    metrics = os.path.join(run_dir, METRICS_FILE)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "jaxrl_async.cli", *args], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first_sync_s = None
    while process.poll() is None and first_sync_s is None:
        if os.path.exists(metrics) and os.path.getsize(metrics) > 0:
            first_sync_s = time.perf_counter() - start
        elif time.perf_counter() - start > FIRST_SYNC_TIMEOUT_S:
            process.kill()
        time.sleep(0.05)
    _, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed with exit code {process.returncode}: {err[-2000:]}")
    with open(metrics, encoding="utf-8") as f:
        windows = [json.loads(line)["steps_per_second"] for line in f]
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    return {"first_sync_s": first_sync_s if first_sync_s is not None else time.perf_counter() - start,
            "windows": windows[1:] or windows, "compile_s": summary["compile_s"],
            "digest": summary["params_digest"]}


def processes(quick: bool, repeats: int) -> dict:
    """8 seeds of the reference config: `launch --processes 2` (1 device each) against one process
    with 2 devices (the same per-device program, so the same params: `identical_params`). The
    ratio is the cost of the collectives and the processes; `launch_to_first_sync_s` the time from
    the command's start to the first metrics line (JAX's start, the coordinator, a cold compile).
    Full mode adds the launch with each process bound to its share of the cores (`--bind-cores`)."""
    budget = 4 * 512 if quick else REFERENCE["total_timesteps"] // 2
    rounds = 1 if quick else max(1, repeats // 5)
    base = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    runs: dict[str, list] = {"two-processes": [], "one-process": []}
    if not quick:
        runs["two-processes-bound"] = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):  # round-robin: drift in the machine's speed hits both alike
            two_dir, one_dir = os.path.join(tmp, f"two{round_}"), os.path.join(tmp, f"one{round_}")
            runs["two-processes"].append(_timed(["launch", "--processes", "2", "--", *_command(two_dir, budget)],
                                                base, two_dir))
            runs["one-process"].append(_timed(_command(one_dir, budget), {**base, "JAX_NUM_CPU_DEVICES": "2"},
                                              one_dir))
            if "two-processes-bound" in runs:
                bound_dir = os.path.join(tmp, f"bound{round_}")
                runs["two-processes-bound"].append(_timed(["launch", "--processes", "2", "--bind-cores", "--",
                                                           *_command(bound_dir, budget)], base, bound_dir))
    results = {}
    for label, measured in runs.items():
        windows = [rate for run in measured for rate in run["windows"]]
        results[f"processes/4x128/seeds={NUM_SEEDS}/{label}"] = {
            "steps_per_second": {"median": float(np.median(windows)), "min": min(windows), "max": max(windows)},
            "launch_to_first_sync_s": float(np.median([run["first_sync_s"] for run in measured])),
            "compile_s": float(np.median([run["compile_s"] for run in measured])), "repeats": len(windows)}
    one = results[f"processes/4x128/seeds={NUM_SEEDS}/one-process"]
    for label in runs:
        if label.startswith("two-processes"):
            two = results[f"processes/4x128/seeds={NUM_SEEDS}/{label}"]
            two["ratio_to_one_process"] = two["steps_per_second"]["median"] / one["steps_per_second"]["median"]
            two["identical_params"] = all(a["digest"] == b["digest"]
                                          for a, b in zip(runs[label], runs["one-process"]))
    return results
