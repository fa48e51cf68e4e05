"""Ours beside the peers on this machine (issues #14, #16): rejax 0.1.3 and SB3 / sbx, each run
in a fresh process, alternated A B A B ... in one command; medians and ratios printed.

    python -m benchmarks.peers --rejax-python .venv-rejax/bin/python --cases ppo --rounds 3
    python -m benchmarks.peers --rejax-python .venv-rejax/bin/python --cases dqn sac --total-timesteps 50000
    python -m benchmarks.peers --rejax-python .venv-rejax/bin/python --sb3-python .venv-sb3/bin/python --cases td3
    python -m benchmarks.peers --sb3-python .venv-sb3/bin/python --cases dqn sac --total-timesteps 20000
    python -m benchmarks.peers --quick          # our side only, tiny budgets (the smoke test)

The peers' virtualenvs are made as `../shared/peers/README.md` says (`.venv-rejax`, `.venv-sb3`).
Each of our runs is `train()` in a new process, as `jaxrl-async train` runs it (every core a
device, no compilation cache: every compile is a first start), evaluation and checkpoints only
at the end as in the peers' timed runs; `--ours-default-eval` adds a run with the default
evaluation and checkpoint settings (#14's "the whole run"). The rejax side is
`benchmarks/peers_rejax.py`, the SB3 / sbx side `benchmarks/peers_sb3.py`.

Figures per side, medians over the rounds:
- steps/s: ours `summary.json`'s `steps_per_second` (env steps / the training loop's time, no
  compile, no evaluation); rejax: env steps / one whole jitted `train` call (which includes its
  one final evaluation of 128 episodes); SB3 / sbx: env steps / `learn()`.
- e2e steps/s: env steps / (wall - compile): ours adds the final evaluation, checkpoint and
  run-directory writes; rejax's is its timed call; first-start compile beside it.
- compile s: the startup, from the trainer's call to its first training step, measured the same
  way on both sides: ours `compile_s` (from `train()`'s call: envs, initial states, tracing,
  lowering and XLA for the loop and the evaluation, the warm-up call); rejax's `startup_s` (from
  `create()`: envs and networks, then tracing, lowering and XLA of its one `train` program).
  "compile ours/side" is the median over rounds of each round's ratio (below 1: we start sooner).
- paired: the median over rounds of each round's ours / side steps/s. The speed of this shared
  2-core machine drifts (1.6x within minutes, seen in one process pinned to one core), and a
  round's two runs are seconds apart, so this ratio is the steadier one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Literal

from experiments import dqn_cartpole
from experiments.common import last_json
from jaxrl_async.trainer import presets
from jaxrl_async.config import LearnerConfig, NetworkConfig, ReplayConfig
from jaxrl_async.algorithms.dqn_config import DQNConfig
from jaxrl_async import TrainConfig
from jaxrl_async.cli.flags import parse

HERE = os.path.dirname(os.path.abspath(__file__))
SIDES = ("ours", "ours-default-eval", "rejax", "sb3", "sbx")


@dataclasses.dataclass(frozen=True)
class PeerCase:
    """One config, as each side expresses it (the differences: `peers_rejax.py`, `peers_sb3.py`)."""

    ours: TrainConfig
    rejax: tuple[str, str]  # (algo, preset of peers_rejax.py)
    sb3: tuple[str, str, str] | None  # (algo, gymnasium env id, preset of peers_sb3.py); None: no SB3 twin


# DQN CartPole-v1: experiments/dqn_cartpole.py's config at 500k steps and gamma 0.99, as the peers' twins
# express it and docs/benchmarks.md measured it (the preset's gamma 0.98 came later; it changes no speed)
DQN_CARTPOLE = dataclasses.replace(dqn_cartpole.CONFIG, total_timesteps=500_000).with_fields(gamma=0.99)

# DQN on Breakout-MinAtar at 1e6 steps (#16: "DQN on a MinAtar task at 1e6 steps at least rejax's DQN at the same
# budget"), in rejax's layout: 8 envs x 1 step, then 2 gradient steps of batch 64 (one per 4 env steps); the target
# copied every 250 gradient steps (= 1,000 env steps); epsilon 1 -> 0.01 over the first 10%; relu 64x64 on the
# flattened 10x10x4 image, Double DQN, Adam 2.5e-4. peers_rejax.py's `breakout_ours` is the same config.
DQN_BREAKOUT = TrainConfig(
    env="Breakout-MinAtar", algo="dqn", num_envs=8, num_steps=1, total_timesteps=1_000_000,
    network=NetworkConfig(hidden_sizes=(64, 64), activation="relu", torso="mlp"),
    learner=LearnerConfig(learning_rate=2.5e-4, anneal_lr=False, max_grad_norm=10.0, gamma=0.99),
    replay=ReplayConfig(replay_capacity=100_000, learning_starts=10_000, replay_ratio=2, replay_batch_size=64),
    dqn=DQNConfig(target_update_period=250, epsilon_end=0.01, epsilon_decay_fraction=0.1))

CASES = {
    # the #14 reference: PureJaxRL's CartPole config = our CartPole-v1 preset
    "ppo": PeerCase(TrainConfig(env="CartPole-v1", num_envs=4, num_steps=128, total_timesteps=500_000),
                    ("ppo", "cartpole_pjrl"), ("ppo", "CartPole-v1", "pjrl")),
    "dqn": PeerCase(DQN_CARTPOLE, ("dqn", "cartpole_ours"), ("dqn", "CartPole-v1", "ours")),
    # the same DQN in rejax's layout (8 envs x 1 step, then 4 gradient steps): the same program shape both sides
    "dqn-1step": PeerCase(DQN_CARTPOLE.with_fields(num_steps=1, replay_ratio=4, target_update_period=128),
                          ("dqn", "cartpole_ours"), ("dqn", "CartPole-v1", "ours")),
    "sac": PeerCase(presets.config_for("Pendulum-v1", algo="sac"), ("sac", "pendulum_ours"),
                    ("sac", "Pendulum-v1", "ours")),
    "td3": PeerCase(presets.config_for("Pendulum-v1", algo="td3"), ("td3", "pendulum_ours"),
                    ("td3", "Pendulum-v1", "ours")),
    # MinAtar has no gymnasium twin, so no SB3 / sbx side
    "dqn-breakout": PeerCase(DQN_BREAKOUT, ("dqn", "breakout_ours"), None),
    # PQN CartPole-v1: our preset (`--algo pqn` alone) beside rejax's own PQN config, the same shape (16 envs x
    # 128 steps, 5 epochs x 16 minibatches, 64x64 with LayerNorm); ours anneals the learning rate. No SB3 / sbx PQN
    "pqn": PeerCase(presets.config_for("CartPole-v1", algo="pqn"), ("pqn", "cartpole_rejax"), None),
}


@dataclasses.dataclass(frozen=True)
class PeersConfig:
    """Ours beside rejax 0.1.3 and SB3 / sbx, alternated in one command."""

    cases: tuple[Literal["ppo", "dqn", "dqn-1step", "sac", "td3", "dqn-breakout", "pqn"], ...] = ("ppo",)
    """Configs to compare (ppo: the #14 reference; dqn, dqn-1step: CartPole-v1; sac, td3: Pendulum-v1;
    dqn-breakout: DQN on Breakout-MinAtar at 1e6 steps, rejax only; pqn: CartPole-v1, rejax only)."""
    rounds: int = 3
    """Alternations A B A B ...: runs per side."""
    total_timesteps: int | None = None
    """Env steps per run (default: each case's own budget; a shorter one is fine for speed)."""
    rejax_python: str | None = None
    """The rejax virtualenv's python (e.g. .venv-rejax/bin/python); unset: no rejax runs."""
    rejax_repeats: int = 1
    """Timed calls per rejax process (after its one compile); their median is the process's figure."""
    sb3_python: str | None = None
    """The SB3 / sbx virtualenv's python (e.g. .venv-sb3/bin/python); unset: no SB3 / sbx runs."""
    sb3_libs: tuple[Literal["sb3", "sbx"], ...] = ("sb3", "sbx")
    """Which of SB3 (PyTorch) and sbx (JAX) to run with --sb3-python."""
    ours_default_eval: bool = False
    """Also run ours with the default evaluation and checkpoint settings (the whole run a user waits for)."""
    quick: bool = False
    """Our side only, one round of a tiny budget: a smoke run."""
    out: str | None = None
    """JSON file for every run's figures (default: none)."""


def ours_config(case: str, total: int | None, default_eval: bool, run_dir: str) -> TrainConfig:
    cfg = CASES[case].ours
    changes = {} if default_eval else dict(eval_interval=0, checkpoint_interval=0)
    return dataclasses.replace(cfg, total_timesteps=total or cfg.total_timesteps, run_dir=run_dir, **changes)


def run_ours(case: str, total: int | None, default_eval: bool) -> dict:
    """One of our runs in this process (`--worker`): its summary's figures."""
    from jaxrl_async.trainer.runtime import configure_cpu_runtime

    configure_cpu_runtime()
    from jaxrl_async.trainer.training import train

    with tempfile.TemporaryDirectory() as tmp:
        s = train(ours_config(case, total, default_eval, os.path.join(tmp, "run")), console=False).summary
    return {"steps_per_second": s["steps_per_second"], "compile_s": s["compile_s"], "wall_s": s["wall_s"],
            "e2e_steps_per_second": s["env_steps"] / (s["wall_s"] - s["compile_s"]), "env_steps": s["env_steps"],
            "eval_checkpoint_s": s.get("eval_checkpoint_s"), "final_return": s["final_eval_return_mean"]}


def run_side(side: str, case: str, cfg: PeersConfig) -> dict:
    """One run of `side` in a new process; its figures in our keys."""
    # quick: two rollouts of the case's own shape (PPO's 4 x 128, PQN's 16 x 128, ...)
    total = cfg.total_timesteps or (2 * CASES[case].ours.batch_size if cfg.quick else None)
    if side.startswith("ours"):
        command = [sys.executable, "-m", "benchmarks.peers", "--worker", case, str(total or 0),
                   str(int(side == "ours-default-eval"))]
    elif side == "rejax":
        algo, preset = CASES[case].rejax
        command = [cfg.rejax_python, os.path.join(HERE, "peers_rejax.py"), algo, preset, "0",
                   str(cfg.rejax_repeats), *([str(total)] if total else [])]
    else:
        algo, env, preset = CASES[case].sb3
        command = [cfg.sb3_python, os.path.join(HERE, "peers_sb3.py"), side, env,
                   str(total or CASES[case].ours.total_timesteps), "0", preset, algo]
    out = subprocess.run(command, capture_output=True, text=True, cwd=os.path.dirname(HERE))
    if out.returncode:
        raise RuntimeError(f"{side} {case} failed ({' '.join(command)}):\n{out.stderr[-3000:]}")
    if side.startswith("ours"):
        return last_json(out.stdout, "OURS ")
    s = last_json(out.stdout)
    if side == "rejax":
        # from the trainer's call to its first training step, as our compile_s
        return {"steps_per_second": s["agg_sps_median"], "compile_s": s["startup_s"],
                "e2e_steps_per_second": s["agg_sps_median"], "env_steps": s["steps_per_seed"],
                "final_return": statistics.median(s["final_ret"])}
    return {"steps_per_second": s["sps"], "compile_s": s.get("sbx_warmup_learn_s") or 0.0,
            "e2e_steps_per_second": s["sps"], "env_steps": s["steps"], "final_return": s["eval20_det_mean"]}


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Each side's medians over its rounds, and beside every peer our ratios to it."""
    rows = {side: {key: _median(measured, key) for key in ("steps_per_second", "e2e_steps_per_second",
                                                            "compile_s", "final_return")}
            for side, measured in runs.items()}
    for side, row in rows.items():
        if side != "ours":
            row["ours_ratio"] = rows["ours"]["steps_per_second"] / row["steps_per_second"]
            row["ours_e2e_ratio"] = rows["ours"]["e2e_steps_per_second"] / row["e2e_steps_per_second"]
            # startup: ours over theirs (below 1: we start sooner), by medians and paired by round
            row["ours_compile_ratio"] = rows["ours"]["compile_s"] / row["compile_s"] if row["compile_s"] else None
            row["ours_paired_compile_ratio"] = statistics.median(
                ours["compile_s"] / theirs["compile_s"] for ours, theirs in zip(runs["ours"], runs[side])
                if theirs["compile_s"]) if any(theirs["compile_s"] for theirs in runs[side]) else None
            # each round's ours / side, then their median: the two runs of a round are seconds apart,
            # so a drift in this shared machine's speed (seen: 1.6x within minutes) hits both alike
            row["ours_paired_ratio"] = statistics.median(
                ours["steps_per_second"] / theirs["steps_per_second"] for ours, theirs in zip(runs["ours"], runs[side]))
    return rows


def compare(cfg: PeersConfig) -> dict:
    sides = ["ours"] + (["ours-default-eval"] if cfg.ours_default_eval else [])
    if not cfg.quick:
        sides += (["rejax"] if cfg.rejax_python else []) + (list(cfg.sb3_libs) if cfg.sb3_python else [])
    report = {}
    for case in cfg.cases:
        if cfg.sb3_python and not cfg.quick and CASES[case].sb3 is None:
            raise ValueError(f"case {case!r} has no SB3 / sbx twin (its env is not in gymnasium): run it "
                             "without --sb3-python")
        runs = {side: [] for side in sides}
        for round_ in range(1 if cfg.quick else cfg.rounds):
            for side in sides:  # A B A B: drift in the machine's speed hits every side alike
                runs[side].append(run_side(side, case, cfg))
                print(f"{case} round {round_} {side}: {json.dumps(runs[side][-1])}", file=sys.stderr, flush=True)
        rows = summarize(runs)
        report[case] = {"rows": rows, "runs": runs}
    return report


def table(report: dict) -> str:
    lines = [f"{'case':<12} {'side':<18} {'steps/s':>10} {'e2e steps/s':>12} {'compile s':>9} {'return':>8} "
             f"{'ours/side':>9} {'e2e ours/side':>13} {'paired':>7} {'compile ours/side':>17}"]
    for case, entry in report.items():
        for side, r in entry["rows"].items():
            compile_ratio = r.get("ours_paired_compile_ratio")
            ratios = (f"{r['ours_ratio']:>9.2f} {r['ours_e2e_ratio']:>13.2f} {r['ours_paired_ratio']:>7.2f} "
                      f"{compile_ratio if compile_ratio is None else format(compile_ratio, '>17.2f')}"
                      if "ours_ratio" in r else "")
            lines.append(f"{case:<12} {side:<18} {r['steps_per_second']:>10,.0f} {r['e2e_steps_per_second']:>12,.0f} "
                         f"{r['compile_s']:>9.1f} {r['final_return']:>8.1f} {ratios}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:  # one of our runs, started by run_side
        case, total, default_eval = argv[1], int(argv[2]) or None, bool(int(argv[3]))
        print("OURS " + json.dumps(run_ours(case, total, default_eval)), flush=True)
        return 0
    cfg = parse(PeersConfig, argv, "python -m benchmarks.peers")
    report = compare(cfg)
    print(table(report))
    if cfg.out:
        with open(cfg.out, "w", encoding="utf-8") as f:
            json.dump({"config": dataclasses.asdict(cfg), "report": report}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
