"""Our PPO beside Brax's own PPO trainer on the same Brax env and hyperparameters, alternated in one command.

    python -m benchmarks.brax_ppo --rounds 3

The Brax side is `benchmarks/peers_brax.py`, run by this python (it shims the one call of Brax
0.14.2's trainer that our jax lacks: its docstring) or by `--brax-python`, e.g. a virtualenv with
jax 0.9.2. Each run is a new process, ours then Brax's, `--rounds` times (A B A B: drift in this
shared machine's speed hits both alike). Every run's figures go to one JSON line in `--out`; a
table of medians is printed.

The case is Brax's published `inverted_pendulum` settings (`BRAX_SETTINGS` below), on the MJX backend
both sides, at `--total-timesteps` env steps:
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
Figures: steps/s is training alone, no compilation, no evaluation (ours: summary.json's
`steps_per_second`; Brax: the env steps of its epochs after the first over their time, since
its first epoch's call holds the compilation); the return is the final greedy evaluation (ours 128
episodes, Brax's 128 eval envs). `paired` is the median of each round's ours / Brax ratio.
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

from experiments.common import last_json
from jaxrl_async.cli.flags import parse
from jaxrl_async.trainer.presets import config_for

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 2048 * 80  # env steps per update, both sides
# the env's preset: Brax's published settings with Brax's policy (trainer/presets.py)
BRAX_SETTINGS = config_for("brax:inverted_pendulum")


@dataclasses.dataclass(frozen=True)
class BraxPPOConfig:
    """Ours beside Brax's PPO trainer, alternated."""

    brax_python: str = sys.executable
    """The python that runs Brax's trainer (default: this one; any with brax==0.14.2)."""
    rounds: int = 3
    """Alternations: runs per side."""
    total_timesteps: int = 8 * BATCH
    """Env steps per run: 1,310,720 (8 updates) by default, where Brax's trainer reaches 1000."""
    brax_epochs: int = 4
    """Brax's training epochs per run (the first holds its compilation and is not timed); must divide the updates."""
    seed: int = 0
    """First seed; round r uses seed + r on both sides."""
    out: str | None = None
    """JSON lines file (default: experiments/results/brax/brax_ppo-<date>.jsonl)."""


def run_ours(total: int, seed: int) -> dict:
    """One of our runs in this process (`--worker`): its summary's figures."""
    from jaxrl_async.trainer.runtime import configure_cpu_runtime

    configure_cpu_runtime()
    from jaxrl_async.trainer.training import train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = dataclasses.replace(BRAX_SETTINGS, total_timesteps=total, seed=seed, eval_interval=0, checkpoint_interval=0,
                                  eval_episodes=128, run_dir=os.path.join(tmp, "run"))
        s = train(cfg, console=False).summary
    return {"side": "ours", "seed": seed, "env_steps": s["env_steps"], "steps_per_second": s["steps_per_second"],
            "compile_s": s["compile_s"], "wall_s": s["wall_s"], "final_return": s["final_eval_return_mean"]}


def run_side(side: str, cfg: BraxPPOConfig, seed: int) -> dict:
    if side == "ours":
        command = [sys.executable, "-m", "benchmarks.brax_ppo", "--worker", str(cfg.total_timesteps), str(seed)]
        prefix = "OURS "
    else:
        command = [cfg.brax_python, os.path.join(HERE, "peers_brax.py"), "inverted_pendulum",
                   str(cfg.total_timesteps), str(seed), str(cfg.brax_epochs)]
        prefix = "SUMMARY "
    out = subprocess.run(command, capture_output=True, text=True, cwd=os.path.dirname(HERE))
    if out.returncode:
        raise RuntimeError(f"{side} failed ({' '.join(command)}):\n{out.stderr[-3000:]}")
    return last_json(out.stdout, prefix)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:
        print("OURS " + json.dumps(run_ours(int(argv[1]), int(argv[2]))), flush=True)
        return 0
    cfg = parse(BraxPPOConfig, argv, "python -m benchmarks.brax_ppo")
    if cfg.total_timesteps % (BATCH * cfg.brax_epochs):
        raise ValueError(f"total_timesteps={cfg.total_timesteps} must be a multiple of {BATCH} x brax_epochs="
                         f"{cfg.brax_epochs}, so both sides train the same updates")
    out_path = cfg.out or os.path.join("experiments", "results", "brax",
                                       f"brax_ppo-{datetime.date.today().isoformat()}.jsonl")
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    runs = {"ours": [], "brax": []}
    for round_ in range(cfg.rounds):
        for side in ("ours", "brax"):
            row = {"round": round_, **run_side(side, cfg, cfg.seed + round_)}
            runs[side].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            with open(out_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
    paired = statistics.median(o["steps_per_second"] / b["steps_per_second"] for o, b in zip(runs["ours"], runs["brax"]))
    print(f"{'side':<6} {'steps/s (median)':>17} {'return (median)':>16} {'returns':>30}")
    for side, rows in runs.items():
        returns = " ".join(f"{r['final_return']:.0f}" for r in rows)
        print(f"{side:<6} {statistics.median(r['steps_per_second'] for r in rows):>17,.0f} "
              f"{statistics.median(r['final_return'] for r in rows):>16.1f} {returns:>30}")
    print(f"ours / brax steps/s, paired median over {cfg.rounds} rounds: {paired:.2f}x  ({out_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
