"""SAC on Pendulum-v1: `--algo sac` with its preset (the defaults the CLI gives it), 50k steps x 5 seeds.

    python -m experiments.sac_pendulum [--total-timesteps N] [--num-seeds S] [--run-dir DIR]

The preset (`presets.ALGO_PRESETS["sac"]`): one env stepped once per iteration, one gradient
step per env step on a batch of 256, Adam 3e-4 (constant) for the actor, the twin critics and
the temperature, tau 0.005, gamma 0.99, 64x64 ReLU networks, uniform random actions for the
first 1,000 steps, target entropy -1. The issue's target: >= -200 on each of 5 seeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.common import StudyArgs, run_script, study_main
from jaxrl_async.trainer import presets

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CONFIG = presets.config_for("Pendulum-v1", algo="sac")


def main(argv: list[str] | None = None) -> TrainResult:
    return study_main(CONFIG, "sac_pendulum", argv, StudyArgs(total_timesteps=50_000, num_seeds=5), __doc__)


if __name__ == "__main__":
    run_script(main)
