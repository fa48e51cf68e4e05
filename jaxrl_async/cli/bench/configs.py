"""The training configs several benchmark cases share (`cases.py`, `step_costs.py`), as
`TrainConfig` keyword dicts."""

from __future__ import annotations

from jaxrl_async.config import DQNConfig, LearnerConfig, NetworkConfig, ReplayConfig

# PPO: the reference config (PureJaxRL's CartPole), and a larger batch of envs
REFERENCE = dict(env="CartPole-v1", num_envs=4, num_steps=128, total_timesteps=500_000)
LARGE = dict(env="CartPole-v1", num_envs=256, num_steps=32, total_timesteps=2_000_000)
# DQN, experiments/dqn_cartpole.py's config (128 gradient steps of batch 64 per 8 x 32 fragment), 100k steps
DQN_CARTPOLE = dict(env="CartPole-v1", algo="dqn", num_envs=8, num_steps=32, total_timesteps=100_000,
                    network=NetworkConfig(hidden_sizes=(64, 64), activation="relu"),
                    learner=LearnerConfig(learning_rate=2.3e-3, max_grad_norm=10.0),
                    replay=ReplayConfig(learning_starts=1_000, replay_ratio=128, replay_batch_size=64),
                    dqn=DQNConfig(target_update_period=128, epsilon_end=0.04, epsilon_decay_fraction=0.16))
