"""The replay learners in the async mode (issue #16): DQN on CartPole-v1, fused against async, A B C A B C.

    python -m experiments.offpolicy_async [--total-timesteps 100000] [--repeats 2] [--seeds 0]
                                          [--sync-interval 1] [--no-host]

Three runs of `experiments/dqn_cartpole.py`'s config (8 envs x 32 steps an iteration, 128 gradient
steps of batch 64 on each fragment), alternated so that a loaded machine slows each alike:

- `fused`: gymnax CartPole-v1, acting and learning in one jitted program;
- `async lag 1`: the same gymnax env, the actor thread one params version behind the learner;
- `host async lag 1`: gymnasium:CartPole-v1 (`--env gymnasium:CartPole-v1`), stepped on the host by
  the actor thread while the learner takes its gradient steps (`--no-host` leaves it out).

Prints steps/s (median over the repeats, and its ratio to fused), the final greedy return, the
replay rates (gradient steps/s, samples per gradient step) and the pipeline's figures (policy lag,
learner wait fraction, overlap efficiency); writes `<run_dir>/offpolicy_async.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

from jaxrl_async.trainer.runtime import configure_compilation_cache, configure_cpu_runtime

SUMMARY_KEYS = ("steps_per_second", "final_eval_return_mean", "gradient_steps_per_second",
                "samples_per_gradient_step", "replay_fill", "policy_lag_mean", "learner_wait_fraction",
                "overlap_efficiency", "compile_s", "train_s")


def configs(total_timesteps: int, seed: int, sync_interval: int, host: bool) -> dict:
    from experiments.dqn_cartpole import CONFIG

    # one device (a core) for the learner in every run: the comparison is of the modes, not of sharding
    base = dataclasses.replace(CONFIG, total_timesteps=total_timesteps, num_seeds=1, seed=seed, eval_interval=0,
                               checkpoint_interval=0, devices=1)
    runs = {"fused": base,
            "async lag 1": dataclasses.replace(base, mode="async", lag="1", sync_interval=sync_interval)}
    if host:
        runs["host async lag 1"] = dataclasses.replace(runs["async lag 1"], env="gymnasium:CartPole-v1")
    return runs


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--sync-interval", type=int, default=1)
    parser.add_argument("--no-host", action="store_true", help="leave out gymnasium:CartPole-v1")
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args(argv)
    from jaxrl_async.trainer.training import train

    out_dir = args.run_dir or os.path.join("runs", f"offpolicy_async-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(out_dir, exist_ok=True)
    results: dict[str, list[dict]] = {}
    for repeat in range(args.repeats):
        for seed in args.seeds:
            for label, cfg in configs(args.total_timesteps, seed, args.sync_interval, not args.no_host).items():
                run_dir = os.path.join(out_dir, f"{label.replace(' ', '-')}-seed{seed}-{repeat}")
                summary = train(dataclasses.replace(cfg, run_dir=run_dir), console=False).summary
                row = {k: summary.get(k) for k in SUMMARY_KEYS} | {"seed": seed, "repeat": repeat}
                results.setdefault(label, []).append(row)
                print(f"  {label}, seed {seed}, repeat {repeat}: {row['steps_per_second']:,.0f} steps/s, "
                      f"{row['gradient_steps_per_second']:,.0f} gradient steps/s, "
                      f"greedy return {row['final_eval_return_mean']:.1f}", flush=True)
    reference = statistics.median(r["steps_per_second"] for r in results["fused"])
    print(f"\n{'run':<20}{'steps/s':>10}{'ratio':>7}{'grad steps/s':>14}{'samples/step':>14}{'return':>9}"
          f"{'lag':>6}{'wait':>7}{'overlap':>9}")
    for label, rows in results.items():
        median = lambda k: statistics.median(r[k] for r in rows) if rows[0][k] is not None else None  # noqa: E731
        sps = median("steps_per_second")
        print(f"{label:<20}{sps:>10,.0f}{sps / reference:>7.2f}{_fmt(median('gradient_steps_per_second'), ',.0f'):>14}"
              f"{_fmt(median('samples_per_gradient_step'), '.2f'):>14}{_fmt(median('final_eval_return_mean'), '.1f'):>9}"
              f"{_fmt(median('policy_lag_mean'), '.2f'):>6}{_fmt(median('learner_wait_fraction'), '.2f'):>7}"
              f"{_fmt(median('overlap_efficiency'), '.2f'):>9}")
    with open(os.path.join(out_dir, "offpolicy_async.json"), "w", encoding="utf-8") as f:
        json.dump({"argv": sys.argv, "results": results}, f, indent=1)
    return results


if __name__ == "__main__":
    configure_cpu_runtime()
    configure_compilation_cache()
    main()
