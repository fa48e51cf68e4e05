"""Each env's preset at its budget: the figures `jaxrl-async envs` shows (jaxrl_async/trainer/presets.py).

    python -m experiments.presets [--envs ID ...] [--num-seeds S] [--total-timesteps N] [--run-dir DIR]

Trains `config_for(env)` with its seeds vmapped, for each env one after another, evaluating the
greedy and the sampling policy at the end, and prints a table row per env beside the preset's
expected return. Writes `<run_dir>/<env>/` (with its learning curve) for each.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tyro

from experiments.common import CURVE_FILE, curve_from_metrics, default_run_dir, greedy_summary, plot_learning_curve
from experiments.common import print_table, run_script
from jaxrl_async.trainer.presets import PRESETS, config_for

MEASURED = ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCarContinuous-v0", "Breakout-MinAtar", "Catch-bsuite",
            "MountainCar-v0")


@dataclasses.dataclass(frozen=True)
class Args:
    envs: tuple[str, ...] = MEASURED
    """Env ids whose presets to run (`jaxrl-async envs` lists them)."""
    num_seeds: int = 5
    """Independent seeds per env, vmapped in one jit."""
    total_timesteps: int | None = None
    """Env steps per seed for every env (default: each preset's budget)."""
    run_dir: str | None = None
    """The study's directory; default runs/presets-<timestamp>."""


COLUMNS = ["env", "env steps (per seed)", "greedy return (mean ± std over seeds)", "sampling policy",
           "preset's expected return", "steps/s (all seeds)", "compile s"]


def main(argv: list[str] | None = None) -> dict:
    from jaxrl_async import train  # after the CPU settings, see experiments/common.py

    args = tyro.cli(Args, args=argv, description=__doc__)
    unknown = [env for env in args.envs if env not in PRESETS]
    if unknown:
        raise SystemExit(f"presets: no preset for {unknown}; choose from {', '.join(sorted(PRESETS))}")
    out_dir = default_run_dir("presets") if args.run_dir is None else args.run_dir
    results, rows = {}, []
    for env in args.envs:
        cfg = dataclasses.replace(config_for(env), num_seeds=args.num_seeds, eval_stochastic=True,
                                  run_dir=os.path.join(out_dir, env))
        if args.total_timesteps is not None:
            cfg = dataclasses.replace(cfg, total_timesteps=args.total_timesteps)
        print(f"--- presets: {env}", flush=True)
        result = train(cfg)
        results[env] = result
        plot_learning_curve(*curve_from_metrics(os.path.join(result.run_dir, "metrics.jsonl")),
                            os.path.join(result.run_dir, CURVE_FILE), title=f"preset: {env}")
        s, expected = result.summary, PRESETS[env].expected_return
        stochastic = np.asarray(s["final_eval_return_stochastic"], np.float64)
        rows.append([env, f"{s['env_steps']:,}", greedy_summary(s), f"{np.nanmean(stochastic):.1f}",
                     "not measured" if expected is None else f"{expected:g}", f"{s['steps_per_second']:,.0f}",
                     f"{s['compile_s']:.1f}"])
    print_table(COLUMNS, rows)
    return results


if __name__ == "__main__":
    run_script(main)
