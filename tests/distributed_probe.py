"""Run by tests/test_distributed.py, as two processes of one distributed run (argv: OUT_DIR PORT
PROCESS_ID, one CPU device each) or as one process (argv: OUT_DIR, JAX_NUM_CPU_DEVICES=2): the
library's side of a run over processes, where the CLI has no hook (a stop at a given update, a
sweep's hyperparameters). It writes run directories under OUT_DIR, which the test reads.

PROBE_RUNS in the environment names the runs to make, comma-separated (default: envs, straight,
resumed, sweep); `envs_again` repeats the env split in a run directory of its own, and with
PROBE_CLI_ARGS (a JSON list of `jaxrl-async` argument lists) the process then runs those
commands through `jaxrl_async.cli.main.main`, as the command would, writing their exit codes to
OUT_DIR/cli_exit_codes.json: a command in a process the test starts anyway, rather than one
more process (each pays JAX's import and start)."""

import dataclasses
import json
import os
import sys

from jaxrl_async.trainer import distributed
from jaxrl_async.trainer.runtime import configure_cpu_runtime

configure_cpu_runtime(expose_cores=False)  # the device count comes from JAX_NUM_CPU_DEVICES
if len(sys.argv) == 4:  # before anything starts JAX's backends
    distributed.initialize(f"127.0.0.1:{sys.argv[2]}", num_processes=2, process_id=int(sys.argv[3]), timeout_s=120)

from jaxrl_async import TrainConfig, sweep_hparams, train  # noqa: E402
from jaxrl_async.config import NetworkConfig  # noqa: E402


def main():
    out = sys.argv[1]
    runs = os.environ.get("PROBE_RUNS", "envs,straight,resumed,sweep").split(",")
    # devices=2 in both layouts: one process splits one seed's envs only when asked (sharding.py)
    base = TrainConfig(num_seeds=4, num_envs=4, num_steps=8, total_timesteps=32 * 8, eval_episodes=2, devices=2,
                       network=NetworkConfig(hidden_sizes=(8,)))
    # one seed: its envs split over the two devices, the gradient averaged by XLA's collectives
    for name in ("envs", "envs_again"):
        if name in runs:
            train(dataclasses.replace(base, num_seeds=1, run_dir=f"{out}/{name}"), console=False)
    if "straight" in runs:
        train(dataclasses.replace(base, run_dir=f"{out}/straight"), console=False)
    if "resumed" in runs:
        stopped = dataclasses.replace(base, run_dir=f"{out}/resumed")
        assert not train(stopped, console=False, stop_after_updates=4).completed
        train(stopped, console=False, resume=True)
    if "sweep" in runs:
        # 2 points x 2 seeds: the sweep's [S] hyperparameters are split over the devices with the seeds
        hparams, _ = sweep_hparams(base.learner, 2, learning_rate=[1e-3, 3e-3])
        train(dataclasses.replace(base, run_dir=f"{out}/sweep"), console=False, hparams=hparams)
    commands = json.loads(os.environ.get("PROBE_CLI_ARGS", "[]"))
    if commands:
        from jaxrl_async.cli.main import main as cli

        codes = [cli(args) for args in commands]
        with open(f"{out}/cli_exit_codes.json", "w", encoding="utf-8") as f:
            json.dump(codes, f)


if __name__ == "__main__":
    sys.exit(main())
