"""Breakout-MinAtar: where does our 1M-step return stand against PureJaxRL's 32, and why?

    python -m experiments.breakout_gap [--variants pjrl ...] [--total-timesteps N] [--num-seeds S] [--run-dir DIR]

PureJaxRL reports the *training* episode return of the sampling policy; our summaries lead
with the greedy policy's evaluation. Every variant here is evaluated both ways at the end
(`eval_stochastic`), so the two figures sit side by side. The variants start from PureJaxRL's
MinAtar config (`examples/brax_minatar.ipynb` in luchris429/purejaxrl: 64 envs x 128 steps,
4 epochs x 8 minibatches, Adam 5e-3 annealed, relu 64x64 on the flattened observation, clip 0.2,
entropy 0.01) and change one thing each; the "preset-" variants change one thing each in the preset
(8 epochs, 256 envs x 32 steps). Writes `<run_dir>/<variant>/` and `comparison.png`,
and prints a table.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tyro

from experiments.common import greedy_summary, print_table, run_comparison, run_script
from jaxrl_async import LearnerConfig, NetworkConfig, TrainConfig

PUREJAXRL = TrainConfig(
    env="Breakout-MinAtar", num_envs=64, num_steps=128, eval_stochastic=True,
    network=NetworkConfig(hidden_sizes=(64, 64), activation="relu", torso="mlp"),
    learner=LearnerConfig(update_epochs=4, num_minibatches=8, learning_rate=5e-3, gamma=0.99, gae_lambda=0.95,
                          clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5),
)


def _learner(**changes) -> TrainConfig:
    return dataclasses.replace(PUREJAXRL, learner=dataclasses.replace(PUREJAXRL.learner, **changes))


def _network(**changes) -> TrainConfig:
    return dataclasses.replace(PUREJAXRL, network=dataclasses.replace(PUREJAXRL.network, **changes))


_EIGHT_EPOCHS = _learner(update_epochs=8)
# the preset since 2026-11-24 (jaxrl_async/trainer/presets.py): the base of the "preset-" variants
_PRESET = dataclasses.replace(_EIGHT_EPOCHS, num_envs=256, num_steps=32)


def _preset_learner(**changes) -> TrainConfig:
    return dataclasses.replace(_PRESET, learner=dataclasses.replace(_PRESET.learner, **changes))


VARIANTS = {
    "pjrl": PUREJAXRL,
    "pjrl-tanh": _network(activation="tanh"),
    "pjrl-ent0.001": _learner(ent_coef=0.001),
    "pjrl-lr2.5e-3": _learner(learning_rate=2.5e-3),
    "pjrl-256x256": _network(hidden_sizes=(256, 256)),
    "pjrl-128envs": dataclasses.replace(PUREJAXRL, num_envs=128, num_steps=64),
    "pjrl-cnn": _network(torso="cnn"),
    "pjrl-gamma0.995": _learner(gamma=0.995),
    "pjrl-32envs": dataclasses.replace(PUREJAXRL, num_envs=32),  # twice the updates per env step
    "pjrl-8epochs": _EIGHT_EPOCHS,
    "pjrl-16epochs": _learner(update_epochs=16),
    "pjrl-8epochs-16mb": _learner(update_epochs=8, num_minibatches=16),
    "pjrl-8epochs-ent0.001": _learner(update_epochs=8, ent_coef=0.001),
    "pjrl-8epochs-128x128": dataclasses.replace(_EIGHT_EPOCHS,
                                                network=dataclasses.replace(PUREJAXRL.network, hidden_sizes=(128, 128))),
    "pjrl-8epochs-clip0.1": _learner(update_epochs=8, clip_eps=0.1),
    "pjrl-8epochs-lr2.5e-3": _learner(update_epochs=8, learning_rate=2.5e-3),
    "pjrl-8epochs-128envs": dataclasses.replace(_EIGHT_EPOCHS, num_envs=128, num_steps=64),
    "pjrl-8epochs-256envs": _PRESET,
    "pjrl-8epochs-512envs": dataclasses.replace(_EIGHT_EPOCHS, num_envs=512, num_steps=16),
    "pjrl-8epochs-1024envs": dataclasses.replace(_EIGHT_EPOCHS, num_envs=1024, num_steps=8),
    # one change each to the preset
    "preset-128x128": dataclasses.replace(_PRESET, network=dataclasses.replace(_PRESET.network, hidden_sizes=(128, 128))),
    "preset-4mb": _preset_learner(num_minibatches=4),
    "preset-16mb": _preset_learner(num_minibatches=16),
    "preset-ent0.005": _preset_learner(ent_coef=0.005),
    "preset-lambda0.9": _preset_learner(gae_lambda=0.9),
    "preset-grad1.0": _preset_learner(max_grad_norm=1.0),
    "preset-ent0.005-16mb": _preset_learner(ent_coef=0.005, num_minibatches=16),
    # the settings of experiments/ppo_breakout_minatar.py before the presets
    "old-mlp": TrainConfig(env="Breakout-MinAtar", num_envs=128, num_steps=64, eval_stochastic=True,
                           network=NetworkConfig(torso="mlp"),
                           learner=LearnerConfig(update_epochs=4, num_minibatches=8, learning_rate=2.5e-3,
                                                 gae_lambda=0.8, clip_eps=0.1, ent_coef=0.001)),
}


@dataclasses.dataclass(frozen=True)
class Args:
    variants: tuple[str, ...] = ("pjrl", "old-mlp")
    """Variants to run: keys of VARIANTS (pjrl, its one-change variants, old-mlp; an unknown name lists them all)."""
    total_timesteps: int = 1_000_000
    """Environment steps per seed."""
    num_seeds: int = 5
    """Independent seeds per variant, vmapped in one jit."""
    seed: int = 0
    """Base seed (`TrainConfig.seed`): another base gives other independent seeds than the default's."""
    run_dir: str | None = None
    """The study's directory; default runs/breakout_gap-<timestamp>."""


COLUMNS = ["variant", "env steps (per seed)", "greedy return (mean ± std over seeds)", "per seed",
           "stochastic return (mean ± std)", "final training-episode return", "steps/s (all seeds)"]


def _pm(values) -> str:
    values = np.asarray(values, np.float64)
    return f"{np.nanmean(values):.1f} ± {np.nanstd(values):.1f}"


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(Args, args=argv, description=__doc__)
    unknown = [name for name in args.variants if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"breakout_gap: unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    runs = {name: dataclasses.replace(VARIANTS[name], total_timesteps=args.total_timesteps,
                                      num_seeds=args.num_seeds, seed=args.seed) for name in args.variants}
    results = run_comparison(runs, "breakout_gap", args.run_dir)
    rows = []
    for name, result in results.items():
        s = result.summary
        rows.append([name, f"{s['env_steps']:,}", greedy_summary(s),
                     ", ".join(f"{r:.1f}" for r in s["final_eval_return"]), _pm(s["final_eval_return_stochastic"]), f"{_last_training_return(result.run_dir):.1f}",
                     f"{s['steps_per_second']:,.0f}"])
    print_table(COLUMNS, rows)
    return results


def _last_training_return(run_dir: str) -> float:
    """The mean over seeds of the training episode return in the last host sync's window."""
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        last = [json.loads(line) for line in f][-1]
    value = last.get("episode_return_mean")
    return float("nan") if value is None else float(value)


if __name__ == "__main__":
    run_script(main)
