"""`jaxrl-async train --help`: the same flags as `TrainCommand`'s, grouped for a reader.

The flags are flat (`--num-envs`, `--learning-rate`), so where a field lives in the config is no
help to a new user, who needs a dozen flags out of a hundred: those come first (`ESSENTIAL`), the
rest follow by what they are about (`GROUPS`), then each config section (network, learner, replay,
each learner's own), in the order the config holds them. A field that no group names falls to
"other settings", so none is ever left out (tests/test_cli.py compares the flags with the parser's).

The help is printed by tyro from a mirror of `TrainCommand` built here: its fields regrouped, each
with its docstring from the config's source (as tyro reads it) and, as its default, the value the
run would take (the preset of --env and --algo under the flags, a resumed run's config). Parsing
never sees the mirror: only the help does.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from typing import Annotated, Any

import tyro

# The flags a first run needs, in the order a user meets them
ESSENTIAL = ("env", "algo", "preset", "total_timesteps", "num_envs", "num_steps", "seed", "num_seeds", "mode",
             "learning_rate", "run_dir", "resume", "debug")

# The run's own settings by subject: (title, description, field names); each config section (a nested
# dataclass) is a group of its own, after these but the last
GROUPS = (
    ("environment", "What the agent acts on, and how its observations and actions are shaped.",
     ("env_kwargs", "normalize_obs", "action_noise_correlation")),
    ("async mode", "With --mode async, an actor thread collects while the learner updates.",
     ("lag", "buffer_size", "sync_interval", "actor_device", "num_actors", "env_groups")),
    ("evaluation and checkpoints", "What the run measures, keeps in its run directory and logs to a tracker.",
     ("eval_episodes", "eval_interval", "eval_stochastic", "checkpoint_interval", "keep_checkpoints",
      "tensorboard", "video_interval", "video_max_frames", "tracker")),
    ("devices and speed", "How the programs are laid out and compiled; results agree to float rounding.",
     ("devices", "iterations_per_call", "scan_unroll", "gae_scan", "update_unroll", "eval_unroll",
      "matmul_precision", "compilation_cache")),
    ("several processes", "One run over several processes (jax.distributed); docs/distributed.md.",
     ("coordinator", "num_processes", "process_id", "coordinator_timeout")),
)
OTHER = ("other settings", "Settings no group above names.")


def _joined(docstring: str) -> str:
    """`docstring` with each paragraph's lines joined: the help wraps them to the terminal."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in inspect.cleandoc(docstring).split("\n\n"))


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of the dataclass `cls` (and of its dataclass bases), read
    from its source as tyro reads it."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        except (OSError, TypeError, IndexError, AttributeError):
            continue
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = _joined(after.value.value)
    return docs


@dataclasses.dataclass(frozen=True)
class _Flag:
    name: str
    kind: Any
    default: Any
    help: str


def _flags_of(instance: Any) -> tuple[list[_Flag], list[tuple[str, str, list[_Flag]]]]:
    """The plain fields of the dataclass `instance` as flags (at their values in it), and its config
    sections: each nested dataclass of plain fields, as (its field's name, its class's docstring, its
    flags). A nested dataclass that holds sections of its own (TrainCommand's `config`) is merged: its
    plain fields join the plain ones, its sections the sections."""
    cls = type(instance)
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    flags, sections = [], []
    for field in dataclasses.fields(cls):
        value = getattr(instance, field.name)
        if not dataclasses.is_dataclass(hints[field.name]):
            flags.append(_Flag(field.name, hints[field.name], value, docs.get(field.name, "")))
            continue
        inner, nested = _flags_of(value)
        if nested:
            flags += inner
            sections += nested
        else:
            sections.append((field.name, _joined(type(value).__doc__ or ""), inner))
    return flags, sections


def _member(name: str, flag: _Flag) -> tuple:
    """`flag` as a field of a help dataclass: its type, its help text, its default."""
    return name, Annotated[flag.kind, tyro.conf.arg(help=flag.help)], dataclasses.field(default=flag.default)


def _group(title: str, description: str, flags: list[_Flag]) -> tuple:
    """A group of flags as a field of the help dataclass: tyro shows a nested dataclass as a group
    titled by the field (its flags keep their flat names: `tyro.conf.OmitArgPrefixes`)."""
    cls = dataclasses.make_dataclass(title.title().replace(" ", ""), [_member(flag.name, flag) for flag in flags],
                                     frozen=True)
    cls.__doc__ = description
    return title.replace(" ", "_"), Annotated[cls, tyro.conf.arg(name=title)], dataclasses.field(default=cls())


def help_class(command: Any, shown: dict[str, Any] | None = None) -> type:
    """A dataclass with every flag of the dataclass `command` (a TrainCommand) and no other, grouped
    as the module docstring says, each at its value in `command` or, where named, in `shown`."""
    top, sections = _flags_of(command)
    by_name = {flag.name: flag for flag in [*top, *(flag for _, _, flags in sections for flag in flags)]}
    by_name.update({name: dataclasses.replace(by_name[name], default=value)
                    for name, value in (shown or {}).items() if name in by_name})
    placed = {*ESSENTIAL, *(name for _, _, names in GROUPS for name in names)}
    groups = [(title, description, [by_name[name] for name in names if name in by_name])
              for title, description, names in GROUPS[:-1]]
    groups += [(name, description, [flag for flag in flags if flag.name not in placed])
               for name, description, flags in sections]
    groups.append((*OTHER, [flag for flag in top if flag.name not in placed]))
    groups += [(title, description, [by_name[name] for name in names if name in by_name])
               for title, description, names in GROUPS[-1:]]
    members = [_member(name, by_name[name]) for name in ESSENTIAL if name in by_name]
    members += [_group(title, description, flags) for title, description, flags in groups if flags]
    cls = dataclasses.make_dataclass("TrainHelp", members, frozen=True)
    cls.__doc__ = _joined(type(command).__doc__ or "") + (
        "\n\nThe flags most runs need come first, the rest by subject; the defaults shown are the values the run "
        "would take: the preset of --env and --algo (`jaxrl-async envs` lists them) under the flags given.")
    return cls


def print_help(command: Any, prog: str, shown: dict[str, Any] | None = None) -> typing.NoReturn:
    """Print the help of `command`'s flags (`help_class`) and exit 0."""
    from jaxrl_async.cli.flags import parse

    parse(help_class(command, shown), ["--help"], prog)
    raise SystemExit(0)  # not reached: tyro exits after the help
