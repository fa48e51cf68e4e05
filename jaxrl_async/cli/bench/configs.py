"""The training configs several benchmark cases share (`cases.py`, `step_costs.py`,
`processes.py`): PPO's as `TrainConfig` keyword dicts, DQN's as its preset's config."""

from __future__ import annotations

from jaxrl_async.trainer import presets

# PPO: the reference config (PureJaxRL's CartPole), and a larger batch of envs
REFERENCE = dict(env="CartPole-v1", num_envs=4, num_steps=128, total_timesteps=500_000)
LARGE = dict(env="CartPole-v1", num_envs=256, num_steps=32, total_timesteps=2_000_000)
# DQN: its CartPole-v1 preset (128 gradient steps of batch 64 per 8 x 32 fragment), 100k steps, one device
DQN_CARTPOLE = presets.config_for("CartPole-v1", algo="dqn").with_fields(total_timesteps=100_000, devices=1)
