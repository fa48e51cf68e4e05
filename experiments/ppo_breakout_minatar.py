"""PPO on Breakout-MinAtar (10x10x4 image observations, so the CNN torso): 1M steps x 5 seeds.

    python -m experiments.ppo_breakout_minatar [--total-timesteps N] [--num-seeds S] [--run-dir DIR]
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from experiments.common import StudyArgs, parse_args, run_study
from jaxrl_async import PPOConfig, TrainConfig

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CONFIG = TrainConfig(
    env="Breakout-MinAtar",
    num_envs=64,
    num_steps=128,
    ppo=PPOConfig(update_epochs=4, num_minibatches=8, learning_rate=5e-4),
)


def main(argv: list[str] | None = None) -> TrainResult:
    args = parse_args(argv, StudyArgs(total_timesteps=1_000_000, num_seeds=5), __doc__)
    cfg = dataclasses.replace(CONFIG, total_timesteps=args.total_timesteps, num_seeds=args.num_seeds)
    return run_study(cfg, "ppo_breakout_minatar", args.run_dir)


if __name__ == "__main__":
    from jaxrl_async import configure_cpu_runtime

    # the commands' CPU settings, before JAX starts (jaxrl_async/runtime.py); one device: the seeds are vmapped
    configure_cpu_runtime(expose_cores=False)
    main()
