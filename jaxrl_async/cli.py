"""`jaxrl-async train | eval | envs`: flags generated from the config dataclasses by tyro.

Every field of `TrainConfig` (and of its nested network and learner configs) is a flat
kebab-case flag: `--num-envs`, `--learning-rate`, `--hidden-sizes 64 64`, ...
Bad input exits with code 2 and one line saying what is wrong (`--debug` shows
the traceback).
"""

from __future__ import annotations

import dataclasses
import sys
import traceback

import tyro

from jaxrl_async.config import TrainConfig
from jaxrl_async.flags import parse

USAGE = """usage: jaxrl-async COMMAND [FLAGS]

commands:
  train   train an agent, or continue one with --resume RUN_DIR (train --help lists every flag)
  eval    evaluate a run's saved policy: jaxrl-async eval RUN_DIR [--checkpoint best|latest|PATH]
  bench   run the benchmark suite (bench --help; --quick for a smoke run)
  envs    list the environment ids
"""


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


def _fail(prog: str, error: BaseException, debug: bool, code: int = 2) -> int:
    if debug:
        traceback.print_exception(error)
    print(f"{prog}: error: {error}" + ("" if debug else "  (--debug shows the traceback)"),
          file=sys.stderr)
    return code


def _resume_dir(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--resume" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--resume="):
            return arg.split("=", 1)[1]
    return None


def train_command(args: list[str]) -> int:
    prog = "jaxrl-async train"
    debug = "--debug" in args
    resume_dir = _resume_dir(args)
    default = None
    if resume_dir is not None:
        try:
            from jaxrl_async.run_dir import load_config

            default = TrainCommand(config=load_config(resume_dir), resume=resume_dir)
        except ValueError as error:
            return _fail(prog, error, debug)
    command = parse(TrainCommand, args, prog, default=default)
    config = command.config
    if command.resume is not None:
        config = dataclasses.replace(config, run_dir=command.resume)
    from jaxrl_async.runtime import configure_compilation_cache  # JAX starts only once the flags are valid
    from jaxrl_async.training import train

    try:
        configure_compilation_cache(command.compilation_cache)
        result = train(config, resume=command.resume is not None)
    except FloatingPointError as error:  # divergence: the message names the last good checkpoint
        return _fail(prog, error, command.debug, code=1)
    except (ValueError, FileNotFoundError) as error:
        return _fail(prog, error, command.debug)
    return 0 if result.completed else 130  # stopped by Ctrl-C, with a checkpoint written


def eval_command(args: list[str]) -> int:
    prog = "jaxrl-async eval"
    command = parse(EvalCommand, args, prog)
    from jaxrl_async.evaluate_run import evaluate_run  # JAX starts only once the flags are valid
    from jaxrl_async.runtime import configure_compilation_cache

    try:
        configure_compilation_cache(command.compilation_cache)
        report = evaluate_run(command.run_dir, checkpoint=command.checkpoint, episodes=command.episodes,
                              greedy=not command.stochastic, seed=command.seed)
    except (ValueError, FileNotFoundError) as error:
        return _fail(prog, error, command.debug)
    print(report)
    return 0


def bench_command(args: list[str]) -> int:
    from jaxrl_async.bench.suite import main as bench_main

    return bench_main(args)


def envs_command(args: list[str]) -> int:
    from jaxrl_async.envs import registered_env_ids

    print("\n".join(registered_env_ids()))
    return 0


COMMANDS = {"train": train_command, "eval": eval_command, "bench": bench_command, "envs": envs_command}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"jaxrl-async: error: unknown command {name!r}; choose one of {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    try:
        return COMMANDS[name](rest)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    except KeyboardInterrupt:  # a second Ctrl-C: abort without a checkpoint
        print("jaxrl-async: aborted", file=sys.stderr)
        return 130


def entry_point() -> None:
    """The `jaxrl-async` command: the process-wide CPU settings (every core a JAX device; see
    `runtime.py`), set before JAX starts, so only here, never at import; then `main`."""
    from jaxrl_async.runtime import configure_cpu_runtime

    configure_cpu_runtime()
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
