"""Command-line flags from config dataclasses (tyro), with errors as one line on stderr and exit code 2.

Shared by the `jaxrl-async` commands (`main.py`) and the benchmark suite (`bench/suite.py`, which
`main.py` runs: a module of its own below both, so that neither imports the other back).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import sys
import typing
from collections.abc import Iterable
from typing import NoReturn

import tyro


def flag_names(cls: type) -> list[str]:
    """Every flag tyro makes of the dataclass `cls` with flat names (`tyro.conf.OmitArgPrefixes`):
    `--field-name` for each field, nested dataclasses' fields likewise, and `--no-field-name` for a
    bool's. Read from the fields alone, so that a typo is answered without building the parser."""
    hints = typing.get_type_hints(cls)
    names = []
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind):
            names += flag_names(kind)
            continue
        flag = field.name.replace("_", "-")
        names += [f"--{flag}", f"--no-{flag}"] if kind is bool else [f"--{flag}"]
    return names


def did_you_mean(unknown: Iterable[str], known: Iterable[str]) -> str:
    """'; did you mean --total-timesteps?' for the flags among `unknown` that are close to one of
    `known` ('' where none is)."""
    known = list(known)
    guesses = []
    for arg in unknown:
        if not arg.startswith("--"):
            continue  # a value given to the unknown flag
        close = difflib.get_close_matches(arg.partition("=")[0], known, n=1, cutoff=0.75)
        guesses += [guess for guess in close if guess not in guesses]
    return f"; did you mean {' or '.join(guesses)}?" if guesses else ""


def _one_line(text: str) -> str:
    """Condense tyro's boxed error report to its message lines, and its "Perhaps you meant"
    flags to a question."""
    lines = [line.strip(" │╭╮╰╯") for line in text.splitlines()]
    lines = [line for line in lines if line.strip()]
    message: list[str] = []
    for line in lines[1:]:  # lines[0] is the report's title
        if set(line.strip()) <= set("-─"):
            if message:
                break
            continue
        message.append(line.strip())
    # tyro's suggestions follow "Perhaps you meant:", each flag `--name TYPE` on a line of its own
    # (its help text below it, indented further)
    boxed = [line.strip().strip("│").rstrip() for line in text.splitlines()
             if not set(line.strip(" │")) <= set("-─")]
    after = next((i for i, line in enumerate(boxed) if line.strip().startswith("Perhaps you meant")), len(boxed))
    indent = min((len(line) - len(line.lstrip()) for line in boxed[after + 1:] if line.strip().startswith("--")),
                 default=0)
    guesses = [line.split()[0].rstrip(",") for line in boxed[after + 1:]
               if line.strip().startswith("--") and len(line) - len(line.lstrip()) == indent]
    question = f"; did you mean {' or '.join(dict.fromkeys(guesses))}?" if guesses else ""
    return (" ".join(message) or (lines[0] if lines else "invalid arguments")) + question


def refuse(prog: str, message: str) -> NoReturn:
    """Exit as a tyro parse error does: `message` as one line on stderr, exit code 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse(cls, args: list[str], prog: str, default=None, markers: tuple = (), add_help: bool = True,
          return_unknown_args: bool = False):
    """tyro.cli with flat flags (and `markers`, tyro.conf's); its errors become one line on
    stderr and exit code 2. `add_help` and `return_unknown_args` as in tyro.cli."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            return tyro.cli(cls, args=args, prog=prog, add_help=add_help, return_unknown_args=return_unknown_args,
                            config=(tyro.conf.OmitArgPrefixes, *markers),
                            **({} if default is None else {"default": default}))
    except SystemExit as exit_:
        if exit_.code:
            print(f"{prog}: error: {_one_line(buffer.getvalue())}", file=sys.stderr)
        else:
            print(buffer.getvalue(), end="")
        raise
