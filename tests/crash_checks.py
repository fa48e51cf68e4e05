"""A crash the checkpoint tests share: a real process killed (SIGKILL) between writing a
checkpoint's temporary file and renaming it into place."""

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
    script = _HANG_AT_RENAME + textwrap.dedent(body)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "written"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
