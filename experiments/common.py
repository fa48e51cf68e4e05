"""Run a study (one config, its seeds vmapped in one jit) and plot its learning curve.

    result = run_study(cfg, "ppo_cartpole", "runs/ppo_cartpole")
    # runs/ppo_cartpole/{config.json, metrics.jsonl, summary.json, learning_curve.png}

The curve is the training episode return against env steps: the mean over seeds
and a 95% bootstrap confidence interval over seeds (resampling seeds, not
episodes, because seeds are the independent units).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import warnings
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # no display: write PNGs only
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tyro  # noqa: E402

from jaxrl_async import TrainConfig  # noqa: E402
from jaxrl_async.trainer.run_dir import METRICS_FILE  # noqa: E402

if TYPE_CHECKING:
    from jaxrl_async import TrainResult

CURVE_FILE = "learning_curve.png"


@dataclasses.dataclass(frozen=True)
class StudyArgs:
    """The budget of a study; each script sets its own defaults."""

    total_timesteps: int
    """Environment steps per seed."""
    num_seeds: int
    """Independent seeds, vmapped in one jit."""
    run_dir: str | None = None
    """Run directory; default runs/<script>-<timestamp>."""


def parse_args(argv: list[str] | None, defaults: StudyArgs, description: str) -> StudyArgs:
    return tyro.cli(type(defaults), args=argv, default=defaults, description=description)


def curve_from_metrics(path: str, x: str = "env_steps") -> tuple[np.ndarray, np.ndarray]:
    """Read a run's `metrics.jsonl` into a learning curve.

    Args:
      path: the metrics file.
      x: the record key to use as the curve's x: "env_steps" (per seed) or "wall_s"
        (seconds since the run started, compilation included).

    Returns:
      x: [N] values of `x` at each host sync (int64 env steps, float64 seconds).
      returns: [N, S] float64, mean training episode return of each seed over the
        window ending there; NaN where that seed completed no episode.
    """
    env_steps, returns = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            per_seed = record.get("episode_return_per_seed")
            if per_seed is None:  # one seed: only the mean is logged
                per_seed = [record.get("episode_return_mean")]
            env_steps.append(record[x])
            returns.append([np.nan if r is None else r for r in per_seed])
    if not env_steps:
        raise ValueError(f"{path} holds no metrics lines: did the run finish an iteration?")
    dtype = np.int64 if x == "env_steps" else np.float64
    return np.asarray(env_steps, dtype), np.asarray(returns, np.float64)


def last_json(text: str, prefix: str = "SUMMARY ") -> dict:
    """The JSON after `prefix` on the last line of `text` that starts with it (the peers' runners
    print their figures that way)."""
    line = next(line for line in reversed(text.splitlines()) if line.startswith(prefix))
    return json.loads(line[len(prefix):])


def bootstrap_ci(values: np.ndarray, *, confidence: float = 0.95, num_resamples: int = 2000,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap confidence interval of the mean over the last axis.

    Args:
      values: [N, S] float, S samples (seeds) at each of N points; NaNs are ignored.
      confidence: coverage of the interval.
      num_resamples: bootstrap resamples of the S seeds (with replacement).
      seed: NumPy rng seed, fixed so the same data always gives the same plot.

    Returns:
      low, high: [N] float64 bounds of the interval.
    """
    values = np.asarray(values, np.float64)
    if values.ndim != 2:
        raise ValueError(f"values must be [N, S] (points x seeds), got shape {values.shape}")
    rng = np.random.default_rng(seed)
    # one set of resampled seed indices shared by every point: [R, S]
    idx = rng.integers(0, values.shape[1], size=(num_resamples, values.shape[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN resamples early in training
        means = np.nanmean(values[:, idx], axis=-1)  # [N, R]
        alpha = (1.0 - confidence) / 2
        low, high = np.nanquantile(means, [alpha, 1.0 - alpha], axis=-1)
    return low, high


def plot_learning_curve(env_steps: np.ndarray, returns: np.ndarray, path: str, title: str) -> None:
    """Mean over seeds, its 95% bootstrap CI, and each seed faintly."""
    num_seeds = returns.shape[1]
    plot_curves({f"mean of {num_seeds} seed{'s' * (num_seeds > 1)}": (env_steps, returns)}, path, title,
                show_seeds=True)


def plot_curves(curves: dict[str, tuple[np.ndarray, np.ndarray]], path: str, title: str, *,
                xlabel: str = "env steps (per seed)", show_seeds: bool = False) -> None:
    """One line per curve: the mean over its seeds and a 95% bootstrap CI band.

    Args:
      curves: label -> (x [N], returns [N, S]) as `curve_from_metrics` reads them.
      path: the PNG to write.
      title, xlabel: the axes' labels.
      show_seeds: also draw each seed faintly.
    """
    fig, ax = plt.subplots(figsize=(5.6, 3.6), dpi=100)
    for i, (label, (x, returns)) in enumerate(curves.items()):
        color = f"C{i}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # seeds with no episode yet
            mean = np.nanmean(returns, axis=-1)
        low, high = bootstrap_ci(returns)
        if show_seeds:
            ax.plot(x, returns, color=color, alpha=0.15, linewidth=0.8)
        ax.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)
        ax.plot(x, mean, color=color, label=label)
    ax.set(xlabel=xlabel, ylabel="training episode return", title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small", title="shaded: 95% bootstrap CI" if len(curves) > 1 else None,
              title_fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def default_run_dir(name: str) -> str:
    return os.path.join("runs", f"{name}-{datetime.datetime.now():%Y%m%d-%H%M%S}")


def greedy_summary(summary: dict) -> str:
    """'mean ± std' of a summary's per-seed final greedy returns."""
    per_seed = np.asarray(summary["final_eval_return"], np.float64)
    return f"{np.nanmean(per_seed):.1f} ± {np.nanstd(per_seed):.1f}"


def print_table(columns: list[str], rows: list[list[str]]) -> None:
    """Print a markdown table (the form the experiments README uses)."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")


STUDY_COLUMNS = ["env", "seeds", "env steps", "final greedy return (mean ± std over seeds)", "steps/s (all seeds)",
                 "compile s"]


def study_row(summary: dict) -> list[str]:
    return [summary["env_id"], str(summary["num_seeds"]), f"{summary['env_steps']:,}", greedy_summary(summary),
            f"{summary['steps_per_second']:,.0f}", f"{summary['compile_s']:.1f}"]


def run_study(cfg: TrainConfig, name: str, out_dir: str | None = None, *, console: bool = True) -> TrainResult:
    """Train `cfg` (its `num_seeds` seeds vmapped), then plot `<run_dir>/learning_curve.png`.

    Args:
      cfg: the run; its `run_dir` is replaced by `out_dir`.
      name: the study's name, used as the plot title and the default directory name.
      out_dir: the run directory (must not hold a run); default runs/<name>-<timestamp>.
      console: print a progress line per host sync.
    """
    # imported here, not at the top: importing the trainer (optax, flax) starts JAX's
    # backends, and a script applies `configure_cpu_runtime` before that
    from jaxrl_async import train

    if out_dir is None:
        out_dir = default_run_dir(name)
    result = train(dataclasses.replace(cfg, run_dir=out_dir), console=console)
    env_steps, returns = curve_from_metrics(os.path.join(result.run_dir, METRICS_FILE))
    plot_learning_curve(env_steps, returns, os.path.join(result.run_dir, CURVE_FILE),
                        title=f"{name}: {cfg.env}")
    print_table(STUDY_COLUMNS, [study_row(result.summary)])
    return result


def study_main(config: TrainConfig, name: str, argv: list[str] | None, defaults: StudyArgs,
               description: str) -> TrainResult:
    """A single-config script's `main`: its budget flags, then `run_study`."""
    args = parse_args(argv, defaults, description)
    cfg = dataclasses.replace(config, total_timesteps=args.total_timesteps, num_seeds=args.num_seeds)
    return run_study(cfg, name, args.run_dir)


def run_script(main, compilation_cache: str | None = None) -> None:
    """Run a script's `main` with the commands' settings (jaxrl_async/trainer/runtime.py), applied before
    JAX starts: one device, since the seeds are vmapped, and the persistent compilation cache
    (`compilation_cache`: `configure_compilation_cache`'s setting; 'off' for none)."""
    from jaxrl_async.trainer.runtime import configure_compilation_cache, configure_cpu_runtime

    configure_cpu_runtime(expose_cores=False)
    configure_compilation_cache(compilation_cache)
    main()


COMPARISON_FILE = "comparison.png"


def run_comparison(runs: dict[str, TrainConfig], name: str, out_dir: str | None = None, *,
                   x: str = "env_steps", console: bool = True) -> dict[str, TrainResult]:
    """Train several configs one after another (each with its seeds vmapped) and plot them together.

    Args:
      runs: label -> config; each run goes to `<out_dir>/<label>` (labels must be
        usable as directory names).
      name: the study's name: the plot's title and the default directory name.
      out_dir: the study's directory (created; its runs must not exist); default
        runs/<name>-<timestamp>.
      x: the curves' x axis, "env_steps" or "wall_s" (see `curve_from_metrics`); with "wall_s"
        each run builds and compiles its own programs, none kept from the run before.
      console: print a progress line per host sync.

    Returns:
      label -> the run's `TrainResult`; `<out_dir>/comparison.png` holds the curves.
    """
    from jaxrl_async import train  # after the script's CPU settings (see run_script)
    from jaxrl_async.trainer.build import forget_builds

    out_dir = default_run_dir(name) if out_dir is None else out_dir
    os.makedirs(out_dir, exist_ok=True)
    results, curves = {}, {}
    for label, cfg in runs.items():
        if console:
            print(f"--- {name}: {label}", flush=True)
        if x == "wall_s":  # each run builds and compiles its programs, as its own process would: runs
            # that differ only in host-side fields (the async lag) would otherwise reuse the first
            # one's, and their wall-clock curves leave out the compile the first one's hold
            forget_builds()
        result = train(dataclasses.replace(cfg, run_dir=os.path.join(out_dir, label)), console=console)
        results[label] = result
        curves[label] = curve_from_metrics(os.path.join(result.run_dir, "metrics.jsonl"), x=x)
    xlabel = "wall-clock seconds (compilation included)" if x == "wall_s" else "env steps (per seed)"
    plot_curves(curves, os.path.join(out_dir, COMPARISON_FILE), name, xlabel=xlabel)
    return results
