"""PPO on Pendulum-v1 (continuous actions, Gaussian head): 1M steps x 5 seeds.

    python -m experiments.ppo_pendulum [--total-timesteps N] [--num-seeds S] [--run-dir DIR]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.common import StudyArgs, run_script, study_main
from jaxrl_async import LearnerConfig, NetworkConfig, TrainConfig

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CONFIG = TrainConfig(
    env="Pendulum-v1",
    num_envs=100,
    num_steps=100,
    # the angular velocity spans [-8, 8], cos and sin only [-1, 1]
    normalize_obs=True,
    network=NetworkConfig(activation="swish"),
    learner=LearnerConfig(update_epochs=10, num_minibatches=10, learning_rate=1e-3, max_grad_norm=10.0,
                          # a long horizon: swinging up pays off only after ~100 steps
                          gamma=0.995, gae_lambda=0.95,
                          # the Gaussian's learned log-std explores enough; a bonus keeps it too wide
                          ent_coef=0.0),
)


def main(argv: list[str] | None = None) -> TrainResult:
    return study_main(CONFIG, "ppo_pendulum", argv, StudyArgs(total_timesteps=1_000_000, num_seeds=5), __doc__)


if __name__ == "__main__":
    run_script(main)
