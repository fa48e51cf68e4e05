"""PPO on Breakout-MinAtar with its preset (10x10x4 image observations, flattened into an MLP): 1M steps x 5 seeds.

    python -m experiments.ppo_breakout_minatar [--total-timesteps N] [--num-seeds S] [--run-dir DIR]
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from experiments.common import StudyArgs, run_script, study_main
from jaxrl_async.trainer.presets import config_for

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

# its preset (see jaxrl_async/trainer/presets.py and experiments/breakout_gap.py for how it was chosen),
# evaluated both greedily and with the sampling policy, the figure PureJaxRL reports
CONFIG = dataclasses.replace(config_for("Breakout-MinAtar"), eval_stochastic=True)


def main(argv: list[str] | None = None) -> TrainResult:
    return study_main(CONFIG, "ppo_breakout_minatar", argv,
                      StudyArgs(total_timesteps=CONFIG.total_timesteps, num_seeds=5), __doc__)


if __name__ == "__main__":
    run_script(main)
