"""TD3 on Pendulum-v1: `--env Pendulum-v1 --algo td3` with its preset (the defaults the CLI gives it),
50k steps x 5 seeds.

    python -m experiments.td3_pendulum [--total-timesteps N] [--num-seeds S] [--run-dir DIR]

The preset (`presets.ENV_LEARNER_PRESETS["Pendulum-v1:td3"]`, TD3's own `ALGO_PRESETS["td3"]`): 4 envs
stepped once per iteration, 2 gradient steps per iteration on batches of 256 (half a gradient step per
env step), the actor and the target networks every 2nd gradient step, Adam 3e-4 (constant) for the
actor and the twin critics, tau 0.005, gamma 0.99, 64x64 ReLU networks, exploration noise 0.1 and target
smoothing 0.2 clipped at 0.5 (fractions of half the action range), uniform random actions for the first
1,000 steps. The issue's target: >= -200 on every seed of 3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.common import StudyArgs, run_script, study_main
from jaxrl_async.trainer import presets

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CONFIG = presets.config_for("Pendulum-v1", algo="td3")


def main(argv: list[str] | None = None) -> TrainResult:
    return study_main(CONFIG, "td3_pendulum", argv, StudyArgs(total_timesteps=50_000, num_seeds=5), __doc__)


if __name__ == "__main__":
    run_script(main)
