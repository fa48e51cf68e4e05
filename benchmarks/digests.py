"""Params digests of tiny fixed-seed runs: record them, then check that a change left them alone.

    python -m benchmarks.digests --record digests.json        # before a change
    python -m benchmarks.digests --check digests.json         # after it: "same" per case, exit 1 otherwise
    python -m benchmarks.digests --check digests.json --only fused dqn

For refactors whose contract is "behaviour does not move": each case trains a few updates and
records `summary["params_digest"]` (SHA-256 of the final params' bytes, one per seed). Equal
digests mean bit-identical params, which holds only on the same machine with the same JAX: XLA
compiles different float code for different CPU models, so `--check` warns (and does not fail
on that alone) when the recorded machine differs, and then a difference means little.

Only the public API that survives module moves is used: `from jaxrl_async import TrainConfig,
train` and `dataclasses.replace`. Fields are set by name through `configure`, which finds the
(sub)config holding each name, so a field moving between sections (say `cfg.dqn.replay_capacity`
to `cfg.replay.replay_capacity`) or a section being renamed needs no change here.

The process settings are pinned before JAX starts (single-threaded Eigen, as the `jaxrl-async`
command sets them; one CPU device, `devices=1` in every case), and recorded beside the digests.
"""

from __future__ import annotations

import os

# before JAX starts: the `jaxrl-async` command's CPU setting (runtime.py), so the digests do not
# depend on whether the library or the caller applies it
_EIGEN_FLAG = "--xla_cpu_multi_thread_eigen=false"
if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_EIGEN_FLAG}".strip()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import jax  # noqa: E402

from jaxrl_async import TrainConfig, train  # noqa: E402

jax.config.update("jax_cpu_enable_async_dispatch", False)


# ----------------------------------------------------------------------------- config by field name

def _leaf_paths(obj: Any, prefix: tuple[str, ...] = ()) -> dict[str, list[tuple[str, ...]]]:
    """{field name: [path, ...]} for every non-dataclass field in the dataclass tree of `obj`."""
    found: dict[str, list[tuple[str, ...]]] = {}
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        path = prefix + (field.name,)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for name, paths in _leaf_paths(value, path).items():
                found.setdefault(name, []).extend(paths)
        else:
            found.setdefault(field.name, []).append(path)
    return found


def _replace_paths(obj: Any, updates: dict[tuple[str, ...], Any]) -> Any:
    direct = {path[0]: value for path, value in updates.items() if len(path) == 1}
    nested: dict[str, dict[tuple[str, ...], Any]] = {}
    for path, value in updates.items():
        if len(path) > 1:
            nested.setdefault(path[0], {})[path[1:]] = value
    for head, sub in nested.items():
        direct[head] = _replace_paths(getattr(obj, head), sub)
    return dataclasses.replace(obj, **direct) if direct else obj


def configure(cfg: TrainConfig, **fields: Any) -> TrainConfig:
    """`cfg` with each named field replaced wherever it lives: on the TrainConfig itself or on
    whichever of its dataclass-valued sections (at any depth) has a field of that name. A name
    held by no section, or by more than one, is an error naming where it was looked for."""
    leaves = _leaf_paths(cfg)
    updates = {}
    for name, value in fields.items():
        paths = leaves.get(name, [])
        if len(paths) != 1:
            where = "no section" if not paths else " and ".join(".".join(p) for p in paths)
            raise KeyError(f"field {name!r} is held by {where} of TrainConfig; cannot set it by name")
        updates[paths[0]] = value
    return _replace_paths(cfg, updates)


# ----------------------------------------------------------------------------- the cases

UPDATES = 8  # PPO cases: 4 envs x 128 steps x 8 updates


def _base(run_dir: str, **fields: Any) -> TrainConfig:
    """The small shared settings: evaluation and checkpoints only at the end (2 greedy episodes),
    a host sync every 4 updates (the resume case stops at one), one device."""
    cfg = TrainConfig(run_dir=run_dir)
    common = dict(seed=0, num_seeds=2, devices=1, eval_episodes=2, eval_interval=0, checkpoint_interval=0,
                  iterations_per_call=4)
    common.update(fields)
    return configure(cfg, **common)


def _reference(run_dir: str, **fields: Any) -> TrainConfig:
    """CartPole-v1 PPO at the package defaults (4 envs x 128 steps, 64x64 tanh, 4 epochs x 4
    minibatches), 8 updates."""
    return _base(run_dir, **{"env": "CartPole-v1", "algo": "ppo", "total_timesteps": 4 * 128 * UPDATES, **fields})


def _replay(run_dir: str, **fields: Any) -> TrainConfig:
    """DQN / SAC: 4 envs x 16 steps x 16 updates, gradient steps from the 3rd update on (128
    transitions), 4 per update on batches of 32 from a 1024-transition buffer."""
    return _base(run_dir, num_envs=4, num_steps=16, total_timesteps=4 * 16 * 16, replay_capacity=1024,
                 learning_starts=128, replay_ratio=4, replay_batch_size=32, **fields)


def _digests(cfg: TrainConfig, result: Any) -> list[str]:
    if not result.completed:
        raise RuntimeError(f"run {cfg.run_dir} did not complete: {result.summary}")
    if result.summary.get("gradient_steps", 1) == 0:  # a replay learner that never learned proves little
        raise RuntimeError(f"run {cfg.run_dir} took no gradient step: lower learning_starts")
    return list(result.summary["params_digest"])


def _run(cfg: TrainConfig) -> list[str]:
    return _digests(cfg, train(cfg, console=False))


def _resume(cfg: TrainConfig) -> list[str]:
    half = cfg.num_updates // 2
    first = train(cfg, console=False, stop_after_updates=half)
    if first.completed or first.summary.get("updates_done", half) != half:
        raise RuntimeError(f"stop_after_updates={half} did not stop the run there: {first.summary}")
    return _digests(cfg, train(cfg, console=False, resume=True))


# name -> (what it is, config maker(run_dir), runner)
CASES: dict[str, tuple[str, Callable[[str], TrainConfig], Callable[[TrainConfig], list[str]]]] = {
    "fused": ("CartPole-v1 PPO defaults, fused, 8 updates, 2 seeds",
              lambda d: _reference(d), _run),
    "async_lag0": ("the same, async lag 0 (should equal fused)",
                   lambda d: _reference(d, mode="async", lag="0"), _run),
    "async_lag1": ("the same, async lag 1",
                   lambda d: _reference(d, mode="async", lag="1"), _run),
    "dqn": ("CartPole-v1 DQN, fused, 16 updates x 4 gradient steps, 2 seeds",
            lambda d: _replay(d, env="CartPole-v1", algo="dqn", target_update_period=8), _run),
    "sac": ("Pendulum-v1 SAC, fused, 16 updates x 4 gradient steps, 2 seeds",
            lambda d: _replay(d, env="Pendulum-v1", algo="sac"), _run),
    "recurrent": ("StatelessCartPole-v1 PPO with a GRU core (64), fused, 8 updates, 2 seeds",
                  lambda d: _base(d, env="StatelessCartPole-v1", algo="ppo", total_timesteps=4 * 128 * UPDATES,
                                  core="gru"), _run),
    "host_gymnasium": ("gymnasium:CartPole-v1 PPO, async lag 1, 8 updates, 1 seed (host envs: one seed)",
                       lambda d: _reference(d, env="gymnasium:CartPole-v1", mode="async", lag="1", num_seeds=1),
                       _run),
    "resume": ("the fused case stopped at update 4, then resumed to 8 (should equal fused)",
               lambda d: _reference(d), _resume),
}


# ----------------------------------------------------------------------------- machine

def machine() -> str:
    """The CPU model (/proc/cpuinfo: its name, and its family and model numbers, which tell apart
    the generations a virtual machine names alike, "AMD EPYC") and the JAX version: what
    bit-identical digests depend on."""
    model = platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name, _, value = line.partition(":")
                if not name.strip():  # the first processor's block ends
                    break
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    if "model name" in fields:
        model = f"{fields['model name']} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')})"
    import jaxlib

    return f"{model} | jax {jax.__version__} | jaxlib {jaxlib.__version__} | {jax.default_backend()}"


def _settings() -> dict:
    return {"xla_flags": os.environ.get("XLA_FLAGS", ""), "devices": jax.device_count()}


# ----------------------------------------------------------------------------- main

def compute(names: list[str]) -> tuple[dict[str, list[str]], dict[str, float], dict[str, str]]:
    digests, times, errors = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="jaxrl-async-digests-") as root:
        for name in names:
            what, make, run = CASES[name]
            start = time.perf_counter()
            try:
                digests[name] = run(make(os.path.join(root, name)))
            except Exception as error:  # report it, go on with the other cases
                errors[name] = f"{type(error).__name__}: {error}"
            times[name] = time.perf_counter() - start
            shown = ", ".join(d[:12] for d in digests[name]) if name in digests else f"ERROR {errors[name]}"
            print(f"  {name:<16} {times[name]:6.1f} s  {shown}   ({what})", flush=True)
    return digests, times, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", metavar="FILE", help="compute the digests and write them to FILE (JSON)")
    action.add_argument("--check", metavar="FILE", help="recompute and compare with FILE; exit 1 on a difference")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(CASES),
                        help=f"run only these cases (of: {' '.join(CASES)})")
    args = parser.parse_args(argv)
    names = [n for n in CASES if n in (args.only or CASES)]

    here = machine()
    print(f"machine: {here}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)
    recorded = None
    if args.check:
        with open(args.check) as f:
            recorded = json.load(f)
        if recorded.get("machine") != here:
            print(f"WARNING: recorded on {recorded.get('machine')!r}, checking on {here!r}: XLA's float "
                  "results differ between CPU models and JAX versions, so digests may differ without "
                  "any change in behaviour", flush=True)
        if recorded.get("settings", _settings()) != _settings():
            print(f"WARNING: recorded with settings {recorded.get('settings')}, now {_settings()}", flush=True)

    start = time.perf_counter()
    digests, times, errors = compute(names)
    total = time.perf_counter() - start
    print(f"total {total:.1f} s", flush=True)

    if args.record:
        if errors:
            print(f"not recording: {len(errors)} case(s) failed: {', '.join(errors)}", flush=True)
            return 1
        cases = dict(digests)
        if args.only and os.path.exists(args.record):  # a subset updates those cases of an existing record
            with open(args.record) as f:
                cases = {**json.load(f).get("cases", {}), **digests}
        record = {"machine": here, "settings": _settings(), "cases": cases}
        with open(args.record, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        print(f"recorded {len(digests)} case(s) in {args.record}", flush=True)
        return 0

    failed = False
    print("check:")
    for name in names:
        was = recorded.get("cases", {}).get(name)
        if name in errors:
            print(f"  {name}: ERROR ({errors[name]})")
            failed = True
        elif was is None:
            print(f"  {name}: NOT RECORDED (now {digests[name]})")
            failed = True
        elif was == digests[name]:
            print(f"  {name}: same")
        else:
            print(f"  {name}: DIFFERENT (was {was}, now {digests[name]})")
            failed = True
    print("FAILED: digests differ" if failed else "all same", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
