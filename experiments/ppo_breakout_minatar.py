"""PPO on Breakout-MinAtar (10x10x4 image observations, flattened into an MLP): 1M steps x 5 seeds.

    python -m experiments.ppo_breakout_minatar [--total-timesteps N] [--num-seeds S] [--run-dir DIR]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.common import StudyArgs, run_script, study_main
from jaxrl_async import LearnerConfig, NetworkConfig, TrainConfig

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CONFIG = TrainConfig(
    env="Breakout-MinAtar",
    num_envs=128,
    num_steps=64,
    # the MLP on the flattened 400 booleans, as the JAX reference trainers use: on a CPU the
    # conv torso ('auto' would pick it) runs ~50x slower and learned no better in 1M steps
    network=NetworkConfig(torso="mlp"),
    # a large learning rate with a short GAE horizon and tight clipping: the settings that
    # get past the early plateau (~6, the paddle's first few hits) within 1M steps
    learner=LearnerConfig(update_epochs=4, num_minibatches=8, learning_rate=2.5e-3, gae_lambda=0.8, clip_eps=0.1,
                          ent_coef=0.001),
)


def main(argv: list[str] | None = None) -> TrainResult:
    return study_main(CONFIG, "ppo_breakout_minatar", argv, StudyArgs(total_timesteps=1_000_000, num_seeds=5), __doc__)


if __name__ == "__main__":
    run_script(main)
