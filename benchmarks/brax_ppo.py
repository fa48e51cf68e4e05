"""Our PPO beside Brax's own PPO trainer on the same env and hyperparameters, alternated in one command.

    python -m benchmarks.brax_ppo --rounds 3
    python -m benchmarks.brax_ppo --case go1_cpu128 --rounds 3

The Brax side is `benchmarks/peers_brax.py`, run by this python (it shims the one call of Brax
0.14.2's trainer that our jax lacks: its docstring) or by `--brax-python`, e.g. a virtualenv with
jax 0.9.2. Each run is a new process, ours then Brax's, `--rounds` times (A B A B: drift in this
shared machine's speed hits both alike). Every run's figures go to one JSON line in `--out`; a
table of medians is printed.

The cases (`CASES` below), at `--total-timesteps` env steps (default: 8 updates):

`inverted_pendulum` (the default), Brax's published settings, on the MJX backend both sides:
- Brax: 2048 envs, `unroll_length` 5, `batch_size` 1024 x 32 minibatches = 163,840 env steps per
  update (16 unrolls of 5 steps per env, GAE over each unroll), 4 epochs, discount 0.97, Adam
  3e-4, entropy 0.01, clip 0.3, reward x10, normalised observations; its default networks
  (policy 4 x 32, value 5 x 256, swish), a tanh-squashed Gaussian.
- ours: 2048 envs x 80 steps = the same 163,840 per update, GAE over the 80 steps, 32
  minibatches, 4 epochs and the same coefficients, and as Brax's: the tanh-squashed Gaussian with
  a state-dependent std (`--action-dist tanh_gaussian`), a 4 x 32 swish policy and a 5 x 256 swish
  critic, rewards x10, a constant learning rate, the value loss unclipped; gradients clipped at
  norm 1 (Brax's trainer clips none: Adam's steps hardly see a global rescale). These are the
  env's preset (`jaxrl-async train --env brax:inverted_pendulum`).

`ant_cpu128`, Brax's published ant settings (the notebook's: unroll 5, 32 minibatches, 4 epochs,
discount 0.97, entropy 1e-2, reward x10, the positional backend) scaled to a CPU as docs/suites.md
runs the `brax:ant` preset: 128 envs, 10,240 env steps an update (Brax: batch 64 x unroll 5 x 32
minibatches, 16 unrolls an update; ours: 80 steps an env), Brax's networks both sides.
`humanoid_cpu128` likewise, the notebook's humanoid (unroll 10, 8 epochs, entropy 1e-3, reward x0.1)
at 128 envs: 20,480 env steps an update (Brax: batch 64 x unroll 10 x 32; ours: 160 steps an env).
`halfcheetah_cpu128` the notebook's halfcheetah (unroll 20, 8 epochs, discount 0.95, entropy 1e-3) at
128 envs: 20,480 env steps an update (Brax: batch 32 x unroll 20 x 32; ours: 160 steps an env).

`cheetahrun_cpu128`, Playground's CheetahRun at its published DM Control settings (unroll 30, 32
minibatches, 16 epochs, discount 0.995, Adam 1e-3, entropy 1e-2, reward x10) at 128 envs: 30,720
env steps an update (Brax: batch 32 x unroll 30 x 32; ours: 240 steps an env), MJX's JAX
implementation both sides, Playground's `num_resets_per_eval` 10 on its side (as Go1's below).

`go1_cpu128`, Playground's Go1JoystickFlatTerrain at Playground's published locomotion settings
scaled to a CPU as docs/suites.md runs them, MJX's JAX implementation both sides: 128 envs, 20,480
env steps an update in 32 minibatches of 640 (Brax: batch 32 x unroll 20, 8 unrolls an update;
ours: 160 steps an env, GAE over them), 4 epochs, 512-256-128 networks, the policy fed `state` and
the critic `privileged_state`; ours is the env's preset at `--num-envs 128 --num-steps 160`, Brax's
`peers_brax.py go1_cpu128` (Playground's own params and networks through Brax's trainer).

Figures: steps/s is training alone, no compilation, no evaluation (ours: summary.json's
`steps_per_second`, whose iterations, on a host without cores to spare, include the first ones that
the evaluation compiles beside; Brax: the env steps of its epochs after the first over their time,
since its first epoch's call holds the compilation); `median_later_sps`, each side's steady state:
ours the median of its metrics lines after the evaluation compiled, Brax's the median of its
epochs after the first; process_s is each side's process, start to
exit, no persistent compilation cache either side; the return is the final greedy evaluation (128
episodes a side on the pendulum, 8 on the others, where ours also evaluates after each Brax
epoch's worth of updates, as Brax's trainer does). `paired` is the median of each round's ours / Brax ratio.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from experiments.common import last_json
from jaxrl_async.cli.flags import parse
from jaxrl_async.trainer.presets import config_for
from jaxrl_async.trainer.run import EVALUATION

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclasses.dataclass(frozen=True)
class Case:
    """One env at one set of settings on both sides."""

    env_id: str
    """Ours: the env, trained with its preset."""
    sizes: dict
    """Ours: the preset's fields set over it (the CPU's scale)."""
    peer_preset: str
    """Brax's side: a key of peers_brax.py's PRESETS."""
    eval_episodes: int
    """Ours: the greedy evaluations' episodes (Brax's side: its preset's eval envs)."""
    peer_updates_per_epoch: int = 1
    """Brax's side: its fewest updates an epoch (Playground's `num_resets_per_eval` runs that many
    training calls an epoch, the envs reset after each)."""
    evaluate_each_epoch: bool = False
    """Ours evaluates after as many updates as Brax's epochs hold, as Brax's trainer does (else at
    the end alone: the pendulum's rows, kept comparable with its earlier ones)."""

    def settings(self):
        return dataclasses.replace(config_for(self.env_id), **self.sizes)

    @property
    def batch(self) -> int:
        """Env steps an update, both sides."""
        return self.settings().batch_size


CASES = {"inverted_pendulum": Case("brax:inverted_pendulum", {}, "inverted_pendulum", 128),
         "ant_cpu128": Case("brax:ant", {"num_envs": 128, "num_steps": 80}, "ant_cpu128", 8, evaluate_each_epoch=True),
         "humanoid_cpu128": Case("brax:humanoid", {"num_envs": 128, "num_steps": 160}, "humanoid_cpu128", 8,
                                 evaluate_each_epoch=True),
         "halfcheetah_cpu128": Case("brax:halfcheetah", {"num_envs": 128, "num_steps": 160}, "halfcheetah_cpu128", 8,
                                    evaluate_each_epoch=True),
         "cheetahrun_cpu128": Case("playground:CheetahRun", {"num_envs": 128, "num_steps": 240}, "cheetahrun_cpu128", 8,
                                   peer_updates_per_epoch=10, evaluate_each_epoch=True),
         "go1_cpu128": Case("playground:Go1JoystickFlatTerrain", {"num_envs": 128, "num_steps": 160}, "go1_cpu128", 8,
                            peer_updates_per_epoch=10, evaluate_each_epoch=True)}


@dataclasses.dataclass(frozen=True)
class BraxPPOConfig:
    """Ours beside Brax's PPO trainer, alternated."""

    case: str = "inverted_pendulum"
    """The env and settings: a key of CASES."""
    brax_python: str = sys.executable
    """The python that runs Brax's trainer (default: this one; any with brax==0.14.2)."""
    rounds: int = 3
    """Alternations: runs per side."""
    total_timesteps: int | None = None
    """Env steps per run (default: 8 updates, inverted_pendulum's 1,310,720, where Brax's trainer reaches 1000; or
    Brax's fewest, brax_epochs x its updates an epoch, where more)."""
    brax_epochs: int = 4
    """Brax's training epochs per run (the first holds its compilation and is not timed); must divide the updates."""
    seed: int = 0
    """First seed; round r uses seed + r on both sides."""
    out: str | None = None
    """JSON lines file (default: experiments/results/brax/brax_ppo-<date>.jsonl)."""


def median_later_sps(metrics_path: str) -> float | None:
    """The median steps/s of the metrics lines after the one that reports the evaluation compiled:
    the iterations that had the cores to themselves, the counterpart of Brax's epochs after its
    first (its `median_later_sps`). None when no line follows that one."""
    with open(metrics_path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    compiled = [i for i, line in enumerate(lines)
                if any(c["program"] == EVALUATION for c in line.get("compiled", ()))]
    later = [line["steps_per_second"] for line in lines[compiled[-1] + 1:]] if compiled else []
    return statistics.median(later) if later else None


def run_ours(case: Case, total: int, seed: int, eval_interval: int) -> dict:
    """One of our runs in this process (`--worker`): its summary's figures."""
    from jaxrl_async.trainer.runtime import configure_cpu_runtime

    configure_cpu_runtime()
    from jaxrl_async.trainer.training import train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = dataclasses.replace(case.settings(), total_timesteps=total, seed=seed, eval_interval=eval_interval,
                                  checkpoint_interval=0, eval_episodes=case.eval_episodes,
                                  run_dir=os.path.join(tmp, "run"))
        s = train(cfg, console=False).summary
        later = median_later_sps(os.path.join(cfg.run_dir, "metrics.jsonl"))
    return {"side": "ours", "seed": seed, "env_steps": s["env_steps"], "steps_per_second": s["steps_per_second"],
            "compile_s": s["compile_s"], "wall_s": s["wall_s"], "final_return": s["final_eval_return_mean"],
            "median_later_sps": later}


def run_side(side: str, cfg: BraxPPOConfig, total: int, seed: int) -> dict:
    if side == "ours":
        case = CASES[cfg.case]
        eval_interval = total // case.batch // cfg.brax_epochs if case.evaluate_each_epoch else 0
        command = [sys.executable, "-m", "benchmarks.brax_ppo", "--worker", cfg.case, str(total), str(seed),
                   str(eval_interval)]
        prefix = "OURS "
    else:
        command = [cfg.brax_python, os.path.join(HERE, "peers_brax.py"), CASES[cfg.case].peer_preset,
                   str(total), str(seed), str(cfg.brax_epochs)]
        prefix = "SUMMARY "
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, cwd=os.path.dirname(HERE))
    if out.returncode:
        raise RuntimeError(f"{side} failed ({' '.join(command)}):\n{out.stderr[-3000:]}")
    return {**last_json(out.stdout, prefix), "process_s": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:
        print("OURS " + json.dumps(run_ours(CASES[argv[1]], *map(int, argv[2:5]))), flush=True)
        return 0
    cfg = parse(BraxPPOConfig, argv, "python -m benchmarks.brax_ppo")
    if cfg.case not in CASES:
        raise ValueError(f"case={cfg.case!r} is not one of {', '.join(CASES)}")
    case = CASES[cfg.case]
    per_epoch = case.batch * case.peer_updates_per_epoch
    total = cfg.total_timesteps or max(8 * case.batch, cfg.brax_epochs * per_epoch)
    if total % (per_epoch * cfg.brax_epochs):
        raise ValueError(f"total_timesteps={total} must be a multiple of {per_epoch} x brax_epochs="
                         f"{cfg.brax_epochs}, so both sides train the same updates")
    out_path = cfg.out or os.path.join("experiments", "results", "brax",
                                       f"brax_ppo-{datetime.date.today().isoformat()}.jsonl")
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    runs = {"ours": [], "brax": []}
    for round_ in range(cfg.rounds):
        for side in ("ours", "brax"):
            row = {"round": round_, "case": cfg.case, **run_side(side, cfg, total, cfg.seed + round_)}
            runs[side].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            with open(out_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
    paired = statistics.median(o["steps_per_second"] / b["steps_per_second"] for o, b in zip(runs["ours"], runs["brax"]))
    print(f"{'side':<6} {'steps/s (median)':>17} {'process s (median)':>19} {'return (median)':>16} {'returns':>30}")
    for side, rows in runs.items():
        returns = " ".join(f"{r['final_return']:.0f}" for r in rows)
        print(f"{side:<6} {statistics.median(r['steps_per_second'] for r in rows):>17,.0f} "
              f"{statistics.median(r['process_s'] for r in rows):>19.1f} "
              f"{statistics.median(r['final_return'] for r in rows):>16.1f} {returns:>30}")
    print(f"ours / brax steps/s, paired median over {cfg.rounds} rounds: {paired:.2f}x  ({out_path})")
    later = [o["median_later_sps"] / b["median_later_sps"] for o, b in zip(runs["ours"], runs["brax"])
             if o["median_later_sps"]]
    if later:  # the iterations after ours' evaluation compiled, against Brax's epochs after its first
        print(f"ours / brax, the later iterations / epochs, paired median: {statistics.median(later):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
