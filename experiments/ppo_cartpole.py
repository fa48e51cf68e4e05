"""PPO with the default hyperparameters on CartPole-v1: 500k steps x 5 seeds.

    python -m experiments.ppo_cartpole [--total-timesteps N] [--num-seeds S] [--run-dir DIR]
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from experiments.common import StudyArgs, parse_args, run_study
from jaxrl_async import TrainConfig

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CONFIG = TrainConfig(env="CartPole-v1")  # the package defaults are tuned for CartPole


def main(argv: list[str] | None = None) -> TrainResult:
    args = parse_args(argv, StudyArgs(total_timesteps=500_000, num_seeds=5), __doc__)
    cfg = dataclasses.replace(CONFIG, total_timesteps=args.total_timesteps, num_seeds=args.num_seeds)
    return run_study(cfg, "ppo_cartpole", args.run_dir)


if __name__ == "__main__":
    from jaxrl_async import configure_cpu_runtime

    # the commands' CPU settings, before JAX starts (jaxrl_async/runtime.py); one device: the seeds are vmapped
    configure_cpu_runtime(expose_cores=False)
    main()
