"""Fused vs async on CartPole-v1: return against wall-clock time, PPO defaults, 5 seeds each.

    python -m experiments.fused_vs_async [--total-timesteps N] [--num-seeds S] [--run-dir DIR]

The same config trained four ways: fused (rollout and update in one jit, K
iterations a call), and async with the three lag policies (the actor thread
collects the next rollout while the learner updates; `lag 0` waits for fresh
params, `lag 1` acts one version behind, `latest` takes whatever is published).
The x axis is seconds since the run started, compilation included, so the
plot shows what a user waits for: each mode compiles its programs cold (no
persistent compilation cache, no programs kept from the mode before). Writes
`<run_dir>/<mode>/` and `<run_dir>/comparison.png`, and prints a table.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from experiments.common import StudyArgs, greedy_summary, parse_args, print_table, run_comparison, run_script
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.runtime import COMPILATION_CACHE_OFF

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CONFIG = TrainConfig(env="CartPole-v1")
MODES = {"fused": dict(mode="fused"), "async-lag0": dict(mode="async", lag="0"),
         "async-lag1": dict(mode="async", lag="1"), "async-latest": dict(mode="async", lag="latest")}

COLUMNS = ["mode", "final greedy return (mean ± std over seeds)", "steps/s (all seeds)", "compile s", "wall s"]


def main(argv: list[str] | None = None) -> dict[str, TrainResult]:
    args = parse_args(argv, StudyArgs(total_timesteps=500_000, num_seeds=5), __doc__)
    runs = {label: dataclasses.replace(CONFIG, total_timesteps=args.total_timesteps, num_seeds=args.num_seeds,
                                       **mode)
            for label, mode in MODES.items()}
    results = run_comparison(runs, "fused_vs_async", args.run_dir, x="wall_s")
    summaries = {label: result.summary for label, result in results.items()}
    print_table(COLUMNS, [[label, greedy_summary(s), f"{s['steps_per_second']:,.0f}", f"{s['compile_s']:.1f}",
                           f"{s['wall_s']:.1f}"] for label, s in summaries.items()])
    return results


if __name__ == "__main__":
    run_script(main, compilation_cache=COMPILATION_CACHE_OFF)  # each mode's compile a first run's, not a cache hit
