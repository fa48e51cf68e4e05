"""Recurrent PPO on a partially observable task: StatelessCartPole-v1, GRU vs MLP, 5 seeds each.

    python -m experiments.recurrent_pomdp [--total-timesteps N] [--num-seeds S] [--run-dir DIR]

StatelessCartPole-v1 is CartPole-v1 with both velocities hidden: the policy sees
only the cart position and the pole angle. A feed-forward policy cannot tell
which way the pole is falling; a GRU core can infer it from the last few
observations. Both runs share every other setting. Writes `<run_dir>/gru/`,
`<run_dir>/mlp/` and `<run_dir>/comparison.png`, and prints a table.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from experiments.common import StudyArgs, greedy_summary, parse_args, print_table, run_comparison, run_script
from jaxrl_async import NetworkConfig
from jaxrl_async.trainer.presets import config_for

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

# its preset: 16 envs x 64 steps, 4 x 4, lr 1e-3, a 64-unit torso and a 64-unit GRU core
CONFIG = config_for("StatelessCartPole-v1")
FEED_FORWARD = NetworkConfig(hidden_sizes=(64, 64), core="none")

COLUMNS = ["env", "policy", "env steps (per seed)", "final greedy return (mean ± std over seeds)",
           "steps/s (all seeds)"]


def main(argv: list[str] | None = None) -> dict[str, TrainResult]:
    args = parse_args(argv, StudyArgs(total_timesteps=CONFIG.total_timesteps, num_seeds=5), __doc__)
    cfg = dataclasses.replace(CONFIG, total_timesteps=args.total_timesteps, num_seeds=args.num_seeds)
    runs = {"gru": cfg, "mlp": dataclasses.replace(cfg, network=FEED_FORWARD)}
    results = run_comparison(runs, "recurrent_pomdp", args.run_dir)
    summaries = {label: result.summary for label, result in results.items()}
    print_table(COLUMNS, [[s["env_id"], label, f"{s['env_steps']:,}", greedy_summary(s), f"{s['steps_per_second']:,.0f}"]
                          for label, s in summaries.items()])
    return results


if __name__ == "__main__":
    run_script(main)
