"""The flags of `jaxrl-async train` and `eval`: dataclasses that tyro turns into a parser.

Apart from `cli.py` so that `jaxrl-async --help` and `envs` do not import tyro (a few
tenths of a second): a command imports this module once it is asked for.
"""

from __future__ import annotations

import dataclasses

import tyro

from jaxrl_async.config import TrainConfig


@dataclasses.dataclass(frozen=True)
class TrainCommand:
    """Train an agent; writes config.json, metrics.jsonl and summary.json to the run directory."""

    config: TrainConfig = TrainConfig()
    resume: str | None = None
    """Continue the run in this directory from its latest checkpoint; other flags override its
    config where that is safe (e.g. --total-timesteps to extend it)."""
    compilation_cache: str | None = None
    """Persistent XLA compilation cache: a directory, or 'off'; default $JAX_COMPILATION_CACHE_DIR,
    else $XDG_CACHE_HOME/jaxrl_async/xla (a second start of the same config loads instead of compiling)."""
    debug: bool = False
    """Show the full traceback of an error."""


@dataclasses.dataclass(frozen=True)
class EvalCommand:
    """Evaluate a saved policy of a run and print the returns."""

    run_dir: tyro.conf.Positional[str]
    """The run directory (written by jaxrl-async train)."""
    checkpoint: str = "best"
    """'best', 'latest', or the path of a checkpoint file."""
    episodes: int = 32
    """Complete episodes per seed."""
    stochastic: bool = False
    """Sample actions instead of taking the greedy one."""
    seed: int = 0
    """Seed of the evaluation envs."""
    compilation_cache: str | None = None
    """Persistent XLA compilation cache: a directory, or 'off'; default $JAX_COMPILATION_CACHE_DIR,
    else $XDG_CACHE_HOME/jaxrl_async/xla (a second start of the same config loads instead of compiling)."""
    debug: bool = False
    """Show the full traceback of an error."""
