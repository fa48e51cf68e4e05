"""Every learner on CartPole-v1 and Acrobot-v1 with one shared config: 5 seeds each.

    python -m experiments.learners [--envs ...] [--algos ...] [--num-seeds S] [--run-dir DIR]

PPO, A2C, REINFORCE (with a baseline) and IMPALA (V-trace) see the same rollouts
(8 envs x 32 steps) and the same SGD loop (4 epochs x 4 minibatches, Adam at 5e-4
annealed); only their losses differ, and IMPALA uses lambda 1 (plain V-trace).
The budget is fixed per env (`BUDGETS`). Each (env, learner) pair is one run
with its seeds vmapped; the script prints a table of final greedy returns and
steps/s and writes `<run_dir>/<env>-<algo>/` and `<run_dir>/<env>.png`.
"""

from __future__ import annotations

import dataclasses
import os

import tyro

from experiments.common import curve_from_metrics, default_run_dir, greedy_summary, plot_curves, print_table, run_script
from jaxrl_async import LearnerConfig, TrainConfig

ALGOS = ("ppo", "a2c", "reinforce", "impala")
BUDGETS = {"CartPole-v1": 300_000, "Acrobot-v1": 500_000}  # env steps per seed


def learner_config(env: str, algo: str, total_timesteps: int, num_seeds: int) -> TrainConfig:
    return TrainConfig(env=env, algo=algo, num_envs=8, num_steps=32, total_timesteps=total_timesteps,
                       num_seeds=num_seeds,
                       learner=LearnerConfig(update_epochs=4, num_minibatches=4, learning_rate=5e-4,
                                             gae_lambda=1.0 if algo == "impala" else 0.95))


@dataclasses.dataclass(frozen=True)
class Args:
    envs: tuple[str, ...] = tuple(BUDGETS)
    """Environments to run."""
    algos: tuple[str, ...] = ALGOS
    """Learners to run."""
    num_seeds: int = 5
    """Independent seeds per run, vmapped in one jit."""
    total_timesteps: int | None = None
    """Env steps per seed for every env (default: each env's budget in BUDGETS)."""
    run_dir: str | None = None
    """The study's directory; default runs/learners-<timestamp>."""


COLUMNS = ["env", "learner", "env steps (per seed)", "final greedy return (mean ± std over seeds)", "per seed",
           "steps/s (all seeds)", "compile s"]


def main(argv: list[str] | None = None) -> dict:
    from jaxrl_async import train  # after the CPU settings, see experiments/common.py

    args = tyro.cli(Args, args=argv, description=__doc__)
    out_dir = default_run_dir("learners") if args.run_dir is None else args.run_dir
    results, rows = {}, []
    for env in args.envs:
        curves = {}
        for algo in args.algos:
            steps = BUDGETS.get(env, 500_000) if args.total_timesteps is None else args.total_timesteps
            cfg = learner_config(env, algo, steps, args.num_seeds)
            print(f"--- {env} {algo}", flush=True)
            result = train(dataclasses.replace(cfg, run_dir=os.path.join(out_dir, f"{env}-{algo}")))
            results[env, algo] = result
            curves[algo] = curve_from_metrics(os.path.join(result.run_dir, "metrics.jsonl"))
            s = result.summary
            rows.append([env, algo, f"{s['env_steps']:,}", greedy_summary(s),
                         ", ".join(f"{r:.1f}" for r in s["final_eval_return"]), f"{s['steps_per_second']:,.0f}",
                         f"{s['compile_s']:.1f}"])
        plot_curves(curves, os.path.join(out_dir, f"{env}.png"), f"learners: {env}")
    print_table(COLUMNS, rows)
    return results


if __name__ == "__main__":
    run_script(main)
