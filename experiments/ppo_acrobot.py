"""PPO with the default hyperparameters on Acrobot-v1: 500k steps x 5 seeds.

    python -m experiments.ppo_acrobot [--total-timesteps N] [--num-seeds S] [--run-dir DIR]
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from experiments.common import StudyArgs, parse_args, run_study
from jaxrl_async import TrainConfig

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

# the CartPole defaults carry over: -1 a step until the tip swings up, at most 500 steps
CONFIG = TrainConfig(env="Acrobot-v1")


def main(argv: list[str] | None = None) -> TrainResult:
    args = parse_args(argv, StudyArgs(total_timesteps=500_000, num_seeds=5), __doc__)
    cfg = dataclasses.replace(CONFIG, total_timesteps=args.total_timesteps, num_seeds=args.num_seeds)
    return run_study(cfg, "ppo_acrobot", args.run_dir)


if __name__ == "__main__":
    from jaxrl_async import configure_cpu_runtime

    # the commands' CPU settings, before JAX starts (jaxrl_async/runtime.py); one device: the seeds are vmapped
    configure_cpu_runtime(expose_cores=False)
    main()
