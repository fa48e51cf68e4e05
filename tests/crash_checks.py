"""Crashes the tests share: a real process killed (SIGKILL) at a point it announces, e.g. between
writing a checkpoint's temporary file and renaming it into place."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

_HANG_AT_RENAME = """
import os, time
import numpy as np
from jaxrl_async.trainer import checkpoint as ckpt

def hang(src, dst):
    print("written", flush=True)
    time.sleep(120)

os.replace = hang
"""


def kill_at_the_rename(body: str) -> None:
    """Run `body` (Python, with `np` and `ckpt` imported) in a new process whose `os.replace`
    announces itself and hangs; SIGKILL the process there, after the temporary file is written."""
    kill_when_it_says(_HANG_AT_RENAME + textwrap.dedent(body), "written")


def kill_when_it_says(script: str, line: str, args: tuple[str, ...] = (), env: dict | None = None) -> None:
    """Run the Python `script` (with `args`) in a new process, which prints `line` at the point
    to crash and then hangs; SIGKILL it there."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == line
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
