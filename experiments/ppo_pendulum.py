"""PPO on Pendulum-v1 (continuous actions, Gaussian head): 1M steps x 5 seeds.

    python -m experiments.ppo_pendulum [--total-timesteps N] [--num-seeds S] [--run-dir DIR]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.common import StudyArgs, run_script, study_main
from jaxrl_async.trainer.presets import config_for

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

# its preset: 100 envs x 100 steps, normalised observations, swish, 10 x 10 epochs, gamma 0.995, no entropy bonus
CONFIG = config_for("Pendulum-v1", algo="ppo")  # the env's own preset is SAC's


def main(argv: list[str] | None = None) -> TrainResult:
    return study_main(CONFIG, "ppo_pendulum", argv, StudyArgs(total_timesteps=CONFIG.total_timesteps, num_seeds=5), __doc__)


if __name__ == "__main__":
    run_script(main)
