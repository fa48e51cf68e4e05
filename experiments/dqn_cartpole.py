"""DQN on CartPole-v1: 300k steps x 5 seeds (the issue's budget is 500k).

    python -m experiments.dqn_cartpole [--total-timesteps N] [--num-seeds S] [--run-dir DIR]

Each iteration collects 8 envs x 32 steps, then takes 128 gradient steps (batch 64) and
copies the online network to the target after them: one round of fitted Q-iteration per
256 env steps, as Stable-Baselines3's tuned CartPole config does (train_freq 256,
gradient_steps 128). The learning rate is annealed to zero, so the final policy is a
settled one rather than a snapshot of DQN's late oscillations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.common import StudyArgs, run_script, study_main
from jaxrl_async import TrainConfig
from jaxrl_async.config import DQNConfig, LearnerConfig, NetworkConfig

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CONFIG = TrainConfig(
    env="CartPole-v1", algo="dqn", num_envs=8, num_steps=32, total_timesteps=300_000,
    network=NetworkConfig(hidden_sizes=(64, 64), activation="relu"),
    learner=LearnerConfig(learning_rate=2.3e-3, anneal_lr=True, max_grad_norm=10.0, gamma=0.99),
    dqn=DQNConfig(replay_capacity=100_000, learning_starts=1_000, replay_ratio=128, replay_batch_size=64,
                  target_update_period=128, epsilon_end=0.04, epsilon_decay_fraction=0.16))


def main(argv: list[str] | None = None) -> TrainResult:
    return study_main(CONFIG, "dqn_cartpole", argv, StudyArgs(total_timesteps=300_000, num_seeds=5), __doc__)


if __name__ == "__main__":
    run_script(main)
