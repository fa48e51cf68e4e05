"""PPO on Acrobot-v1 with its preset (rejax's config): 500k steps x 5 seeds.

    python -m experiments.ppo_acrobot [--total-timesteps N] [--num-seeds S] [--run-dir DIR]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.common import StudyArgs, run_script, study_main
from jaxrl_async.trainer.presets import config_for

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

# -1 a step until the tip swings up, at most 500 steps
CONFIG = config_for("Acrobot-v1")


def main(argv: list[str] | None = None) -> TrainResult:
    return study_main(CONFIG, "ppo_acrobot", argv, StudyArgs(total_timesteps=CONFIG.total_timesteps, num_seeds=5), __doc__)


if __name__ == "__main__":
    run_script(main)
