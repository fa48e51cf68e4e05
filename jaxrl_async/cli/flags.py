"""Command-line flags from a config dataclass (tyro), with errors as one line on stderr and exit code 2.

Shared by the `jaxrl-async` commands and the benchmark suite.
"""

from __future__ import annotations

import contextlib
import io
import sys

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


def parse(cls, args: list[str], prog: str, default=None, markers: tuple = ()):
    """tyro.cli with flat flags (and `markers`, tyro.conf's); its errors become one line on
    stderr and exit code 2."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            return tyro.cli(cls, args=args, prog=prog, default=default,
                            config=(tyro.conf.OmitArgPrefixes, *markers))
    except SystemExit as exit_:
        if exit_.code:
            print(f"{prog}: error: {_one_line(buffer.getvalue())}", file=sys.stderr)
        else:
            print(buffer.getvalue(), end="")
        raise
