"""A learning-rate sweep vmapped inside one jit: 4 learning rates x 4 seeds of PPO on CartPole-v1.

    python -m experiments.lr_sweep [--total-timesteps N] [--seeds-per-lr S] [--run-dir DIR]

All 16 runs are one `train` call: the learning rate is an array in the learner
state (`jaxrl_async.sweep_hparams`), so XLA compiles one program and vmaps it
over the 16 (learning rate, seed) pairs. Writes the run directory (one
`metrics.jsonl` with a column per seed) and `<run_dir>/comparison.png` (one curve
per learning rate: the mean over its seeds and a 95% bootstrap interval), and
prints a table of final greedy returns per learning rate.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tyro

from experiments.common import COMPARISON_FILE, curve_from_metrics, default_run_dir, plot_curves, print_table, run_script
from jaxrl_async import TrainConfig

LEARNING_RATES = (1e-4, 3e-4, 1e-3, 3e-3)
CONFIG = TrainConfig(env="CartPole-v1")


@dataclasses.dataclass(frozen=True)
class Args:
    total_timesteps: int = 300_000
    """Environment steps per seed."""
    seeds_per_lr: int = 4
    """Seeds at each learning rate."""
    learning_rates: tuple[float, ...] = LEARNING_RATES
    """The learning rates swept (Adam's starting step size, annealed to 0)."""
    run_dir: str | None = None
    """Run directory; default runs/lr_sweep-<timestamp>."""


COLUMNS = ["learning rate", "final greedy return (mean ± std over seeds)", "per seed"]


def main(argv: list[str] | None = None):
    from jaxrl_async import sweep_hparams, train  # after the CPU settings, see experiments/common.py

    args = tyro.cli(Args, args=argv, description=__doc__)
    hparams, points = sweep_hparams(CONFIG.learner, args.seeds_per_lr, learning_rate=args.learning_rates)
    cfg = dataclasses.replace(CONFIG, total_timesteps=args.total_timesteps, num_seeds=hparams.learning_rate.shape[0],
                              run_dir=default_run_dir("lr_sweep") if args.run_dir is None else args.run_dir)
    result = train(cfg, hparams=hparams)

    env_steps, returns = curve_from_metrics(os.path.join(result.run_dir, "metrics.jsonl"))
    final = np.asarray(result.summary["final_eval_return"], np.float64)
    k = args.seeds_per_lr
    curves, rows = {}, []
    for i, point in enumerate(points):
        lr, seeds = point["learning_rate"], slice(i * k, (i + 1) * k)
        curves[f"lr {lr:g}"] = (env_steps, returns[:, seeds])
        rows.append([f"{lr:g}", f"{final[seeds].mean():.1f} ± {final[seeds].std():.1f}",
                     ", ".join(f"{r:.1f}" for r in final[seeds])])
    plot_curves(curves, os.path.join(result.run_dir, COMPARISON_FILE),
                f"PPO on {cfg.env}: {len(points)} learning rates x {k} seeds, one jit")
    s = result.summary
    print(f"{s['num_seeds']} runs in one jit: {s['steps_per_second']:,.0f} steps/s (all together), "
          f"compile {s['compile_s']:.1f} s, wall {s['wall_s']:.1f} s")
    print_table(COLUMNS, rows)
    return result


if __name__ == "__main__":
    run_script(main)
