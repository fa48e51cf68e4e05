"""`jaxrl-async train | eval | envs`: flags generated from the config dataclasses by tyro.

Every field of `TrainConfig` (and of its nested network and learner configs) is a flat
kebab-case flag: `--num-envs`, `--learning-rate`, `--hidden-sizes 64 64`, ...
`--env X` starts from X's preset (`presets.py`), which the flags given override.
Bad input exits with code 2 and one line saying what is wrong (`--debug` shows
the traceback).

The commands answer at once: this module and what it imports at the top (tyro, the config
dataclasses, the presets, the static env ids) import no JAX, gymnax or flax; a command imports
them only once its flags are valid and it has work for them (`tests/test_cli.py` checks it).
"""

from __future__ import annotations

import dataclasses
import sys
import traceback
from typing import TYPE_CHECKING

from jaxrl_async.trainer import presets
from jaxrl_async.config import TrainConfig
from jaxrl_async.config import host_env_kind

if TYPE_CHECKING:
    from jaxrl_async.cli import commands

USAGE = """usage: jaxrl-async COMMAND [FLAGS]

commands:
  train   train an agent, or continue one with --resume RUN_DIR (train --help lists every flag)
  eval    evaluate a run's saved policy: jaxrl-async eval RUN_DIR [--checkpoint best|latest|PATH]
  bench   run the benchmark suite (bench --help; --quick for a smoke run)
  envs    list the environment ids, with each preset's budget and expected return
"""


def _fail(prog: str, error: BaseException, debug: bool, code: int = 2) -> int:
    if debug:
        traceback.print_exception(error)
    print(f"{prog}: error: {error}" + ("" if debug else "  (--debug shows the traceback)"),
          file=sys.stderr)
    return code


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value given to `flag` (`--flag V` or `--flag=V`; the last one wins, as in tyro), else None."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """`args` with every value given to `flag` replaced by `value`."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == flag and i + 1 < len(out):
            out[i + 1] = value
        elif arg.startswith(flag + "="):
            out[i] = f"{flag}={value}"
    return out


def _default_command(args: list[str]) -> tuple[commands.TrainCommand, list[str]]:
    """The defaults the flags are parsed over, and the flags to parse: a resumed run's saved
    config, else the plain defaults with the chosen preset over them (`--preset auto` resolved
    to the preset's name, which config.json records). Raises ValueError for bad input."""
    from jaxrl_async.cli import commands

    resume_dir, preset = _flag_value(args, "--resume"), _flag_value(args, "--preset")
    if resume_dir is not None:
        if preset is not None:
            raise ValueError("--preset cannot be given with --resume: a resumed run keeps the config it was "
                             "started with (config.json); drop --preset")
        from jaxrl_async.trainer.run_dir import load_config

        return commands.TrainCommand(config=load_config(resume_dir), resume=resume_dir), args
    env = _flag_value(args, "--env") or TrainConfig.env
    # an env's preset names its learner (PPO unless it says): --algo naming another starts from
    # that learner's own preset (sac), else from the plain defaults, unless one is asked for by name
    algo = _flag_value(args, "--algo")
    # a host env is stepped by the async mode's actor thread: that is its default mode
    base = TrainConfig(mode="async") if host_env_kind(env) else None
    config = presets.config_for(env, preset or presets.AUTO, base=base, algo=algo)
    if preset is not None:
        args = _with_flag(args, "--preset", config.preset)
    return commands.TrainCommand(config=config), args


def parse_train(args: list[str]) -> commands.TrainCommand:
    """The train command's flags over its defaults (`_default_command`).

    Raises:
      ValueError: bad input found before tyro parses (an unknown preset, an unreadable run).
      SystemExit: from tyro, after it printed the help or a one-line error (`flags.parse`).
    """
    from jaxrl_async.cli import commands
    from jaxrl_async.cli.flags import parse

    default, args = _default_command(args)
    command = parse(commands.TrainCommand, args, "jaxrl-async train", default=default)
    if command.resume is not None:
        command = dataclasses.replace(command, config=dataclasses.replace(command.config, run_dir=command.resume))
    return command


def train_command(args: list[str], cpu_runtime: bool = False) -> int:
    prog = "jaxrl-async train"
    try:
        command = parse_train(args)
    except ValueError as error:
        return _fail(prog, error, "--debug" in args)
    config = command.config
    _start_jax(cpu_runtime)  # JAX starts only once the flags are valid
    from jaxrl_async.trainer.runtime import configure_compilation_cache
    from jaxrl_async.trainer.training import train

    try:
        configure_compilation_cache(command.compilation_cache)
        result = train(config, resume=command.resume is not None)
    except FloatingPointError as error:  # divergence: the message names the last good checkpoint
        return _fail(prog, error, command.debug, code=1)
    except (ValueError, FileNotFoundError) as error:
        return _fail(prog, error, command.debug)
    return 0 if result.completed else 130  # stopped by Ctrl-C, with a checkpoint written


def eval_command(args: list[str], cpu_runtime: bool = False) -> int:
    from jaxrl_async.cli import commands
    from jaxrl_async.cli.flags import parse

    prog = "jaxrl-async eval"
    command = parse(commands.EvalCommand, args, prog)
    _start_jax(cpu_runtime)  # JAX starts only once the flags are valid
    from jaxrl_async.trainer.evaluate_run import evaluate_run
    from jaxrl_async.trainer.runtime import configure_compilation_cache

    try:
        configure_compilation_cache(command.compilation_cache)
        report = evaluate_run(command.run_dir, checkpoint=command.checkpoint, episodes=command.episodes,
                              greedy=not command.stochastic, seed=command.seed)
    except (ValueError, FileNotFoundError) as error:
        return _fail(prog, error, command.debug)
    print(report)
    return 0


def bench_command(args: list[str], cpu_runtime: bool = False) -> int:
    _start_jax(cpu_runtime)
    from jaxrl_async.cli.bench.suite import main as bench_main

    return bench_main(args)


def envs_command(args: list[str], cpu_runtime: bool = False) -> int:
    """The built-in env ids (the static list: gymnax's import takes seconds) and their presets."""
    if args:
        print(f"jaxrl-async envs: error: it takes no arguments, got {' '.join(args)}", file=sys.stderr)
        return 2
    from jaxrl_async.envs.ids import BUILTIN_ENV_IDS

    print(f"{'env id':<26}{'algo':<6}{'preset budget':>14}  {'expected greedy return':<24}source")
    for env_id in sorted(BUILTIN_ENV_IDS):
        found = presets.presets_of(env_id)
        if not found:
            print(f"{env_id:<26}{'':<6}{'-':>14}")
        for preset in found:
            expected = "not measured" if preset.expected_return is None else f"{preset.expected_return:g}"
            print(f"{preset.name:<26}{preset.algo:<6}{preset.budget:>14,}  {expected:<24}{preset.source}")
    print("\njaxrl-async train --env ID applies ID's preset (flags override it); --algo A another learner's "
          "(ID:A where listed); --preset none: the plain defaults")
    return 0


def _start_jax(cpu_runtime: bool) -> None:
    """For the `jaxrl-async` command only, the process-wide CPU settings (every core a JAX
    device; see `runtime.py`), applied before JAX starts its backends: here, once a command
    has valid flags and work for JAX, so that `--help` and bad input never wait for JAX's
    import. A library caller of `main` keeps its own settings."""
    if cpu_runtime:
        from jaxrl_async.trainer.runtime import configure_cpu_runtime

        configure_cpu_runtime()


COMMANDS = {"train": train_command, "eval": eval_command, "bench": bench_command, "envs": envs_command}


def main(argv: list[str] | None = None, *, cpu_runtime: bool = False) -> int:
    """Run one command; its exit code. `cpu_runtime`: apply the command's process-wide CPU
    settings before JAX starts (the `jaxrl-async` command does; see `entry_point`)."""
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
        return COMMANDS[name](rest, cpu_runtime)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    except KeyboardInterrupt:  # a second Ctrl-C: abort without a checkpoint
        print("jaxrl-async: aborted", file=sys.stderr)
        return 130


def entry_point() -> None:
    """The `jaxrl-async` command: `main` with the process-wide CPU settings (every core a JAX
    device; see `runtime.py`), which a command applies before JAX starts, never at import."""
    sys.exit(main(cpu_runtime=True))

