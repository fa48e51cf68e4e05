"""`python -m benchmarks` / `jaxrl-async bench`: run benchmark cases, write JSON, print a table.

    python -m benchmarks                       # every case (docs/benchmarks.md: what each measures)
    python -m benchmarks --only rollout update # a subset
    python -m benchmarks --quick               # a smoke run (the test suite runs this)
    python -m benchmarks --compare bench-results/before.json   # ratios to an earlier run
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import sys
import time
from importlib import metadata

import jax

from jaxrl_async.cli.bench.cases import CASES
from jaxrl_async.cli.flags import parse
from jaxrl_async.trainer.build import forget_builds
from jaxrl_async.trainer.runtime import configure_compilation_cache
from jaxrl_async.trainer.metrics import to_jsonable


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """Microbenchmarks and end-to-end throughput, each measured after compilation, repeated."""

    only: tuple[str, ...] = ()
    """Cases to run (default all): env_step rollout advantages update gae_placement bootstrap_cost ops_per_iteration end_to_end devices gradient_step_cost host_step_cost host_sync_cost compile_cache eval_cost processes suites pqn_vs_ppo video_cost."""
    quick: bool = False
    """Tiny sizes and budgets: a smoke run of every code path."""
    repeats: int = 5
    """Timed calls per measurement (after one warm-up call); the training cases run repeats//5 rounds (each run repeats itself once per host-sync window)."""
    out: str | None = None
    """JSON file for the results; default bench-results/bench-<timestamp>.json."""
    compare: str | None = None
    """An earlier results JSON: print each measurement's ratio new/old."""
    compilation_cache: str | None = None
    """Persistent XLA compilation cache: a directory, or 'off'. Default: none, unlike `train`, so
    that every compile_s is a cold compile (the compile_cache case measures the cache itself)."""

    def __post_init__(self):
        unknown = [c for c in self.only if c not in CASES]
        if unknown:
            raise ValueError(f"only={unknown} names unknown cases; choose from {', '.join(CASES)}")
        if self.repeats < 1:
            raise ValueError(f"repeats={self.repeats} must be >= 1")


def machine_info() -> dict:
    versions = {}
    for package in ("jax", "jaxlib", "flax", "optax", "gymnax", "chex", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"python": platform.python_version(), "platform": platform.platform(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "devices": [str(d) for d in jax.devices()],
            "backend": jax.default_backend(), "versions": versions}


def headline(row: dict) -> tuple[str, float | None, str]:
    """The one number a table row shows, its unit and its spread."""
    for unit in ("steps_per_second", "samples_per_second", "transitions_per_second"):
        if unit in row:
            r = row[unit]
            return unit.replace("_per_second", "/s"), r["median"], f"{r['min']:,.0f}..{r['max']:,.0f}"
    if "gae_share_of_update" in row:
        return "% GAE / update", 100 * row["gae_share_of_update"], (
            f"{row['gae_ms']:.3f} / {row['update_ms']:.2f} ms, collect {row['collect_ms']:.2f} ms")
    if "ops_per_iteration" in row:
        return "ops / iteration", row["ops_per_iteration"], (
            f"{row.get('fusion_ops', 0):,} fusions, {row.get('copy_ops', 0):,} copies, {row['backend']}")
    if "eval_checkpoint_pct" in row:
        r = row["eval_checkpoint_pct"]
        return "% eval+ckpt/train", r["median"], (
            f"eval {row['eval_s']:.2f}s ckpt {row['checkpoint_s']:.2f}s / train {row['train_s']:.2f}s")
    if "compute_bound_steps_per_second" in row:
        return "us / grad step", row["us_per_gradient_step"][str(row["batch_size"])], (
            f"{row['us_per_sample']:.2f} us/sample + {row['fixed_us']:.0f} us; bound "
            f"{row['compute_bound_steps_per_second']:,.0f} steps/s")
    if "env_bound_steps_per_second" in row:
        return "us / vector step", row["fragment_us"], (
            f"env {row['env_us']:.0f} + act {row['act_us']:.0f} us (floor {row['dispatch_floor_us']:.0f}); "
            f"env bound {row['env_bound_steps_per_second']:,.0f} steps/s")
    if "truncated_to_every_step" in row:
        iteration = row.get("iteration_truncated_to_every_step")
        return "% < every step", 100 * (1 - row["truncated_to_every_step"]), (
            f"collect {row['truncated_ms']:.2f} vs {row['every_step_ms']:.2f} ms; k={row['max_truncations']}"
            + (f"; iteration {100 * (1 - iteration):.1f}% less" if iteration is not None else ""))
    if "auto_to_one_call" in row:
        return "% auto > 1 call", 100 * (row["auto_to_one_call"] - 1), (
            f"{row['calls']} calls: +{row['extra_ms_per_call']:.2f} ms each; empty {row['empty_call_ms']:.2f} ms")
    if "speedup" in row:
        return "x faster compile", row["speedup"], f"{row['cold_compile_s']:.2f}s -> {row['warm_compile_s']:.2f}s"
    return "", None, ""


# the ratios a row may carry, printed after it
RATIOS = ("ratio_to_raw_env", "ratio_to_env_with_resets", "ratio_to_fused", "ratio_to_one_device",
          "ratio_to_one_process", "overlap_efficiency", "learner_wait_fraction", "ratio_to_ppo", "ratio_to_off",
          "wall_ratio_to_off")


def table(results: dict, previous: dict | None = None) -> str:
    lines = [f"{'measurement':<44} {'median':>14} {'unit':<16} {'spread (min..max)':<24} {'compile s':>9}"
             + ("  vs old" if previous else "")]
    for key, row in results.items():
        unit, value, spread = headline(row)
        extra = [f"{name}={row[name]:.2f}" for name in RATIOS if name in row]
        compile_s = f"{row['compile_s']:.2f}" if "compile_s" in row else ""
        line = f"{key:<44} {value if value is not None else float('nan'):>14,.1f} {unit:<16} {spread:<24} {compile_s:>9}"
        if previous is not None:
            _, old, _ = headline(previous.get(key, {}))
            line += f"  {value / old:6.2f}x" if old and value else "       -"
        lines.append(line + ("  " + " ".join(extra) if extra else ""))
    return "\n".join(lines)


def run(cfg: BenchConfig) -> dict:
    names = cfg.only or tuple(CASES)
    results: dict = {}
    started = time.perf_counter()
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        forget_builds()  # no case finds another's programs compiled: every compile_s is its own
        if name == "rollout":
            results.update(CASES[name](cfg.quick, cfg.repeats, env_results=results))
        else:
            results.update(CASES[name](cfg.quick, cfg.repeats))
    return {"meta": {**machine_info(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
                     "config": dataclasses.asdict(cfg), "wall_s": time.perf_counter() - started},
            "results": results}


def main(argv: list[str] | None = None) -> int:
    cfg = parse(BenchConfig, sys.argv[1:] if argv is None else list(argv), "jaxrl-async bench")
    if cfg.compilation_cache is not None:
        configure_compilation_cache(cfg.compilation_cache)
    report = run(cfg)
    out = cfg.out or os.path.join("bench-results", f"bench-{datetime.datetime.now():%Y%m%d-%H%M%S}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(to_jsonable(report), f, indent=2)
    previous = None
    if cfg.compare:
        with open(cfg.compare, encoding="utf-8") as f:
            previous = json.load(f)["results"]
    print(table(report["results"], previous))
    print(f"results written to {out}")
    return 0
