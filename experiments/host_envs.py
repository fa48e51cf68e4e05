"""Host environments and actors on their own device (issue #15): speed side by side, A B A B.

    python -m experiments.host_envs actor-device [--repeats 2] [--total-timesteps 200000]
    python -m experiments.host_envs cartpole     [--seeds 0 1 2 3 4] [--total-timesteps 500000] [--source envpool]
    python -m experiments.host_envs envpool      [--repeats 2] [--total-timesteps 100000]
    python -m experiments.host_envs overlap      [--repeats 2] [--busy-us 100] [--wait sleep|spin] [--update-epochs 150]
    python -m experiments.host_envs actors       [--repeats 2] [--num-envs 8]

- `actor-device`: gymnax CartPole-v1, the reference config (4 envs x 128 steps, PPO defaults): fused
  against async lag 1 with the actor on a CPU device (a core) of its own, alternated.
- `cartpole`: gymnasium CartPole-v1 (`--env gymnasium:CartPole-v1`), PPO with the reference (pjrl)
  hyperparameters, async lag 1: steps/s and the final greedy return per seed (`--source envpool`:
  `--env envpool:CartPole-v1`).
- `envpool`: the same run on gymnasium's CartPole-v1 and on EnvPool's, alternated.
- `overlap`: gymnasium CartPole-v1 with a fixed wait in every env step (`--busy-us` per env) and an
  update made as costly as stepping plus acting by its epochs (`--update-epochs`; with `--busy-us 100`
  150 epochs, ~120 ms per fragment, balance the two threads): lag 1 against lag 0 (lock step), with the
  pipeline's timings (env, inference, transfer, update, learner wait, overlap efficiency).
- `actors`: gymnasium CartPole-v1 (busy-wait envs), --num-actors 1 against 2.

Every core is a JAX device here (the commands' setting), so `--actor-device cpu` has a core of its own.
Prints a table; writes `<run_dir>/<case>.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import numpy as np

from jaxrl_async.trainer.runtime import configure_compilation_cache, configure_cpu_runtime

BUSY_ID = "JaxrlBusy/CartPole-v1"
SUMMARY_KEYS = ("steps_per_second", "final_eval_return_mean", "overlap_efficiency", "learner_wait_fraction",
                "policy_lag_mean", "compile_s", "train_s")
TIMING_KEYS = ("env_s", "inference_s", "transfer_s", "update_s", "rollout_s", "learner_wait_s")


def register_busy_cartpole(busy_us: float, wait: str) -> None:
    """gymnasium CartPole-v1 whose every step costs `busy_us` more microseconds (a costly simulator):
    'spin' busy-waits in Python (holding the GIL, as a pure-Python simulator would), 'sleep' sleeps
    (releasing it, as a simulator in C++ or on another machine would)."""
    import gymnasium as gym

    class BusyWait(gym.Wrapper):
        def step(self, action):
            if wait == "sleep":
                time.sleep(busy_us * 1e-6)
            else:
                end = time.perf_counter() + busy_us * 1e-6
                while time.perf_counter() < end:
                    pass
            return self.env.step(action)

    if BUSY_ID not in gym.registry:
        gym.register(BUSY_ID, entry_point=lambda **kw: BusyWait(gym.make("CartPole-v1", **kw).unwrapped),
                     max_episode_steps=500)


def _train(cfg):
    from jaxrl_async.trainer.training import train

    result = train(cfg, console=False)
    summary = {k: result.summary.get(k) for k in SUMMARY_KEYS}
    lines = [json.loads(line) for line in open(os.path.join(result.run_dir, "metrics.jsonl"))]
    summary.update({k: float(np.mean([line[k] for line in lines if k in line])) if any(k in line for line in lines)
                    else None for k in TIMING_KEYS})
    return summary


def _alternate(configs: dict, repeats: int, out_dir: str) -> dict:
    results = {label: [] for label in configs}
    for r in range(repeats):
        for label, cfg in configs.items():
            summary = _train(dataclasses.replace(cfg, run_dir=os.path.join(out_dir, f"{label}-{r}")))
            results[label].append(summary)
            print(f"  {label} repeat {r}: {summary['steps_per_second']:,.0f} steps/s, "
                  f"return {summary['final_eval_return_mean']:.1f}", flush=True)
    return results


def _table(results: dict, reference: str) -> None:
    ref = statistics.median(s["steps_per_second"] for s in results[reference])
    print(f"\n{'run':<28}{'steps/s (median)':>18}{'ratio':>8}  timings per iteration (ms): env / inference / "
          "transfer / update / learner wait; overlap efficiency")
    for label, runs in results.items():
        sps = statistics.median(s["steps_per_second"] for s in runs)
        ms = lambda k: "-" if runs[0][k] is None else f"{1e3 * statistics.median(s[k] for s in runs):.1f}"  # noqa: E731
        overlap = runs[0]["overlap_efficiency"]
        print(f"{label:<28}{sps:>18,.0f}{sps / ref:>8.2f}  {ms('env_s')} / {ms('inference_s')} / {ms('transfer_s')} / "
              f"{ms('update_s')} / {ms('learner_wait_s')}; " + ("-" if overlap is None else f"{overlap:.2f}"))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", choices=("actor-device", "cartpole", "envpool", "overlap", "actors"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--total-timesteps", type=int, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--source", choices=("gymnasium", "envpool"), default="gymnasium",
                        help="cartpole: where CartPole-v1 comes from")
    parser.add_argument("--busy-us", type=float, default=100.0)
    parser.add_argument("--wait", choices=("spin", "sleep"), default="sleep")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--update-epochs", type=int, default=4, help="overlap/actors: PPO epochs (the update's cost)")
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args(argv)
    from jaxrl_async.config import LearnerConfig
    from jaxrl_async import TrainConfig

    out_dir = args.run_dir or os.path.join("runs", f"host_envs-{args.case}-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(out_dir, exist_ok=True)
    quiet = dict(eval_interval=0, checkpoint_interval=0)
    if args.case == "actor-device":
        steps = args.total_timesteps or 200_000
        configs = {"fused": TrainConfig(env="CartPole-v1", total_timesteps=steps, **quiet),
                   "async lag1 actor cpu": TrainConfig(env="CartPole-v1", mode="async", lag="1", actor_device="cpu",
                                                       devices=1, total_timesteps=steps, **quiet),
                   "async lag1 same device": TrainConfig(env="CartPole-v1", mode="async", lag="1",
                                                         total_timesteps=steps, **quiet)}
        results = _alternate(configs, args.repeats, out_dir)
        _table(results, "fused")
    elif args.case == "cartpole":
        steps = args.total_timesteps or 500_000
        results = {f"seed {seed}": [_train(TrainConfig(env=f"{args.source}:CartPole-v1", mode="async", seed=seed,
                                                       total_timesteps=steps, eval_interval=0,
                                                       run_dir=os.path.join(out_dir, f"seed{seed}")))]
                   for seed in args.seeds}
        for label, (s,) in results.items():
            print(f"{label}: {s['steps_per_second']:,.0f} steps/s, final greedy return {s['final_eval_return_mean']:.1f}")
        _table(results, f"seed {args.seeds[0]}")
    elif args.case == "envpool":
        steps = args.total_timesteps or 100_000
        configs = {source: TrainConfig(env=f"{source}:CartPole-v1", mode="async", total_timesteps=steps, **quiet)
                   for source in ("gymnasium", "envpool")}
        results = _alternate(configs, args.repeats, out_dir)
        _table(results, "gymnasium")
    else:
        register_busy_cartpole(args.busy_us, args.wait)
        steps = args.total_timesteps or 40_960
        base = TrainConfig(env="gymnasium:" + BUSY_ID, mode="async", num_envs=args.num_envs if args.case == "actors"
                           else 4, total_timesteps=steps, eval_episodes=4, **quiet,
                           learner=LearnerConfig(update_epochs=args.update_epochs))
        if args.case == "overlap":
            configs = {"lag 0 (lock step)": dataclasses.replace(base, lag="0"),
                       "lag 1": dataclasses.replace(base, lag="1")}
        else:
            configs = {"1 actor": base, "2 actors": dataclasses.replace(base, num_actors=2)}
        results = _alternate(configs, args.repeats, out_dir)
        _table(results, next(iter(configs)))
    with open(os.path.join(out_dir, f"{args.case}.json"), "w") as f:
        json.dump({"argv": sys.argv, "results": results}, f, indent=1)
    return results


if __name__ == "__main__":
    configure_cpu_runtime()  # every core a device: the actor's own core for --actor-device cpu
    configure_compilation_cache()
    main()
