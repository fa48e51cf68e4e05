"""Experiment trackers as sinks of a run (`sinks.py`): `--tracker wandb` (Weights & Biases) or
`--tracker mlflow` gets the run's config, every metrics line against env steps, the evaluation
videos, the summary and the best checkpoint.

A tracker's sink has the sinks' `write(record)` and `close()`, and two more that the run calls:
`write_video(path, env_steps)` for each video written to the run directory, and
`write_summary(summary, best_checkpoint)` once at the end of a run that completed (before `close`).

Each tracker keeps its run's id in the run directory (`TRACKER_FILE`): `--resume` continues the
same tracker run, after a stop or a kill -9 alike.

- W&B: its files go to RUN_DIR/wandb/. It runs offline (`wandb sync` uploads the run later) unless
  the user is logged in; WANDB_MODE, where set, is theirs and wins.
- MLflow: MLFLOW_TRACKING_URI where set; else a local store beside the run directory,
  `<parent>/mlruns/` (MLflow's SQLite database mlflow.db and a folder of artifacts), one for the
  runs that share the parent folder (runs/ by default), so that one `mlflow ui` compares them.

Only process 0 of a multi-process run opens sinks (`run.Run.create`), so only it logs. This
module imports no tracker, nor JAX, at its top: `check_tracker` runs before JAX starts.
"""

from __future__ import annotations

import importlib.util
import json
import math
import numbers
import os
import sys
import time
from pathlib import Path
from typing import Any

TRACKERS = ("none", "wandb", "mlflow")
TRACKER_FILE = "tracker.json"  # in the run directory: {"wandb": {"id": ...}, "mlflow": {"run_id": ...}}
PROJECT = "jaxrl_async"  # the W&B project and MLflow experiment, unless WANDB_PROJECT / MLFLOW_EXPERIMENT_NAME say
# the modules each tracker's extra installs (pyproject.toml): MLflow's local SQLite store needs the last two
_MODULES = {"wandb": ("wandb",), "mlflow": ("mlflow", "sqlalchemy", "alembic")}


def check_tracker(name: str) -> None:
    """Raise ValueError, with the pip line, where the tracker's package is not installed. It imports
    nothing, so a run that would fail at its first metrics line fails before anything compiles."""
    if name not in TRACKERS:
        raise ValueError(f"tracker={name!r}: expected one of {', '.join(TRACKERS)}")
    missing = [module for module in _MODULES.get(name, ()) if importlib.util.find_spec(module) is None]
    if missing:
        raise ValueError(f"--tracker {name} needs the {missing[0]} package: pip install 'jaxrl_async[{name}]'")


def open_tracker(name: str, run_dir: str, config: dict) -> Any:
    """The tracker `name`'s sink for the run in `run_dir`, whose config (`TrainConfig.to_dict`) it logs."""
    check_tracker(name)
    return {"wandb": WandbSink, "mlflow": MlflowSink}[name](run_dir, config)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _plain(value: numbers.Real) -> int | float:
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def numeric_fields(values: dict, prefix: str = "") -> dict[str, int | float]:
    """What a tracker plots of a record: its finite numbers by name, a list of them (one per seed)
    as `name/0`, `name/1`, ... Text, None, non-finite values and nested records (the compiles'
    list) are left out: metrics.jsonl keeps them."""
    out: dict[str, int | float] = {}
    for name, value in values.items():
        if _is_number(value):
            out[prefix + name] = _plain(value)
        elif isinstance(value, (list, tuple)):
            out.update({f"{prefix}{name}/{i}": _plain(item) for i, item in enumerate(value) if _is_number(item)})
    return out


def _flat(config: dict, prefix: str = "") -> dict[str, Any]:
    """{"learner": {"learning_rate": ...}} -> {"learner.learning_rate": ...}."""
    out: dict[str, Any] = {}
    for name, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{name}."))
        else:
            out[prefix + name] = value
    return out


def _saved_ids(run_dir: str) -> dict:
    path = os.path.join(run_dir, TRACKER_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _save_ids(run_dir: str, name: str, ids: dict) -> None:
    """Keep the tracker's run id in the run directory, beside another tracker's if the run had one;
    written whole, then renamed into place (as `run_dir.write_json` does, which this module cannot
    import: `run_dir` imports the sinks), so that a crash never leaves half a file."""
    path = os.path.join(run_dir, TRACKER_FILE)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({**_saved_ids(run_dir), name: ids}, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def wandb_mode(wandb: Any) -> str | None:
    """The mode of a new W&B run: None where the user set WANDB_MODE (wandb reads it), 'online'
    where they are logged in, else 'offline'. Logged in: an API key or identity token in the
    environment or wandb's settings, or a netrc entry for wandb's host (`wandb login` writes it),
    read as wandb reads them, without asking the server."""
    if os.environ.get("WANDB_MODE"):
        return None
    from wandb.errors import AuthenticationError
    from wandb.sdk.lib import wbauth

    settings = wandb.setup().settings
    if os.environ.get("WANDB_API_KEY") or settings.api_key or settings.identity_token_file:
        return "online"
    try:
        key = wbauth.read_netrc_auth(host=settings.base_url)
    except AuthenticationError:  # a malformed key: wandb could not log in with it either
        return "offline"
    return "online" if key else "offline"


class WandbSink:
    """A W&B run: the config, each metrics line (plotted against `env_steps`), the videos, the
    summary in `run.summary` and the best checkpoint as a `model` artifact."""

    def __init__(self, run_dir: str, config: dict):
        import wandb

        self._wandb = wandb
        saved = _saved_ids(run_dir).get("wandb", {}).get("id")
        self._run = wandb.init(
            dir=run_dir, id=saved, resume="allow" if saved else None,
            project=None if os.environ.get("WANDB_PROJECT") else PROJECT,
            name=os.path.basename(os.path.abspath(run_dir)), config=config, mode=wandb_mode(wandb),
            # a run of its own, never `wandb.run`: a caller's own W&B run is left alone
            reinit="create_new",
            # console off: the console's lines are the metrics lines, logged here already, and stdout
            # stays the user's; quiet: W&B says where the run is at its start, and leaves the run's last
            # line (the final return) last, without its summary of the summary
            settings=wandb.Settings(console="off", quiet=True))
        _save_ids(run_dir, "wandb", {"id": self._run.id, "project": self._run.project,
                                     "mode": "offline" if self._run.offline else "online"})
        # the x-axis: env steps, not W&B's own step (which restarts in a resumed offline run)
        self._run.define_metric("*", step_metric="env_steps")
        self._completed = False

    def write(self, record: dict) -> None:
        self._run.log(numeric_fields(record))

    def write_video(self, path: str, env_steps: int) -> None:
        self._run.log({"eval_video": self._wandb.Video(path), "env_steps": int(env_steps)})

    def write_summary(self, summary: dict, best_checkpoint: str | None) -> None:
        from jaxrl_async.trainer.metrics import to_jsonable

        self._run.summary.update(to_jsonable(summary))
        if best_checkpoint is not None:
            artifact = self._wandb.Artifact(f"{self._run.id}-best", type="model",
                                            metadata={"best_eval_return": summary.get("best_eval_return")})
            artifact.add_file(best_checkpoint)
            self._run.log_artifact(artifact, aliases=["best"])
        self._completed = True

    def close(self) -> None:
        # a run that ended before its end (a stop, an error) is marked failed until --resume continues it
        self._run.finish(exit_code=0 if self._completed else 1)


class MlflowSink:
    """An MLflow run: the config flattened into params (`learner.learning_rate`), each metrics line
    as metrics at step = env steps, the videos and the best checkpoint as artifacts (in videos/ and
    checkpoints/), the summary's numbers as `summary/<key>` metrics, its other fields as tags,
    and summary.json and config.json as artifacts."""

    def __init__(self, run_dir: str, config: dict):
        from mlflow.entities import Param, RunTag
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        user_uri = os.environ.get("MLFLOW_TRACKING_URI")
        self._client = MlflowClient(tracking_uri=None if user_uri else local_store(run_dir))
        # where a new experiment keeps its artifacts: the local store's folder, else the tracking server's say
        self._artifact_location = None if user_uri else Path(local_store_dir(run_dir), "artifacts").as_uri()
        params = {name: str(value) for name, value in _flat(config).items()}
        saved = _saved_ids(run_dir).get("mlflow", {}).get("run_id")
        run = None
        if saved is not None:
            try:
                run = self._client.get_run(saved)
            except MlflowException:
                print(f"--tracker mlflow: the run's MLflow run {saved} is not in {self._client.tracking_uri} "
                      "(another MLFLOW_TRACKING_URI?); starting a new one", file=sys.stderr, flush=True)
        if run is None:
            run = self._client.create_run(self._experiment(), run_name=os.path.basename(os.path.abspath(run_dir)),
                                          tags={"run_dir": os.path.abspath(run_dir)})
            new, tags = params, {}
        else:
            self._client.update_run(run.info.run_id, status="RUNNING")
            # params cannot change in MLflow: a field a resume changed (--total-timesteps) becomes a tag
            before = run.data.params
            new = {name: value for name, value in params.items() if name not in before}
            tags = {f"resumed_with/{name}": value for name, value in params.items()
                    if name in before and before[name] != value}
        self._run_id = run.info.run_id
        _save_ids(run_dir, "mlflow", {"run_id": self._run_id, "experiment_id": run.info.experiment_id,
                                      "tracking_uri": self._client.tracking_uri})
        for batch in _batches([Param(name, value) for name, value in new.items()], 100):
            self._client.log_batch(self._run_id, params=batch)
        for batch in _batches([RunTag(name, value) for name, value in tags.items()], 100):
            self._client.log_batch(self._run_id, tags=batch)
        self._client.log_dict(self._run_id, config, "config.json")  # the newest: a resume's
        self._pending: list = []  # the metrics lines' asynchronous writes, waited for at `close`
        self._completed = False

    def _experiment(self) -> str:
        """The id of the experiment (MLFLOW_EXPERIMENT_NAME, else `PROJECT`), made where missing."""
        from mlflow.exceptions import MlflowException

        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT
        experiment = self._client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self._client.create_experiment(name, artifact_location=self._artifact_location)
        except MlflowException:  # another run made it meanwhile
            return self._client.get_experiment_by_name(name).experiment_id

    def write(self, record: dict) -> None:
        from mlflow.entities import Metric

        step, now = int(record["env_steps"]), int(time.time() * 1000)
        metrics = [Metric(name, float(value), now, step) for name, value in numeric_fields(record).items()]
        # asynchronous: MLflow's queue writes the line to its database while training goes on
        self._pending.append(self._client.log_batch(self._run_id, metrics=metrics, synchronous=False))

    def write_video(self, path: str, env_steps: int) -> None:
        self._client.log_artifact(self._run_id, path, "videos")

    def write_summary(self, summary: dict, best_checkpoint: str | None) -> None:
        from mlflow.entities import Metric, RunTag

        from jaxrl_async.trainer.metrics import to_jsonable

        step, now = int(summary.get("env_steps", 0)), int(time.time() * 1000)
        figures = numeric_fields(summary, prefix="summary/")
        metrics = [Metric(name, float(value), now, step) for name, value in figures.items()]
        # the other fields (the digests, the devices) as tags where they fit; summary.json holds them all
        tags = [RunTag(f"summary/{name}", text) for name, value in to_jsonable(summary).items()
                if not any(key == f"summary/{name}" or key.startswith(f"summary/{name}/") for key in figures)
                and len(text := value if isinstance(value, str) else json.dumps(value)) <= 5000]
        for batch in _batches(metrics, 1000):
            self._client.log_batch(self._run_id, metrics=batch)
        for batch in _batches(tags, 100):
            self._client.log_batch(self._run_id, tags=batch)
        self._client.log_dict(self._run_id, to_jsonable(summary), "summary.json")
        if best_checkpoint is not None:
            self._client.log_artifact(self._run_id, best_checkpoint, "checkpoints")
        self._completed = True

    def close(self) -> None:
        """Wait for the queued metrics lines, then end the MLflow run. Lines MLflow failed to write
        mark it FAILED and are told on stderr, not raised: the run itself went well, and metrics.jsonl
        has every line (an error here would also keep the run's other sinks from closing)."""
        failures = []
        for operations in self._pending:
            try:
                operations.wait()
            except Exception as error:  # MLflow's own error, whatever its store's
                failures.append(error)
        self._pending = []
        # a run that ended before its end (a stop, an error) is KILLED until --resume continues it
        status = "FAILED" if failures else "FINISHED" if self._completed else "KILLED"
        self._client.set_terminated(self._run_id, status)
        if failures:
            print(f"--tracker mlflow: MLflow could not log {len(failures)} of the run's metrics lines to "
                  f"{self._client.tracking_uri} ({failures[0]}); metrics.jsonl has them all",
                  file=sys.stderr, flush=True)


def _batches(items: list, size: int) -> list[list]:
    """`items` in lists of at most `size`: MLflow takes at most 100 params or tags, and 1000 metrics,
    a call."""
    return [items[start:start + size] for start in range(0, len(items), size)]


def local_store_dir(run_dir: str) -> str:
    """`<parent of the run directory>/mlruns`: the MLflow store of the runs beside this one."""
    return os.path.join(os.path.dirname(os.path.abspath(run_dir)), "mlruns")


def local_store(run_dir: str) -> str:
    """The tracking URI of `local_store_dir`: an SQLite database, MLflow's default backend (its file
    store is in maintenance mode: MLflow 3.17 refuses to open one unless MLFLOW_ALLOW_FILE_STORE is set)."""
    store = local_store_dir(run_dir)
    os.makedirs(store, exist_ok=True)
    return f"sqlite:///{os.path.join(store, 'mlflow.db')}"
