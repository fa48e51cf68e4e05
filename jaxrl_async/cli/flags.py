"""Command-line flags from config dataclasses (tyro), with errors as one line on stderr and exit code 2.

Shared by the `jaxrl-async` commands (`main.py`) and the benchmark suite (`bench/suite.py`, which
`main.py` runs: a module of its own below both, so that neither imports the other back).
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import NoReturn

import tyro


def _one_line(text: str) -> str:
    """Condense tyro's boxed error report to its message lines."""
    lines = [line.strip(" │╭╮╰╯") for line in text.splitlines()]
    lines = [line for line in lines if line.strip()]
    message: list[str] = []
    for line in lines[1:]:  # lines[0] is the report's title
        if set(line.strip()) <= set("-─"):
            if message:
                break
            continue
        message.append(line.strip())
    return " ".join(message) or (lines[0] if lines else "invalid arguments")


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
