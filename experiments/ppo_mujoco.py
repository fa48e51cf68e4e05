"""PPO on a MuJoCo task (gymnasium HalfCheetah-v5) beside Stable-Baselines3, the same settings (issue #15).

    python -m experiments.ppo_mujoco [--env HalfCheetah-v5] [--seeds 0 1 2] [--total-timesteps 1000000]
        [--sb3-python PATH | --sb3-dir DIR] [--ours-dir DIR] [--run-dir DIR]

Both sides run SB3's default PPO settings (`CONFIG`): one env, 2048 steps per rollout, 10 epochs of
minibatches of 64, Adam 3e-4 (not annealed), gamma 0.99, GAE lambda 0.95, clip 0.2, no entropy bonus,
value loss 0.5, gradient norm 0.5, separate tanh 64x64 actor and critic, no value clipping and no
observation or reward normalisation. Ours trains `gymnasium:<env>` in the async mode at lag 0 (lock
step, as SB3), one run per seed (a host env trains one seed per run). Lag 1 learned much less here:
each rollout is one update of 10 epochs, so at lag 1 every rollout comes from params a whole update
old (seed 0: training return 1,098 in the last 40k steps against 1,529 at lag 0; SB3: 1,371), and
with one env acting dominates (~730 ms a rollout against a 68 ms update), so lag 1 was no faster.

The SB3 side: `--sb3-python` runs `benchmarks/peers_sb3.py` under that interpreter for each seed
(with SB3 and gymnasium[mujoco] installed), writing `sb3-seed<N>.jsonl` (every training episode)
and `.log` into the run directory; `--sb3-dir` reads such files from an earlier run instead, and
`--ours-dir` our `ours-seed<N>` runs (the two sides can then run at different times).

Writes `<run_dir>/comparison.png` (training-episode return against env steps, mean over seeds and
its 95% bootstrap CI, each side) and prints a table: steps/s, the final evaluation (ours: 20 greedy
episodes; SB3: 20 deterministic episodes) and the training episodes' return in the curve's last window.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys

import numpy as np

from experiments.common import (COMPARISON_FILE, curve_from_metrics, default_run_dir, last_json, plot_curves,
                                print_table, run_script)
from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig

# a metrics line (a point of our curve) every 5 rollouts, 10,240 steps
CONFIG = TrainConfig(env="gymnasium:HalfCheetah-v5", mode="async", lag="0", num_envs=1, num_steps=2048,
                     total_timesteps=1_000_000, eval_episodes=20, eval_interval=0, checkpoint_interval=0,
                     iterations_per_call=5,
                     network=NetworkConfig(hidden_sizes=(64, 64), activation="tanh"),
                     learner=LearnerConfig(update_epochs=10, num_minibatches=32, learning_rate=3e-4, anneal_lr=False,
                                           gamma=0.99, gae_lambda=0.95, clip_eps=0.2, clip_value_loss=False,
                                           ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5))
SB3_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "peers_sb3.py")
GRID_POINTS = 25  # the curves' x grid: training episodes binned into this many windows (40k steps at 1M)


def episode_curve(episodes: list[tuple[int, float]], grid: np.ndarray) -> np.ndarray:
    """[N]: the mean return of the episodes that ended in each window (grid[i-1], grid[i]] (the first
    from 0); NaN where none ended, and episodes past grid[-1] are left out."""
    steps = np.array([s for s, _ in episodes], float)
    returns = np.array([r for _, r in episodes], float)
    bins = np.searchsorted(grid, steps, side="left")
    return np.array([returns[bins == i].mean() if np.any(bins == i) else np.nan for i in range(len(grid))])


def _our_episodes(run_dir: str) -> list[tuple[int, float]]:
    """(env steps, mean return of the episodes ended since the previous line), one per metrics line
    where an episode ended (one seed)."""
    env_steps, returns = curve_from_metrics(os.path.join(run_dir, "metrics.jsonl"))
    return [(int(s), float(r)) for s, r in zip(env_steps, returns[:, 0]) if not np.isnan(r)]


def _sb3_run(python: str, env: str, steps: int, seed: int, out_dir: str) -> None:
    curve, log = (os.path.join(out_dir, f"sb3-seed{seed}.{ext}") for ext in ("jsonl", "log"))
    with open(log, "w") as f:
        subprocess.run([python, SB3_SCRIPT, "sb3", env, str(steps), str(seed), "default"], check=True,
                       stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "CURVE": curve})


def _sb3_result(sb3_dir: str, seed: int) -> tuple[dict, list[tuple[int, float]]]:
    summary = last_json(open(os.path.join(sb3_dir, f"sb3-seed{seed}.log")).read())
    episodes = [json.loads(line) for line in open(os.path.join(sb3_dir, f"sb3-seed{seed}.jsonl"))]
    return summary, [(e["env_steps"], e["episode_return"]) for e in episodes]


def _mean_std(values: list[float], fmt: str = ".1f") -> str:
    return f"{statistics.mean(values):{fmt}} ± {statistics.pstdev(values):{fmt}}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5", help="a gymnasium MuJoCo id")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--total-timesteps", type=int, default=CONFIG.total_timesteps)
    sb3 = parser.add_mutually_exclusive_group()
    sb3.add_argument("--sb3-python", help="a python with stable-baselines3 and gymnasium[mujoco]: run SB3 too")
    sb3.add_argument("--sb3-dir", help="read SB3's sb3-seed<N>.{jsonl,log} from this directory")
    parser.add_argument("--ours-dir", help="read our ours-seed<N> run directories from here instead of training")
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args(argv)
    from jaxrl_async.trainer.training import train  # after the script's CPU settings (run_script)

    out_dir = args.run_dir or default_run_dir("ppo_mujoco")
    os.makedirs(out_dir, exist_ok=True)
    grid = np.linspace(0, args.total_timesteps, GRID_POINTS + 1)[1:]
    ours = {}  # seed -> (run dir, summary)
    for seed in args.seeds:
        if args.ours_dir:
            run_dir = os.path.join(args.ours_dir, f"ours-seed{seed}")
            ours[seed] = run_dir, json.load(open(os.path.join(run_dir, "summary.json")))
            continue
        cfg = dataclasses.replace(CONFIG, env=f"gymnasium:{args.env}", seed=seed, total_timesteps=args.total_timesteps,
                                  run_dir=os.path.join(out_dir, f"ours-seed{seed}"))
        result = train(cfg, console=False)
        ours[seed] = result.run_dir, result.summary
        print(f"ours seed {seed}: {result.summary['steps_per_second']:,.0f} steps/s, "
              f"greedy return {result.summary['final_eval_return_mean']:.1f}", flush=True)
    sb3_dir = args.sb3_dir
    if args.sb3_python:
        for seed in args.seeds:
            _sb3_run(args.sb3_python, args.env, args.total_timesteps, seed, out_dir)
        sb3_dir = out_dir

    rows, curves = [], {}
    curves["ours"] = (grid, np.stack([episode_curve(_our_episodes(ours[s][0]), grid) for s in args.seeds], axis=-1))
    rows.append(["ours", _mean_std([summary["steps_per_second"] for _, summary in ours.values()], ",.0f"),
                 _mean_std([summary["final_eval_return_mean"] for _, summary in ours.values()]),
                 _mean_std(list(curves["ours"][1][-1]))])
    results = {"ours": {s: summary for s, (_, summary) in ours.items()}}
    if sb3_dir:
        sb3_runs = {seed: _sb3_result(sb3_dir, seed) for seed in args.seeds}
        curves["SB3"] = (grid, np.stack([episode_curve(sb3_runs[s][1], grid) for s in args.seeds], axis=-1))
        rows.append(["SB3", _mean_std([sb3_runs[s][0]["sps"] for s in args.seeds], ",.0f"),
                     _mean_std([sb3_runs[s][0]["eval20_det_mean"] for s in args.seeds]),
                     _mean_std(list(curves["SB3"][1][-1]))])
        results["SB3"] = {s: summary for s, (summary, _) in sb3_runs.items()}
    plot_curves(curves, os.path.join(out_dir, COMPARISON_FILE), f"PPO {args.env}, SB3's default settings")
    print_table(["run", "steps/s (mean ± std over seeds)", "final evaluation, 20 episodes",
                 "training return, last window"], rows)
    with open(os.path.join(out_dir, "ppo_mujoco.json"), "w") as f:
        json.dump({"argv": sys.argv, "results": results}, f, indent=1)
    return results


if __name__ == "__main__":
    run_script(main)
