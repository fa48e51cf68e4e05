"""The run directory: `config.json`, `metrics.jsonl`, `summary.json`, `checkpoints/`."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
from typing import Any, Iterator

import jax
import numpy as np

from jaxrl_async.trainer.checkpoint import write_atomic
from jaxrl_async.trainer.metrics import to_jsonable
from jaxrl_async.trainer.sinks import METRICS_FILE

CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"


def default_run_dir(env_id: str, algo: str) -> str:
    """`runs/<env>-<algo>-<timestamp>`, its name portable: each run of characters but letters, digits,
    '.', '_' and '-' becomes one '-' (a suite's `brax:ant`, gymnasium's `ALE/Pong-v5`: a ':' is no
    name on Windows, a '/' a directory). A run directory named before, with its ':', still resumes:
    --resume takes any path."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return os.path.join("runs", re.sub(r"[^A-Za-z0-9._-]+", "-", f"{env_id}-{algo}-{stamp}"))


def check_fresh(path: str) -> None:
    """Refuse a run directory that already holds a run."""
    if os.path.exists(os.path.join(path, METRICS_FILE)):
        raise ValueError(f"run directory {path!r} already holds a run: choose another --run-dir, "
                         f"or continue it with --resume {path}")


@contextlib.contextmanager
def writing(path: str, what: str = "write to", fix: str = "choose another --run-dir") -> Iterator[None]:
    """The run directory's writes before a run starts: an OSError (a file in the way, no
    permission, a read-only file system, a full disk) as a ValueError naming the directory and
    `fix`, one line for the user, not a traceback."""
    try:
        yield
    except OSError as error:
        raise ValueError(f"cannot {what} the run directory {path!r}: {error.strerror or error} "
                         f"({error.filename or path}); {fix}") from error


def create_run_dir(path: str) -> str:
    """Make a fresh run directory; refuse one that already holds a run."""
    check_fresh(path)
    with writing(path, "make"):
        os.makedirs(path, exist_ok=True)
    return path


def write_json(path: str, data: Any) -> None:
    """Write JSON atomically: a reader never sees half a file."""
    write_atomic(path, (json.dumps(to_jsonable(data), indent=2) + "\n").encode())


def config_record(config: dict) -> dict:
    """A config (`TrainConfig.to_dict`) as config.json and the checkpoints keep it: plain lists and
    numbers, an infinite value kept as one (`--max-grad-norm inf` means "no clipping"; a null in
    its place would make the run impossible to resume or evaluate)."""
    return to_jsonable(config, keep_non_finite=True)


def write_config(run_dir: str, config: dict) -> None:
    """The run's config.json, atomically; an infinite value as JSON's `Infinity` extension, which
    Python's json reads back."""
    write_atomic(os.path.join(run_dir, CONFIG_FILE), (json.dumps(config_record(config), indent=2) + "\n").encode())


def drop_metrics_after(run_dir: str, update: int) -> None:
    """Keep the lines of the run's metrics.jsonl up to `update` (a resumed checkpoint's), dropping
    those the run wrote past it (a crash after its last checkpoint) and a line cut short: the
    resumed run writes them anew, once. Rewritten atomically."""
    path = os.path.join(run_dir, METRICS_FILE)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    kept = [line for line in lines if _metrics_update(line) <= update]
    if len(kept) < len(lines):
        write_atomic(path, "".join(kept).encode())


def drop_summary(run_dir: str) -> None:
    """Remove a resumed run's summary.json: the run is not complete again until it writes its own,
    and a reader must not take an earlier end (before `--total-timesteps` grew) for this one's."""
    path = os.path.join(run_dir, SUMMARY_FILE)
    if os.path.exists(path):
        os.remove(path)


def _metrics_update(line: str) -> float:
    """The update a metrics line was written at; infinite for a line cut short."""
    try:
        return json.loads(line)["iteration"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_config(run_dir: str):
    """The TrainConfig a run was started with; a clear error for a directory that is not a run."""
    from jaxrl_async.algorithms import TrainConfig

    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir!r} is not a jaxrl_async run directory (no {CONFIG_FILE}); "
                         "pass a directory that jaxrl-async train wrote")
    try:
        return TrainConfig.from_dict(read_json(path))
    except (ValueError, TypeError) as error:
        raise ValueError(f"{path} is not a valid run config ({error}); was it edited by hand?") from None


def params_digest(params: Any) -> str:
    """SHA-256 over the bytes of every leaf, in tree order: equal digests = identical params."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        digest.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return digest.hexdigest()
