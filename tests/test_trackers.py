"""--tracker wandb|mlflow: a tiny CartPole run logged to W&B (offline) and to MLflow (a local store),
read back with each library's own reader: W&B's `wandb leet inspect` (its reader of an offline
run's `.wandb` log; `wandb.Api` needs a server) and MLflow's `MlflowClient`. A kill -9 and
`--resume` continue the same W&B run; a stop and `--resume` the same MLflow run."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from crash_checks import kill_when_it_says  # tests/crash_checks.py

from jaxrl_async import TrainConfig, train
from jaxrl_async.cli.main import main
from jaxrl_async.trainer import trackers
from jaxrl_async.trainer.run_dir import CONFIG_FILE, SUMMARY_FILE, read_json
from jaxrl_async.trainer.sinks import METRICS_FILE, JsonlSink, close_sinks, write_summary


def _config(tiny_config, run_dir, tracker: str) -> TrainConfig:
    """4 updates of 32 env steps, a metrics line and a checkpoint at each, evaluations at 2 and 4."""
    return tiny_config(tracker=tracker, run_dir=str(run_dir), iterations_per_call=1, checkpoint_interval=1,
                       eval_interval=2)


def _lines(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, METRICS_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# -- failing early ----------------------------------------------------------------------------------

@pytest.fixture
def without_mlflow(monkeypatch):
    """MLflow as if not installed: `check_tracker` asks `importlib.util.find_spec`."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec",
                        lambda name, *args: None if name == "mlflow" else find_spec(name, *args))


def test_a_missing_tracker_fails_on_the_command_line_with_its_pip_line(without_mlflow, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "--tracker", "mlflow", "--run-dir", str(run_dir)]) == 2
    assert "--tracker mlflow needs the mlflow package: pip install 'jaxrl_async[mlflow]'" in capsys.readouterr().err
    assert not run_dir.exists()


def test_a_missing_tracker_fails_train_before_it_builds_anything(without_mlflow, tiny_config, tmp_path):
    cfg = tiny_config(tracker="mlflow", run_dir=str(tmp_path / "run"), env="NoSuchEnv-v0")
    # the tracker's error, not the env id's: it comes first
    with pytest.raises(ValueError, match=r"pip install 'jaxrl_async\[mlflow\]'"):
        train(cfg, console=False)
    assert not (tmp_path / "run").exists()


class _Unreachable:
    """A tracker whose server went away after the run's last metrics line."""

    def write_summary(self, summary, best_checkpoint):
        raise ConnectionError("tracking server unreachable")

    def close(self):
        raise ConnectionError("tracking server unreachable")


def test_a_tracker_failing_at_the_end_is_told_and_the_other_sinks_close(tmp_path, capsys):
    """The run's own files are written by then: the tracker's outage is a warning, not a failed run,
    and the sinks after it still close (metrics.jsonl's file among them)."""
    jsonl = JsonlSink(os.path.join(tmp_path, METRICS_FILE))
    run_sinks = [_Unreachable(), jsonl]
    write_summary(run_sinks, {"num_updates": 4}, None)
    close_sinks(run_sinks)
    assert jsonl._file.closed
    err = capsys.readouterr().err
    assert "warning: _Unreachable could not log the summary: ConnectionError: tracking server unreachable" in err
    assert "warning: _Unreachable did not close: ConnectionError" in err


def test_numeric_fields_are_what_a_tracker_plots():
    record = {"env_steps": 64, "loss": 0.5, "episode_return_per_seed": [1.0, float("nan"), 3.0], "note": "x",
              "eval_return_mean": None, "done": True, "grad_norm": float("inf"),
              "compiled": [{"program": "the training loop", "seconds": 1.0}]}
    assert trackers.numeric_fields(record) == {"env_steps": 64, "loss": 0.5, "episode_return_per_seed/0": 1.0,
                                               "episode_return_per_seed/2": 3.0}


# -- Weights & Biases ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wandb_home(tmp_path_factory):
    """W&B offline, its settings, staging and cache in a temporary home, no login (NETRC, WANDB_API_KEY)."""
    import wandb

    home = tmp_path_factory.mktemp("wandb-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        for name in ("CONFIG", "DATA", "CACHE"):
            patch.setenv(f"WANDB_{name}_DIR", str(home / name.lower()))
        patch.setenv("NETRC", str(home / "netrc"))
        for name in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_IDENTITY_TOKEN_FILE"):
            patch.delenv(name, raising=False)
        wandb.teardown()  # the next run reads this environment
        yield home
        wandb.teardown()


def _wandb_files(run_dir) -> list[str]:
    """The run's W&B logs, oldest first: one per process that logged it (`offline-run-<time>-<id>`)."""
    return sorted(glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb")))


def _inspect(path: str, *flags: str) -> str:
    return subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", path, "--json", *flags],
                          capture_output=True, text=True, check=True, timeout=120).stdout


def _records(path: str) -> list[dict]:
    """Every record of a W&B log, in order, as `wandb leet inspect --json` prints them."""
    return [json.loads(line) for line in _inspect(path).splitlines() if line.strip()]


def _history(path: str) -> list[dict]:
    return [record["history"]["item"] for record in _records(path) if record["type"] == "history"]


@pytest.fixture(scope="module")
def wandb_run(wandb_home, tiny_config, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("wandb") / "run"
    result = train(_config(tiny_config, run_dir, "wandb"), console=False)
    (log,) = _wandb_files(run_dir)
    return run_dir, result, log, json.loads(_inspect(log, "--summary"))


def test_wandb_run_is_offline_in_the_run_directory_with_its_id_kept(wandb_run):
    run_dir, _, log, run = wandb_run
    assert run["state"] == "finished" and run["exit_code"] == 0
    saved = read_json(os.path.join(run_dir, trackers.TRACKER_FILE))["wandb"]
    assert saved == {"id": run["run_id"], "project": trackers.PROJECT, "mode": "offline"}
    assert log.startswith(str(run_dir / "wandb" / "offline-run-"))


def test_wandb_has_the_config(wandb_run):
    run_dir, _, _, run = wandb_run
    config = read_json(os.path.join(run_dir, CONFIG_FILE))
    assert run["config"]["tracker"] == "wandb" and run["config"]["run_dir"] == str(run_dir)
    assert run["config"]["learner"]["learning_rate"] == config["learner"]["learning_rate"]
    assert run["config"]["network"]["hidden_sizes"] == config["network"]["hidden_sizes"] == [16]


def test_wandb_has_every_metrics_line_against_env_steps(wandb_run):
    run_dir, _, log, _ = wandb_run
    lines, history = _lines(run_dir), _history(log)
    assert [row["env_steps"] for row in history] == [line["env_steps"] for line in lines] == [32, 64, 96, 128]
    for row, line in zip(history, lines):
        assert row["loss"] == pytest.approx(line["loss"])
        assert row["steps_per_second"] == pytest.approx(line["steps_per_second"])
    evaluations = [(line["env_steps"], line["eval_return_mean"]) for line in lines if "eval_return_mean" in line]
    assert [(row["env_steps"], row["eval_return_mean"]) for row in history if "eval_return_mean" in row] == [
        (steps, pytest.approx(value)) for steps, value in evaluations] and len(evaluations) == 2
    # the x-axis of every metric is env_steps
    (axis,) = [record["metric"] for record in _records(log) if record["type"] == "metric"]
    assert axis["glob_name"] == "*" and axis["step_metric"] == "env_steps"


def test_wandb_has_the_summary_and_the_best_checkpoint(wandb_run):
    run_dir, result, log, run = wandb_run
    summary = read_json(os.path.join(run_dir, SUMMARY_FILE))
    for name in ("final_eval_return_mean", "steps_per_second", "compile_s", "env_steps"):
        assert run["summary"][name] == pytest.approx(summary[name])
    assert run["summary"]["params_digest"] == summary["params_digest"] == result.summary["params_digest"]
    (artifact,) = [record["artifact"] for record in _records(log) if record["type"] == "artifact"]
    assert artifact["name"] == f"{run['run_id']}-best" and artifact["type"] == "model" and "best" in artifact["aliases"]
    (entry,) = artifact["manifest"]["contents"]
    assert entry["path"] == "best.ckpt"
    assert int(entry["size"]) == os.path.getsize(os.path.join(run_dir, "checkpoints", "best.ckpt"))


def _fake_video(path) -> bytes:
    """A tracker takes the file as it is (no decoding): bytes that name themselves an MP4 do."""
    content = b"\x00\x00\x00\x18ftypmp42" + bytes(range(256))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return content


def test_wandb_takes_the_videos(wandb_home, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sink = trackers.open_tracker("wandb", str(run_dir), {"env": "CartPole-v1"})
    sink.write({"env_steps": 32, "loss": 1.0})
    content = _fake_video(run_dir / "videos" / "update-000001.mp4")
    sink.write_video(str(run_dir / "videos" / "update-000001.mp4"), 32)
    sink.write_summary({"env_steps": 32}, None)
    sink.close()
    (log,) = _wandb_files(run_dir)
    # the log holds a media value's fields flat
    (row,) = [row for row in _history(log) if "eval_video.path" in row]
    assert row["env_steps"] == 32 and row["eval_video._type"] == "video-file"
    with open(os.path.join(os.path.dirname(log), "files", row["eval_video.path"]), "rb") as f:
        assert f.read() == content


def test_wandb_runs_offline_unless_logged_in_and_wandb_mode_wins(wandb_home, tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "online")
    assert trackers.wandb_mode(wandb) is None  # the user's: wandb reads it
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    assert trackers.wandb_mode(wandb) == "offline"
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine api.wandb.ai\n  login user\n  password {'a' * 40}\n")  # as `wandb login` writes it
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert trackers.wandb_mode(wandb) == "online"
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_API_KEY", "b" * 40)
    assert trackers.wandb_mode(wandb) == "online"


_KILLED_AT_UPDATE_3 = """
import glob, json, os, sys, time
from jaxrl_async import TrainConfig, train
from jaxrl_async.trainer import checkpoint as ckpt, sinks

run_dir, config = sys.argv[1], TrainConfig.from_dict(json.loads(sys.argv[2]))


class StopsAtUpdate3:
    '''Last of the sinks: once W&B has taken update 3's line and written its log, and update 2's
    checkpoint is on disk, says so and waits for the kill.'''

    def write(self, record):
        if record["iteration"] < 3:
            return
        while ckpt.latest_checkpoint(run_dir) is None or not any(
                os.path.getsize(log) > 7 for log in glob.glob(os.path.join(run_dir, "wandb", "*", "*.wandb"))):
            time.sleep(0.05)  # 7 bytes: the log's header, before W&B's first flush
        time.sleep(1.0)  # a few more flushes: update 3's line is in the log
        print("ready", flush=True)
        time.sleep(300)

    def close(self):
        pass


opened = sinks.open_sinks
sinks.open_sinks = lambda *args, **kwargs: opened(*args, **kwargs) + [StopsAtUpdate3()]
train(config, console=False)
"""


def test_wandb_run_killed_and_resumed_is_the_same_run(wandb_home, tiny_config, tmp_path):
    run_dir = tmp_path / "run"
    cfg = _config(tiny_config, run_dir, "wandb")
    # W&B writes its log every 15 s by default; here every 0.1 s, so that the killed process's lines are
    # there. And a W&B service of its own (not this process's, whose address WANDB_SERVICE passes on):
    # a process that crashed leaves its run open in the service it used.
    env = {**{name: value for name, value in os.environ.items() if name != "WANDB_SERVICE"},
           "WANDB__TRANSACTION_LOG_FLUSH_INTERVAL": "0.1"}
    kill_when_it_says(_KILLED_AT_UPDATE_3, "ready", (str(run_dir), json.dumps(cfg.to_dict())), env=env)
    run_id = read_json(os.path.join(run_dir, trackers.TRACKER_FILE))["wandb"]["id"]
    (killed,) = _wandb_files(run_dir)
    assert [row["env_steps"] for row in _history(killed)] == [32, 64, 96]
    assert not [record for record in _records(killed) if record["type"] == "exit"]  # it never finished

    train(cfg, console=False, resume=True)  # from update 2's checkpoint
    assert read_json(os.path.join(run_dir, trackers.TRACKER_FILE))["wandb"]["id"] == run_id
    first, resumed = _wandb_files(run_dir)
    assert first == killed
    run = json.loads(_inspect(resumed, "--summary"))
    # the same run: `wandb sync` uploads the two logs, in order, into it
    assert run["run_id"] == run_id and run["state"] == "finished"
    assert [row["env_steps"] for row in _history(resumed)] == [96, 128]


# -- MLflow ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlflow_run(tiny_config, tmp_path_factory):
    """A run stopped after update 2 and resumed to its end, into the local store beside it."""
    from mlflow.tracking import MlflowClient

    runs = tmp_path_factory.mktemp("mlflow")
    cfg = _config(tiny_config, runs / "run", "mlflow")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
            patch.delenv(name, raising=False)
        assert not train(cfg, console=False, stop_after_updates=2).completed
        stopped = read_json(os.path.join(cfg.run_dir, trackers.TRACKER_FILE))["mlflow"]
        client = MlflowClient(stopped["tracking_uri"])
        stopped_status = client.get_run(stopped["run_id"]).info.status
        result = train(cfg, console=False, resume=True)
    return runs, cfg.run_dir, result, stopped, stopped_status, client


def test_mlflow_store_is_beside_the_run_directory(mlflow_run):
    runs, run_dir, _, stopped, _, client = mlflow_run
    saved = read_json(os.path.join(run_dir, trackers.TRACKER_FILE))["mlflow"]
    assert saved["tracking_uri"] == f"sqlite:///{runs / 'mlruns' / 'mlflow.db'}"
    run = client.get_run(saved["run_id"])
    assert run.info.run_name == "run" and run.data.tags["run_dir"] == run_dir
    assert run.info.artifact_uri.startswith((runs / "mlruns" / "artifacts").as_uri())


def test_mlflow_resumed_run_is_the_same_run(mlflow_run):
    _, run_dir, _, stopped, stopped_status, client = mlflow_run
    assert read_json(os.path.join(run_dir, trackers.TRACKER_FILE))["mlflow"]["run_id"] == stopped["run_id"]
    assert stopped_status == "KILLED"
    assert client.get_run(stopped["run_id"]).info.status == "FINISHED"


def test_mlflow_has_the_config_as_params(mlflow_run):
    _, run_dir, _, stopped, _, client = mlflow_run
    params = client.get_run(stopped["run_id"]).data.params
    config = read_json(os.path.join(run_dir, CONFIG_FILE))
    assert params["env"] == "CartPole-v1" and params["tracker"] == "mlflow" and params["run_dir"] == run_dir
    assert float(params["learner.learning_rate"]) == config["learner"]["learning_rate"]
    assert params["network.hidden_sizes"] == "(16,)"


def test_mlflow_has_every_metrics_line_at_its_env_steps(mlflow_run):
    _, run_dir, _, stopped, _, client = mlflow_run
    lines = _lines(run_dir)
    for name in ("loss", "steps_per_second", "episode_return_mean"):
        history = client.get_metric_history(stopped["run_id"], name)
        assert [(m.step, m.value) for m in history] == [
            (line["env_steps"], pytest.approx(line[name])) for line in lines if line.get(name) is not None]
    assert [m.step for m in client.get_metric_history(stopped["run_id"], "loss")] == [32, 64, 96, 128]
    assert [m.step for m in client.get_metric_history(stopped["run_id"], "eval_return_mean")] == [64, 128]


def test_mlflow_has_the_summary_and_the_best_checkpoint(mlflow_run, tmp_path):
    _, run_dir, result, stopped, _, client = mlflow_run
    run = client.get_run(stopped["run_id"])
    summary = read_json(os.path.join(run_dir, SUMMARY_FILE))
    assert run.data.metrics["summary/final_eval_return_mean"] == pytest.approx(summary["final_eval_return_mean"])
    assert run.data.metrics["summary/final_eval_return/0"] == pytest.approx(summary["final_eval_return"][0])
    assert run.data.tags["summary/env_id"] == "CartPole-v1"
    assert json.loads(run.data.tags["summary/params_digest"]) == result.summary["params_digest"]
    with open(client.download_artifacts(stopped["run_id"], "checkpoints/best.ckpt", str(tmp_path)), "rb") as f, \
            open(os.path.join(run_dir, "checkpoints", "best.ckpt"), "rb") as g:
        assert f.read() == g.read()
    for name in (SUMMARY_FILE, CONFIG_FILE):
        assert read_json(client.download_artifacts(stopped["run_id"], name, str(tmp_path))) == \
            read_json(os.path.join(run_dir, name)) | ({"run_dir": run_dir} if name == CONFIG_FILE else {})


def test_mlflow_takes_the_videos_into_the_store_mlflow_tracking_uri_names(mlflow_run, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    # the fixture's database: another directory's, not the store beside this run's
    uri = mlflow_run[3]["tracking_uri"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "videos")
    # the user's experiment, its artifacts where they said (MLflow's default: ./mlruns, from where the store opened)
    MlflowClient(uri).create_experiment("videos", artifact_location=(tmp_path / "artifacts").as_uri())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sink = trackers.open_tracker("mlflow", str(run_dir), {"env": "CartPole-v1"})
    content = _fake_video(run_dir / "videos" / "update-000001.mp4")
    sink.write_video(str(run_dir / "videos" / "update-000001.mp4"), 32)
    sink.close()
    saved = read_json(os.path.join(run_dir, trackers.TRACKER_FILE))["mlflow"]
    assert saved["tracking_uri"] == uri and not (tmp_path / "mlruns").exists()
    client = MlflowClient(uri)
    assert client.get_experiment(saved["experiment_id"]).name == "videos"
    assert client.get_run(saved["run_id"]).info.artifact_uri.startswith((tmp_path / "artifacts").as_uri())
    path = client.download_artifacts(saved["run_id"], "videos/update-000001.mp4", str(tmp_path))
    with open(path, "rb") as f:
        assert f.read() == content
