"""Where the test suite's time goes: a pytest plugin that sums, per test file, its tests' CPU time
and JAX's tracing, lowering and XLA compilation (from JAX's monitoring events), over every xdist
worker; then the table, longest files first.

    python -m pytest -p benchmarks.suite_profile             # also writes suite-profile.json
    python -m benchmarks.suite_profile suite-profile.json    # the table again

A file's `compile_s` is XLA's compilation including loads from the persistent cache (`cache_hits`
of its `compiles`); compilations on other threads (the evaluation's, beside the training loop's)
count too, so `compile_s` can exceed `cpu_s`. A subprocess's time (the CLI and distributed tests)
is in neither.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import shutil
import sys
import tempfile
import time

import pytest

OUT = "suite-profile.json"
PARTS_VARIABLE = "JAXRL_ASYNC_SUITE_PROFILE_PARTS"  # the folder each process writes its part to
EVENTS = {  # JAX's monitoring event -> (seconds field, count field)
    "/jax/core/compile/backend_compile_duration": ("compile_s", "compiles"),
    "/jax/core/compile/jaxpr_to_mlir_module_duration": ("lower_s", "lowerings"),
    "/jax/core/compile/jaxpr_trace_duration": ("trace_s", "traces"),
    "/jax/compilation_cache/cache_retrieval_time_sec": ("cache_load_s", "cache_hits"),
}
FIELDS = ("cpu_s", "compile_s", "compiles", "cache_hits", "cache_load_s", "lower_s", "lowerings", "trace_s", "traces")

_listening: list[bool] = []
_current = ["(outside tests)"]  # the test file running now: events between tests count for no file
_sums: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def _record(event: str, duration: float, **_) -> None:
    if event in EVENTS:
        seconds, count = EVENTS[event]
        _sums[_current[0]][seconds] += duration
        _sums[_current[0]][count] += 1


def merge(parts: list[dict]) -> dict:
    """The processes' parts (file -> fields) summed, file by file."""
    total: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for part in parts:
        for name, fields in part.items():
            total[name].update(fields)
    return {name: {field: fields.get(field, 0) for field in FIELDS} for name, fields in total.items()}


def table(profile: dict) -> str:
    """One line per file, longest CPU time first, and the totals."""
    totals = {field: sum(row[field] for row in profile.values()) for field in FIELDS}
    lines = [f"{'file':44s} {'cpu s':>8s} {'xla s':>8s} {'programs':>8s} {'hits':>6s} {'lower s':>8s} {'trace s':>8s}"]
    for name, row in sorted({**profile, "(all)": totals}.items(), key=lambda item: -item[1]["cpu_s"]):
        lines.append(f"{name[-44:]:44s} {row['cpu_s']:8.1f} {row['compile_s']:8.1f} {row['compiles']:8d} "
                     f"{row['cache_hits']:6d} {row['lower_s']:8.1f} {row['trace_s']:8.1f}")
    return "\n".join(lines)


def listen() -> None:
    """Count JAX's events from now on (once per process, however often it is called)."""
    if not _listening:
        from jax._src import monitoring  # JAX's own event hooks: no public API reports tracing and lowering

        monitoring.register_event_duration_secs_listener(_record)
        _listening.append(True)


def pytest_configure(config) -> None:
    listen()
    if not hasattr(config, "workerinput") and PARTS_VARIABLE not in os.environ:
        # the controller (or the one process): xdist's workers start after this, with its environment
        os.environ[PARTS_VARIABLE] = tempfile.mkdtemp(prefix="jaxrl-async-suite-profile-")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid.split("::")[0]
    start = time.process_time()
    yield
    _sums[_current[0]]["cpu_s"] += time.process_time() - start
    _current[0] = "(outside tests)"


def pytest_sessionfinish(session) -> None:
    parts = os.environ[PARTS_VARIABLE]
    with open(os.path.join(parts, f"{os.getpid()}.json"), "w", encoding="utf-8") as f:
        json.dump({name: dict(fields) for name, fields in _sums.items()}, f)
    if hasattr(session.config, "workerinput"):
        return
    # the controller finishes after its workers: every part is written
    files = sorted(glob.glob(os.path.join(parts, "*.json")))
    profile = merge([json.load(open(path, encoding="utf-8")) for path in files])
    shutil.rmtree(parts, ignore_errors=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(profile, f, indent=1)
    print(f"\n{table(profile)}\n(suite profile of {len(files)} processes: {OUT})")


if __name__ == "__main__":
    with open(sys.argv[1] if len(sys.argv) > 1 else OUT, encoding="utf-8") as f:
        print(table(json.load(f)))
