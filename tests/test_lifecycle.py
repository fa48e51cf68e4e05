"""Tests for a run's life: resume, evaluation, best checkpoint, divergence, Ctrl-C, bad input.

The reference everywhere is a run trained straight through: a run stopped half way
and resumed must write the same metrics lines and reach the same bits, and every
way a run can go wrong (a shape-changing flag, a damaged checkpoint, a diverging
step size, a Ctrl-C) must end in one clear line and a checkpoint that still works.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.algorithms import sweep_hparams
from jaxrl_async.algorithms.sgd import LearnerHyperparams
from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.cli.main import main
from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.evaluate_run import EVAL_FIX, evaluate_run
from jaxrl_async.trainer.run import Run, TrainingDiverged
from jaxrl_async.trainer import sinks
from jaxrl_async.trainer.run_dir import config_record, load_config, write_config
from jaxrl_async.trainer.schedule import intervals, sync_points
from jaxrl_async.trainer.sharding import Placement
from jaxrl_async.trainer.training import resumed_hparams, train

NUM_UPDATES = 40
STOP_AT = 20
BATCH = 4 * 16  # num_envs * num_steps
# Wall-clock fields: the only ones a resumed run may write differently (`compiled`: what compiled,
# with its seconds, since the previous line).
TIMING_FIELDS = {"steps_per_second", "wall_s", "updates_per_second", "learner_wait_s", "actor_wait_s",
                 "rollout_s", "update_s", "compiled"}
EVAL_FIELDS = {f"eval_{what}_{stat}" for what in ("return", "length") for stat in ("mean", "std", "min", "max")} \
    | {"eval_episodes", "best_eval_return"}
HINT = "  (--debug shows the traceback)"


def small_config(run_dir, **overrides) -> TrainConfig:
    """CartPole, 4 envs x 16 steps, 40 updates, a log line every 5 updates, evaluation every 10."""
    learner = {"update_epochs": 2, "num_minibatches": 2, **overrides.pop("learner", {})}
    network = {"hidden_sizes": (16,), **overrides.pop("network", {})}
    fields = {"env": "CartPole-v1", "num_envs": 4, "num_steps": 16, "total_timesteps": NUM_UPDATES * BATCH,
              "iterations_per_call": 5, "eval_interval": 10, "eval_episodes": 4, "run_dir": str(run_dir),
              **overrides}
    return TrainConfig(**fields, network=NetworkConfig(**network), learner=LearnerConfig(**learner))


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def metrics_of(run_dir) -> list[dict]:
    return read_jsonl(os.path.join(run_dir, "metrics.jsonl"))


def without_timings(lines: list[dict]) -> list[dict]:
    return [{k: v for k, v in line.items() if k not in TIMING_FIELDS} for line in lines]


def leaves_bytes(tree) -> list[tuple[tuple, str, bytes]]:
    return [(np.shape(x), str(np.asarray(x).dtype), np.asarray(x).tobytes()) for x in jax.tree.leaves(tree)]


def copy_run(src, dst) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def stderr_line(capsys, prog="jaxrl-async train") -> str:
    """The one line a failed command printed to stderr."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


@dataclasses.dataclass
class Resumed:
    full: object  # TrainResult of the run trained straight through
    stopped: object  # TrainResult of the run stopped at STOP_AT
    stopped_dir: str  # a pristine copy of the stopped run directory
    resumed: object  # TrainResult of the stopped run, resumed


VARIANTS = {
    # keep all numbered checkpoints of the fused run: the best one is compared with them
    "fused": dict(mode="fused", eval_stochastic=True, keep_checkpoints=10),
    "async-lag0": dict(mode="async", lag="0", keep_checkpoints=2),
    "async-lag1": dict(mode="async", lag="1", keep_checkpoints=2),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """`runs(name) -> Resumed`: a variant trained straight through, and stopped + resumed (once)."""
    root = tmp_path_factory.mktemp("lifecycle")
    cache: dict[str, Resumed] = {}

    def get(name: str) -> Resumed:
        if name not in cache:
            changes = VARIANTS[name]
            full = train(small_config(root / f"{name}-full", **changes), console=False)
            cfg = small_config(root / f"{name}-resumed", **changes)
            stopped = train(cfg, console=False, stop_after_updates=STOP_AT)
            stopped_dir = copy_run(cfg.run_dir, root / f"{name}-stopped")
            resumed = train(cfg, console=False, resume=True)
            cache[name] = Resumed(full, stopped, stopped_dir, resumed)
        return cache[name]

    return get


# ------------------------------------------------------------------ exact resume


@pytest.mark.parametrize("name", list(VARIANTS))
def test_stop_and_resume_reaches_the_same_bits(runs, name):
    run = runs(name)
    assert run.full.completed and not run.stopped.completed and run.resumed.completed
    assert run.stopped.summary == {"updates_done": STOP_AT,
                                   "checkpoint": ckpt.numbered_path(run.stopped.run_dir, STOP_AT)}
    assert run.resumed.summary["params_digest"] == run.full.summary["params_digest"]
    # not only the params: optimiser state, env states, observations, every key
    assert leaves_bytes(run.resumed.state) == leaves_bytes(run.full.state)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_stop_and_resume_writes_the_same_metrics(runs, name):
    run = runs(name)
    full, resumed = metrics_of(run.full.run_dir), metrics_of(run.resumed.run_dir)
    assert [line["iteration"] for line in resumed] == list(range(5, NUM_UPDATES + 1, 5))
    assert without_timings(resumed) == without_timings(full)
    assert len(metrics_of(run.stopped_dir)) == STOP_AT // 5  # the stopped run logged up to its stop


def test_a_resume_after_a_crash_writes_each_metrics_line_once(runs, tmp_path):
    """A run that died after its last checkpoint had logged lines past it: the resume starts at
    the checkpoint and drops them (and a line cut short), so that each update's line is there
    once and metrics.jsonl reads as the straight run's."""
    full = runs("fused").full
    run_dir = copy_run(full.run_dir, tmp_path / "crashed")
    numbered = ckpt.list_checkpoints(run_dir)
    for path in numbered[len(numbered) // 2:]:  # the crash came after the middle checkpoint
        os.remove(path)
    os.remove(os.path.join(run_dir, "summary.json"))
    with open(os.path.join(run_dir, "metrics.jsonl"), "a", encoding="utf-8") as f:
        f.write('{"iteration": 4')  # the line the crash cut short
    resumed = train(small_config(run_dir, **VARIANTS["fused"]), console=False, resume=True)
    assert resumed.summary["params_digest"] == full.summary["params_digest"]
    assert without_timings(metrics_of(run_dir)) == without_timings(metrics_of(full.run_dir))


def test_a_resume_drops_the_summary_and_a_best_checkpoint_of_the_lost_updates(tmp_path, capsys):
    """The updates past the checkpoint a run resumes from are lost, and so are the files they left:
    summary.json (an earlier end, by which a reader would take the extended run for complete) and
    best.ckpt where one of them wrote it (a policy the resumed run does not have, while its best
    return counts from the checkpoint). A best.ckpt from before the checkpoint is the run's own."""
    cfg = small_config(tmp_path / "run")
    os.makedirs(ckpt.checkpoint_dir(cfg.run_dir))
    best = os.path.join(ckpt.checkpoint_dir(cfg.run_dir), ckpt.BEST)
    resume = {"counters": {"updates": 20}, "extra": {"best_eval_return": 9.0}, "path": "update_20"}
    for written, kept in ((30, False), (20, True)):
        with open(os.path.join(cfg.run_dir, "summary.json"), "w", encoding="utf-8") as f:
            json.dump({"num_updates": 40}, f)
        ckpt.save(best, state={"w": np.zeros(2, np.float32)}, config={}, counters={"updates": written})
        with Run.create(cfg, None, Placement(cfg.devices, cfg.num_seeds, cfg.num_envs), resume=resume) as run:
            assert run.best_eval_return == 9.0
        assert os.path.exists(best) == kept, written
        assert not os.path.exists(os.path.join(cfg.run_dir, "summary.json"))
    out = capsys.readouterr().out
    assert out.count("best.ckpt was written at update 30, past the checkpoint resumed (update 20)") == 1, out


def test_resumed_lag_1_run_keeps_the_policy_lag(runs):
    lags = [line["policy_lag"] for line in metrics_of(runs("async-lag1").resumed.run_dir)]
    assert lags[STOP_AT // 5] == 1  # the first window after the resume acts one version behind


def test_stop_after_updates_checkpoints_where_it_stops(tmp_path):
    # syncs at 5, 7, 10, 14, 15, 20, ...; checkpoints every 7: the stop at 20 is not one of them
    cfg = small_config(tmp_path / "run", eval_interval=7)
    result = train(cfg, console=False, stop_after_updates=STOP_AT)
    assert result.summary["updates_done"] == STOP_AT
    assert result.summary["checkpoint"] == ckpt.numbered_path(cfg.run_dir, STOP_AT)


# ------------------------------------------------------------------ what a resume accepts and refuses


@pytest.mark.parametrize("change, field", [
    (dict(num_envs=8), "num_envs=8"),
    (dict(network=dict(hidden_sizes=(32,))), "network.hidden_sizes=(32,)"),
    (dict(env="Acrobot-v1"), "env='Acrobot-v1'"),
], ids=["num_envs", "hidden_sizes", "env"])
def test_resume_refuses_shape_changing_flags(runs, change, field, tmp_path):
    run_dir = copy_run(runs("fused").stopped_dir, tmp_path / "run")
    before = open(os.path.join(run_dir, "metrics.jsonl"), "rb").read()
    with pytest.raises(ValueError, match=re.escape(f"cannot resume with {field}: the run was trained with")):
        train(small_config(run_dir, mode="fused", **change), console=False, resume=True)
    assert open(os.path.join(run_dir, "metrics.jsonl"), "rb").read() == before  # nothing written


@pytest.mark.parametrize("dotted, change", [
    ("env", dict(env="Acrobot-v1")), ("num_envs", dict(num_envs=8)), ("num_steps", dict(num_steps=32)),
    ("num_seeds", dict(num_seeds=2)), ("seed", dict(seed=1)), ("normalize_obs", dict(normalize_obs=True)),
    ("action_noise_correlation", dict(action_noise_correlation=0.5)),
    ("network.hidden_sizes", dict(network=dict(hidden_sizes=(16, 16)))),
    ("network.activation", dict(network=dict(activation="relu"))),
    ("network.torso", dict(network=dict(torso="mlp"))),
    ("network.policy_hidden_sizes", dict(network=dict(policy_hidden_sizes=(16,)))),
    ("network.value_hidden_sizes", dict(network=dict(value_hidden_sizes=(16,)))),
    ("network.action_dist", dict(network=dict(action_dist="tanh_gaussian"))),
])
def test_every_fixed_field_is_checked(dotted, change, tmp_path):
    with pytest.raises(ValueError, match=rf"cannot resume with {re.escape(dotted)}="):
        small_config(tmp_path).check_resumable_as(small_config(tmp_path, **change))


def test_a_saved_replay_buffer_fixes_whether_it_is_prioritised(tmp_path):
    """With --checkpoint-replay the checkpoint holds the buffer, priorities or none; without it
    the buffer refills, so prioritised replay may be switched on at a resume."""
    from jaxrl_async.config import ReplayConfig

    def dqn(**replay):
        return small_config(tmp_path, algo="dqn", replay=ReplayConfig(replay_capacity=1024, learning_starts=64, **replay))

    with pytest.raises(ValueError, match=r"cannot resume with replay.priority_exponent=0.6: the run's checkpoints "
                                         r"hold its uniform replay buffer \(--checkpoint-replay\), which only fits a "
                                         r"priority_exponent of 0"):
        dqn(checkpoint_replay=True).check_resumable_as(dqn(checkpoint_replay=True, priority_exponent=0.6))
    with pytest.raises(ValueError, match="hold its prioritised replay buffer"):
        dqn(checkpoint_replay=True, priority_exponent=0.6).check_resumable_as(dqn(checkpoint_replay=True))
    assert dqn().check_resumable_as(dqn(priority_exponent=0.6)) is None


def test_resume_accepts_budget_schedule_mode_and_hyperparameter_changes(tmp_path):
    new = small_config(tmp_path, total_timesteps=80 * BATCH, eval_interval=0, iterations_per_call="all",
                       mode="async", lag="1", checkpoint_interval=3, keep_checkpoints=1, eval_stochastic=True,
                       tensorboard=True, learner=dict(learning_rate=1e-3, ent_coef=0.0, update_epochs=4))
    assert small_config(tmp_path).check_resumable_as(new) is None  # raises ValueError if refused


def test_resume_extends_a_finished_run_to_the_new_total(runs, tmp_path):
    run_dir = copy_run(runs("fused").full.run_dir, tmp_path / "run")
    cfg = small_config(run_dir, total_timesteps=50 * BATCH, **VARIANTS["fused"])
    result = train(cfg, console=False, resume=True)
    assert result.completed and result.summary["num_updates"] == 50
    assert [line["iteration"] for line in metrics_of(run_dir)] == list(range(5, 51, 5))
    assert int(np.asarray(result.state.learner.update_count)[0]) == 50
    assert ckpt.latest_checkpoint(run_dir) == ckpt.numbered_path(run_dir, 50)
    assert ckpt.load(ckpt.latest_checkpoint(run_dir))["counters"]["updates"] == 50


@pytest.mark.optimized_compile  # the async programs against the fused one, to the bit (compilation.py)
def test_resume_with_another_eval_interval_and_mode_reaches_the_same_params(tmp_path):
    """Evaluation and checkpoints take no training randomness: a fused run resumed in async
    lag-0 mode with another schedule ends with the straight run's params. (Its own fused runs:
    the module's are compiled fast.)"""
    full = train(small_config(tmp_path / "full", **VARIANTS["fused"]), console=False)
    run_dir = tmp_path / "run"
    train(small_config(run_dir, **VARIANTS["fused"]), console=False, stop_after_updates=STOP_AT)
    result = train(small_config(run_dir, eval_interval=15, mode="async", lag="0"), console=False, resume=True)
    lines = metrics_of(run_dir)
    assert [line["iteration"] for line in lines] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert [line["iteration"] for line in lines if "eval_return_mean" in line] == [10, 20, 30, 40]
    assert result.summary["params_digest"] == full.summary["params_digest"]
    assert ckpt.list_checkpoints(run_dir)[-2:] == [ckpt.numbered_path(run_dir, u) for u in (30, 40)]


def _saved_before_the_learner_rename(config: dict) -> dict:
    old = dict(config)
    old["ppo"] = old.pop("learner")  # the last field then and now: the key order stays too
    return old


def test_run_saved_with_the_ppo_key_loads_evaluates_and_resumes_exactly(runs, tmp_path, capsys):
    """A run directory written before `TrainConfig.ppo` became `TrainConfig.learner` still loads,
    evaluates, and resumes (`jaxrl-async train --resume`) to the straight run's bits.

    The old format is made from a genuine run stopped half way: its config.json and the config
    inside every checkpoint (best.ckpt too) are rewritten with the key "ppo" for "learner". That
    is the whole difference (git log -p -- jaxrl_async/config.py jaxrl_async/run.py): since run
    directories and checkpoints exist, both hold `dataclasses.asdict` of the TrainConfig, whose
    fields were only ever added (with defaults), never renamed or removed, until `ppo`; the
    learner's own fields keep their names under the new key.
    """
    run = runs("fused")
    run_dir = copy_run(run.stopped_dir, tmp_path / "run")
    config_path = os.path.join(run_dir, "config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(_saved_before_the_learner_rename(config), f, indent=2)
    checkpoints = sorted(os.listdir(ckpt.checkpoint_dir(run_dir)))
    assert checkpoints == [ckpt.BEST, "update_000000010.ckpt", "update_000000020.ckpt"]
    for name in checkpoints:
        path = os.path.join(ckpt.checkpoint_dir(run_dir), name)
        saved = ckpt.load(path)
        ckpt.save(path, state=saved["state"], config=_saved_before_the_learner_rename(saved["config"]),
                  counters=saved["counters"], extra=saved["extra"])
        assert "learner" not in ckpt.load(path)["config"]

    # the learner's settings are read, not defaulted: the run trained with 2 epochs x 2 minibatches
    assert load_config(run_dir) == load_config(run.stopped_dir)
    assert load_config(run_dir).learner == LearnerConfig(update_epochs=2, num_minibatches=2)
    assert evaluate_run(run_dir, episodes=4).replace(run_dir, "RUN") == \
        evaluate_run(run.stopped_dir, episodes=4).replace(run.stopped_dir, "RUN")

    assert main(["train", "--resume", run_dir]) == 0, capsys.readouterr().err
    summary = json.load(open(os.path.join(run_dir, "summary.json"), encoding="utf-8"))
    assert summary["params_digest"] == run.full.summary["params_digest"]
    assert without_timings(metrics_of(run_dir)) == without_timings(metrics_of(run.full.run_dir))
    assert "learner" in json.load(open(config_path, encoding="utf-8"))  # the resumed run saves the new key


def test_resuming_a_finished_run_without_extending_it_says_how(runs):
    run_dir = runs("fused").full.run_dir
    with pytest.raises(ValueError, match=r"already has 40 updates \(2560 env steps\); pass a larger "
                                         r"--total-timesteps to extend it"):
        train(small_config(run_dir, **VARIANTS["fused"]), console=False, resume=True)


def test_resume_without_a_checkpoint_is_a_checkpoint_error(runs, tmp_path):
    run_dir = copy_run(runs("fused").stopped_dir, tmp_path / "run")
    shutil.rmtree(ckpt.checkpoint_dir(run_dir))
    with pytest.raises(ckpt.CheckpointError, match="has no checkpoint to resume from"):
        train(small_config(run_dir), console=False, resume=True)


def test_resume_without_a_run_dir_is_refused(tmp_path):
    with pytest.raises(ValueError, match="resume needs the run directory"):
        train(dataclasses.replace(small_config(tmp_path), run_dir=None), console=False, resume=True)


# ------------------------------------------------------------------ the schedule and evaluation


def _config_for(total_updates, **overrides):
    return small_config("unused", **{"total_timesteps": total_updates * BATCH, **overrides})


@pytest.mark.parametrize("overrides, expected_intervals, expected_points", [
    (dict(), (10, 10), list(range(5, 41, 5))),
    (dict(eval_interval="auto"), (5, 5), list(range(5, 41, 5))),  # 8 syncs: an evaluation at each
    (dict(eval_interval=7, checkpoint_interval=0), (7, 0), [5, 7, 10, 14, 15, 20, 21, 25, 28, 30, 35, 40]),
    (dict(eval_interval=0, checkpoint_interval=15), (0, 15), [5, 10, 15, 20, 25, 30, 35, 40]),
    (dict(iterations_per_call="all", eval_interval="auto"), (0, 0), [40]),
    (dict(iterations_per_call="all"), (10, 10), [10, 20, 30, 40]),
    # 'auto' syncs every 2 updates, and after the first one (the first metrics line)
    (dict(iterations_per_call="auto", eval_interval="auto"), (4, 4), [1, *range(2, 41, 2)]),
    (dict(total_timesteps=41 * BATCH, checkpoint_interval=15), (10, 15), [*range(5, 41, 5), 41]),
], ids=["every-10", "auto", "uneven", "ckpt-only", "all-auto", "all-every-10", "auto-auto", "remainder"])
def test_schedule(overrides, expected_intervals, expected_points):
    cfg = _config_for(NUM_UPDATES, **overrides)
    assert intervals(cfg) == expected_intervals
    assert sync_points(cfg) == expected_points


def test_evaluations_land_on_the_scheduled_updates(runs):
    lines = metrics_of(runs("fused").full.run_dir)
    assert [line["iteration"] for line in lines] == list(range(5, 41, 5))
    for line in lines:
        has_eval = line["iteration"] % 10 == 0
        assert EVAL_FIELDS <= set(line) if has_eval else not (EVAL_FIELDS & set(line)), line
        stochastic = {name for name in line if name.startswith("eval_stochastic_")}
        assert stochastic == ({f.replace("eval_", "eval_stochastic_", 1) for f in EVAL_FIELDS
                               if f != "best_eval_return"} if has_eval else set())
        if has_eval:
            assert line["eval_episodes"] == 4
            assert line["eval_return_min"] <= line["eval_return_mean"] <= line["eval_return_max"]


def test_iterations_per_call_all_evaluates_once_at_the_end(tmp_path):
    cfg = small_config(tmp_path / "run", iterations_per_call="all", eval_interval="auto")
    result = train(cfg, console=False)
    lines = metrics_of(cfg.run_dir)
    assert [line["iteration"] for line in lines] == [NUM_UPDATES]
    assert EVAL_FIELDS <= set(lines[0])
    assert result.summary["final_eval_return_mean"] == lines[0]["eval_return_mean"]


def test_tensorboard_writes_the_metrics_as_scalars(tmp_path):
    pytest.importorskip("tensorboardX", reason="--tensorboard needs the optional tensorboardX package "
                        "(pip install 'jaxrl_async[tensorboard]')")
    cfg = small_config(tmp_path / "run", iterations_per_call="all", eval_interval="auto", tensorboard=True)
    train(cfg, console=False)
    board = os.path.join(cfg.run_dir, "tensorboard")
    events = [name for name in os.listdir(board) if name.startswith("events.out.tfevents")]
    assert len(events) == 1
    content = open(os.path.join(board, events[0]), "rb").read()
    for tag in (b"loss", b"eval_return_mean", b"episode_return_mean"):
        assert tag in content  # the scalar's tag is stored in the clear in the event record


def test_a_missing_tensorboardx_fails_train_before_it_builds_anything(tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(sinks.importlib.util, "find_spec",
                        lambda name, *args: None if name == "tensorboardX" else find_spec(name, *args))
    cfg = small_config(tmp_path / "run", tensorboard=True, env="NoSuchEnv-v0")
    # tensorboardX's error, not the env id's: it comes first (a tracker opened would be left empty)
    with pytest.raises(ValueError, match=r"pip install 'jaxrl_async\[tensorboard\]'"):
        train(cfg, console=False)
    assert not (tmp_path / "run").exists()


def test_an_infinite_config_value_reads_back_from_config_json_and_a_checkpoint(tmp_path):
    """inf is "no clipping" for the gradient norm and PPO's ratio: JSON's null in its place made the
    run impossible to resume or evaluate."""
    cfg = small_config(tmp_path, learner=dict(max_grad_norm=float("inf"), clip_eps=float("inf")))
    write_config(str(tmp_path), cfg.to_dict())
    assert load_config(str(tmp_path)) == cfg
    data = ckpt.encode(ckpt.content_of(state={}, config=config_record(cfg.to_dict()), counters={}))
    assert TrainConfig.from_dict(ckpt.decode(data)["config"]) == cfg


def test_best_checkpoint_holds_the_best_evaluation(runs):
    run_dir = runs("fused").full.run_dir
    evaluated = [line for line in metrics_of(run_dir) if "eval_return_mean" in line]
    best_line = max(evaluated, key=lambda line: line["eval_return_mean"])  # the first of equals
    best = ckpt.load(os.path.join(ckpt.checkpoint_dir(run_dir), ckpt.BEST))
    assert best["counters"]["updates"] == best_line["iteration"]
    assert best["extra"]["best_eval_return"] == best_line["eval_return_mean"]
    assert all(line["best_eval_return"] == max(e["eval_return_mean"] for e in evaluated
                                               if e["iteration"] <= line["iteration"]) for line in evaluated)
    # the same training state as the numbered checkpoint of that update
    numbered = ckpt.load(ckpt.numbered_path(run_dir, best_line["iteration"]))
    assert leaves_bytes(best["state"]) == leaves_bytes(numbered["state"])


def test_evaluate_run_best_latest_and_path(runs):
    run_dir = runs("fused").full.run_dir
    best_path = os.path.join(ckpt.checkpoint_dir(run_dir), ckpt.BEST)
    best_update = ckpt.load(best_path)["counters"]["updates"]
    best = evaluate_run(run_dir, checkpoint="best", episodes=4)
    assert best.splitlines()[0].startswith(f"CartPole-v1 ppo: {best_path} (update {best_update}, ")
    assert best == evaluate_run(run_dir, checkpoint=best_path, episodes=4)  # same seed, same report
    latest = evaluate_run(run_dir, checkpoint="latest", episodes=4)
    assert f"{ckpt.numbered_path(run_dir, 40)} (update 40, 2,560 env steps per seed), greedy policy, " \
           "4 episodes per seed" in latest
    assert re.search(r"seed 0: return +\d+\.\d\d ± \d+\.\d\d .*\(4 episodes\)", latest), latest


def test_eval_command_prints_per_seed_returns(runs, capsys):
    run_dir = runs("fused").full.run_dir
    assert main(["eval", run_dir, "--episodes", "4", "--checkpoint", "latest"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  seed 0: return +\d+\.\d\d", out, re.M), out
    assert re.search(r"^mean return over seeds: \d+\.\d\d$", out, re.M), out


def test_evaluate_run_without_checkpoints_is_a_checkpoint_error(runs, tmp_path):
    run_dir = copy_run(runs("fused").stopped_dir, tmp_path / "run")
    shutil.rmtree(ckpt.checkpoint_dir(run_dir))
    with pytest.raises(ckpt.CheckpointError, match="has no checkpoint yet"):
        evaluate_run(run_dir)


# ------------------------------------------------------------------ divergence

DIVERGED = re.compile(r"training diverged: (loss|policy_loss|value_loss|grad_norm|the params) became NaN or "
                      r"infinite at update (\d+); the last good checkpoint is (\S+); lower --learning-rate")


def _last_good_checkpoint(run_dir) -> str:
    """The newest checkpoint: the one a diverging resumed run must name and leave intact."""
    return ckpt.latest_checkpoint(run_dir)


def test_divergence_names_metric_update_and_last_good_checkpoint(runs, tmp_path):
    run_dir = copy_run(runs("fused").stopped_dir, tmp_path / "run")
    lines_before = metrics_of(run_dir)
    _last_good_checkpoint(run_dir)
    # a step size of 1e30 poisons the first window after the resume
    cfg = small_config(run_dir, learner=dict(learning_rate=1e30))
    with pytest.raises(TrainingDiverged) as info:
        train(cfg, console=False, resume=True)
    assert isinstance(info.value, FloatingPointError)
    match = DIVERGED.search(str(info.value))
    assert match, str(info.value)
    assert STOP_AT < int(match.group(2)) <= STOP_AT + 5  # an update of the resumed window, counted from 1
    good = match.group(3)
    assert good == ckpt.numbered_path(run_dir, STOP_AT)
    assert metrics_of(run_dir) == lines_before  # no line for the poisoned window
    assert ckpt.latest_checkpoint(run_dir) == good  # and no checkpoint of it
    saved = ckpt.load(good)
    assert saved["counters"]["updates"] == STOP_AT
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(saved["state"]["learner"]["params"]))
    assert "(update 20, " in evaluate_run(run_dir, checkpoint=good, episodes=4)


def test_divergence_through_the_cli_exits_1_with_one_line(runs, tmp_path, capsys):
    run_dir = copy_run(runs("fused").stopped_dir, tmp_path / "run")
    _last_good_checkpoint(run_dir)
    assert main(["train", "--resume", run_dir, "--learning-rate", "1e30"]) == 1
    line = stderr_line(capsys)
    assert DIVERGED.search(line) and line.endswith(HINT), line
    assert ckpt.numbered_path(run_dir, STOP_AT) in line


def test_resume_applies_new_learner_hyperparameters(runs):
    from jaxrl_async.trainer.build import build, initial_states
    from jaxrl_async.trainer.training import load_resume

    cfg = small_config(runs("fused").stopped_dir, learner=dict(learning_rate=1e30, ent_coef=0.5))
    c = build(cfg)
    state, _ = load_resume(cfg, c, initial_states(c))
    assert float(np.asarray(state.learner.hparams.learning_rate)[0]) == np.float32(1e30)
    assert float(np.asarray(state.learner.hparams.ent_coef)[0]) == 0.5


def test_a_resumed_sweep_keeps_each_seeds_hyperparameters_but_those_the_resume_changes():
    """A sweep's checkpoint holds a learning rate per seed; resuming it without `hparams` keeps
    them (the config's one value would silently flatten the sweep), while a value the resume
    changes (`--ent-coef 0.5`) is the config's for every seed."""
    saved_learner, learner = LearnerConfig(), LearnerConfig(ent_coef=0.5)
    saved, _ = sweep_hparams(saved_learner, 1, learning_rate=[1e-4, 1e-3])
    fresh = jax.tree.map(lambda x: jnp.broadcast_to(x, (2,)), LearnerHyperparams.from_config(learner))
    hparams = resumed_hparams(saved, fresh, saved_learner, learner)
    np.testing.assert_array_equal(hparams.learning_rate, np.float32([1e-4, 1e-3]))
    np.testing.assert_array_equal(hparams.ent_coef, np.float32([0.5, 0.5]))
    np.testing.assert_array_equal(hparams.clip_eps, saved.clip_eps)


# ------------------------------------------------------------------ Ctrl-C, SIGTERM


def _signal_when_logging(metrics_path: str, signum: int, timeout_s: float = 120.0) -> threading.Thread:
    """Send `signum` to this process once the first metrics line is written, i.e. once the
    training loop (and its signal handlers) runs; a fixed timer could fire during compilation."""
    def watch():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.path.exists(metrics_path) and os.path.getsize(metrics_path) > 0:
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_sigterm_stops_at_a_sync_with_a_checkpoint_and_resume_finishes(tmp_path, capsys):
    """SIGTERM (a scheduler's preemption, `kill`) stops a run as Ctrl-C does (tests/
    test_checkpoint_writer.py and test_host_envs.py send SIGINT): at the next sync, with a checkpoint."""
    # 200 updates take seconds: the signal lands long before the end
    cfg = small_config(tmp_path / "run", total_timesteps=200 * BATCH, eval_interval=0, checkpoint_interval=0)
    handlers_before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    watcher = _signal_when_logging(os.path.join(cfg.run_dir, "metrics.jsonl"), signal.SIGTERM)
    result = train(cfg, console=False)
    watcher.join()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers_before
    assert "SIGTERM: finishing the current step, then writing a checkpoint" in capsys.readouterr().out
    assert not result.completed
    done = result.summary["updates_done"]
    assert done in sync_points(cfg) and done < cfg.num_updates
    # the checkpoint interval is 0 (only at the end): this checkpoint is the interrupt's
    assert result.summary["checkpoint"] == ckpt.numbered_path(cfg.run_dir, done)
    assert ckpt.list_checkpoints(cfg.run_dir) == [result.summary["checkpoint"]]
    assert ckpt.load(result.summary["checkpoint"])["counters"]["updates"] == done
    assert [line["iteration"] for line in metrics_of(cfg.run_dir)][-1] == done

    finished = train(cfg, console=False, resume=True)
    assert finished.completed and finished.summary["num_updates"] == cfg.num_updates
    assert int(np.asarray(finished.state.learner.update_count)[0]) == cfg.num_updates
    assert [line["iteration"] for line in metrics_of(cfg.run_dir)] == sync_points(cfg)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers_before


# ------------------------------------------------------------------ bad input through the CLI


@pytest.fixture
def damaged_run(runs, tmp_path):
    """A copy of a run stopped half way, ready to resume, for a test to damage."""
    return copy_run(runs("fused").stopped_dir, tmp_path / "run")


def _flip_bytes(path, offsets):
    data = bytearray(open(path, "rb").read())
    for where in offsets:
        data[int(where * (len(data) - 1))] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])


def _edit_config(run_dir):
    path = os.path.join(run_dir, "config.json")
    config = json.load(open(path))
    config["network"]["hidden_sizes"] = [32]
    json.dump(config, open(path, "w"))


def _checkpoint_of_another_network(run_dir):
    """The latest checkpoint's config says 32 units (so the config check passes) but its
    state is the 16-unit one: only the shapes can tell. So looks a checkpoint that another
    version of jaxrl_async wrote, whose network differs for the same config."""
    _edit_config(run_dir)
    path = ckpt.latest_checkpoint(run_dir)
    saved = ckpt.load(path)
    saved["config"]["network"]["hidden_sizes"] = [32]
    ckpt.save(path, state=saved["state"], config=saved["config"], counters=saved["counters"], extra=saved["extra"])


def _checkpoint_of_another_env(run_dir):
    """The newest checkpoint as if copied in from an Acrobot run (its config says so)."""
    path = ckpt.latest_checkpoint(run_dir)
    saved = ckpt.load(path)
    ckpt.save(path, state=saved["state"], config={**saved["config"], "env": "Acrobot-v1"}, counters=saved["counters"],
              extra=saved["extra"])


BAD_RESUMES = {
    "not-a-run": (None, r"'\S+' is not a jaxrl_async run directory \(no config\.json\); pass a directory "
                        r"that jaxrl-async train wrote"),
    "flipped-bytes": (lambda d: _flip_bytes(ckpt.latest_checkpoint(d), (0.3, 0.6, 0.9)),
                      r"checkpoint \S+update_000000020\.ckpt is corrupted \(checksum mismatch\); move it aside "
                      r"to resume from the previous checkpoint in the same folder"),
    "truncated": (lambda d: _truncate(ckpt.latest_checkpoint(d)),
                  r"checkpoint \S+update_000000020\.ckpt is truncated or corrupted"),
    "edited-config": (_edit_config, r"checkpoint \S+update_000000020\.ckpt was trained with network\.hidden_sizes="
                                    r"\(16,\), but the run's config\.json says network\.hidden_sizes=\(32,\): one of "
                                    r"the two was edited or copied in from another run"),
    "another-runs-checkpoint": (_checkpoint_of_another_env,
                                r"checkpoint \S+update_000000020\.ckpt was trained with env='Acrobot-v1', but the "
                                r"run's config\.json says env='CartPole-v1'.*move it out of \S+checkpoints\)"),
    "checkpoint-does-not-fit": (_checkpoint_of_another_network,
                                r"checkpoint \S+update_000000020\.ckpt does not fit this config: checkpoint state "
                                r"leaf \S+ has shape \(1, 16, 2\).*so the code differs: another version of jaxrl_async"),
}


@pytest.mark.parametrize("name", list(BAD_RESUMES))
def test_bad_resume_exits_2_with_one_line(name, damaged_run, tmp_path, capsys):
    damage, message = BAD_RESUMES[name]
    run_dir = damaged_run
    if damage is None:
        run_dir = str(tmp_path / "empty")
        os.makedirs(run_dir)
    else:
        damage(run_dir)
    metrics_before = os.path.exists(os.path.join(run_dir, "metrics.jsonl")) and metrics_of(run_dir)
    assert main(["train", "--resume", run_dir]) == 2
    line = stderr_line(capsys)
    assert re.search(message, line), line
    assert line.endswith(HINT), line
    assert (os.path.exists(os.path.join(run_dir, "metrics.jsonl")) and metrics_of(run_dir)) == metrics_before


@pytest.mark.parametrize("flags, message", [
    (["--env", "CartPole-v9"], r"unknown env_id 'CartPole-v9'; did you mean 'CartPole-v1'[,?]"),
    (["--hidden-sizes", "16", "--activation", "tanh", "--env", "Brekout-MinAtar"],
     r"unknown env_id 'Brekout-MinAtar'; did you mean 'Breakout-MinAtar'"),
    # values the constructor takes but the env's first reset fails on, deep inside JAX
    (["--env", "Catch-bsuite", "--env-kwargs", "rows=-3"],
     r"env 'Catch-bsuite' does not run with env_kwargs \{'rows': -3\}: TypeError: broadcast_in_dim shape"),
    (["--env", "Catch-bsuite", "--env-kwargs", "rows=0"],
     r"env 'Catch-bsuite' does not run with env_kwargs \{'rows': 0\}: IndexError"),
], ids=["env-typo", "minatar-typo", "env-kwargs-negative-rows", "env-kwargs-zero-rows"])
def test_unknown_env_exits_2_with_one_line(flags, message, tmp_path, capsys):
    assert main(["train", *flags, "--run-dir", str(tmp_path / "run")]) == 2
    line = stderr_line(capsys)
    assert re.search(message, line) and line.endswith(HINT), line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags, message", [
    (["--num-envs", "0"], "num_envs=0 is invalid: must be >= 1"),
    (["--eval-interval", "-3"], "eval_interval=-3 is invalid"),
    (["--total-timesteps", "10"], "total_timesteps=10 is invalid: must be at least one rollout"),
    (["--reward-scale", "0"], "reward_scale=0.0 is invalid: must be a finite number > 0"),
    (["--ent-coef", "inf"], "ent_coef=inf is invalid: must be a finite number >= 0"),
    (["--seed", str(2**32 + 5)], "seed=4294967301 is invalid: must be in [0, 2**32)"),
    (["--env", "gymnasium:CartPole-v1", "--devices", "2"],
     "devices=2 is invalid: host envs train their one seed on one device: use --devices 1"),
    (["--env", "Pendulum-v1", "--algo", "sac", "--action-dist", "tanh_gaussian"],
     "action_dist='tanh_gaussian' is invalid: algo='sac' builds its tanh-squashed Gaussian actor and twin critics "
     "from hidden_sizes: leave action_dist at 'gaussian'"),
    (["--env", "gymnasium:Pendulum-v1", "--action-dist", "tanh_gaussian"],
     "host envs ('gymnasium:Pendulum-v1') take the Gaussian clipped to their Box: use --action-dist gaussian"),
    (["--algo", "dqn", "--replay-capacity", "1024", "--learning-starts", "2048"],
     "learning_starts=2048 is invalid: must be at most the 1024 transitions the buffer holds"),
], ids=["num-envs-0", "negative-eval-interval", "budget-below-one-rollout", "reward-scale-0", "ent-coef-inf", "seed-past-32-bits", "host-env-on-two-devices", "tanh-with-sac",
        "tanh-on-a-host-env", "learning-never-starts"])
def test_invalid_config_value_exits_2_with_one_line(flags, message, tmp_path, capsys):
    # a flag parsing error: no traceback exists to show, so no --debug hint either
    assert main(["train", *flags, "--run-dir", str(tmp_path / "run")]) == 2
    assert message in stderr_line(capsys)
    assert not (tmp_path / "run").exists()


def test_eval_of_a_damaged_run_exits_2_with_one_line(damaged_run, tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    assert "is not a jaxrl_async run directory" in stderr_line(capsys, "jaxrl-async eval")
    os.remove(os.path.join(ckpt.checkpoint_dir(damaged_run), ckpt.BEST))
    _truncate(ckpt.latest_checkpoint(damaged_run))
    assert main(["eval", damaged_run]) == 2
    line = stderr_line(capsys, "jaxrl-async eval")
    assert "update_000000020.ckpt is truncated or corrupted" in line and line.endswith(HINT), line
    # eval's own advice, not the resume's
    assert f"; {EVAL_FIX}{HINT}" in line and "--resume" not in line, line
    assert main(["eval", damaged_run, "--checkpoint", "nowhere.ckpt"]) == 2
    assert f"no checkpoint at 'nowhere.ckpt': {EVAL_FIX}" in stderr_line(capsys, "jaxrl-async eval")


def test_a_resume_that_cannot_write_its_run_directory_exits_2_with_one_line(damaged_run, monkeypatch, capsys):
    """A run on a read-only file system (a finished job's scratch, a mounted dataset) failed with
    OSError's traceback; the failure is injected where the resume first writes."""
    from jaxrl_async.trainer import run_dir as run_dir_lib

    def read_only(run_dir):
        raise OSError(30, "Read-only file system", os.path.join(run_dir, "summary.json"))

    monkeypatch.setattr(run_dir_lib, "drop_summary", read_only)
    before = sorted(os.listdir(ckpt.checkpoint_dir(damaged_run)))
    assert main(["train", "--resume", damaged_run]) == 2
    line = stderr_line(capsys)
    assert (f"cannot write to the run directory {damaged_run!r}: Read-only file system "
            f"({damaged_run}/summary.json); copy the run where you can write and resume the copy") in line, line
    assert sorted(os.listdir(ckpt.checkpoint_dir(damaged_run))) == before


def test_eval_of_another_runs_checkpoint_says_whose_it_is(damaged_run, capsys):
    """A checkpoint whose state does not fit the run: named by the field that differs (the state
    check's own message named an array and advised a resume)."""
    cfg = load_config(damaged_run)
    # as if another run wrote the checkpoints
    write_config(damaged_run, dataclasses.replace(cfg, num_envs=2 * cfg.num_envs).to_dict())
    assert main(["eval", damaged_run, "--checkpoint", "latest"]) == 2
    line = stderr_line(capsys, "jaxrl-async eval")
    assert (f"is another run's: it was trained with num_envs={cfg.num_envs}, this run ({damaged_run}) with "
            f"num_envs={2 * cfg.num_envs}; {EVAL_FIX}") in line, line
    # another seed's checkpoint fits this run's state, and evaluates
    write_config(damaged_run, dataclasses.replace(cfg, seed=cfg.seed + 1).to_dict())
    assert main(["eval", damaged_run, "--checkpoint", "latest", "--episodes", "2"]) == 0


def test_debug_shows_the_traceback(damaged_run, capsys):
    _flip_bytes(ckpt.latest_checkpoint(damaged_run), (0.5,))
    assert main(["train", "--resume", damaged_run, "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):"), err
    assert "jaxrl_async.trainer.checkpoint.CheckpointError: checkpoint" in err
    assert err.strip().splitlines()[-1].startswith("jaxrl-async train: error: checkpoint ")
    assert HINT not in err


# ------------------------------------------------------------------ memory


_MEMORY_SCRIPT = textwrap.dedent("""
    import json, sys
    import psutil
    from jaxrl_async.trainer import sinks
    from jaxrl_async.config import LearnerConfig, NetworkConfig
    from jaxrl_async import TrainConfig
    from jaxrl_async.trainer.training import train

    # observe the resident set at every host sync, right after its metrics line is written
    rss = []
    write = sinks.JsonlSink.write
    def write_and_measure(self, record):
        write(self, record)
        rss.append(psutil.Process().memory_info().rss)
    sinks.JsonlSink.write = write_and_measure

    updates, mode, run_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    cfg = TrainConfig(env="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=updates * 64,
                      iterations_per_call=5, eval_interval=5, eval_episodes=4, mode=mode, run_dir=run_dir,
                      network=NetworkConfig(hidden_sizes=(16,)),
                      learner=LearnerConfig(update_epochs=2, num_minibatches=2))
    train(cfg, console=False)
    print(json.dumps(rss))
""")


def _rss_at_each_sync(updates: int, mode: str, run_dir) -> list[int]:
    """Resident set size in bytes after each host sync of a fresh process training `updates` updates."""
    # two malloc arenas: on a many-core machine glibc's per-thread arenas otherwise hold freed
    # blocks in as many places as there are threads, and the resident set wanders by tens of MiB
    env = dict(os.environ, MALLOC_ARENA_MAX="2")
    out = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT, str(updates), mode, str(run_dir)],
                         capture_output=True, text=True, timeout=300, check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fused", "async"])
def test_memory_stays_flat_over_a_10x_longer_run(mode, tmp_path):
    # an evaluation, a checkpoint and a metrics line at each of 80 host syncs (5 updates apart):
    # the resident set after 400 updates against the same process's after 40 (everything is
    # compiled at the first sync), so process start-up and allocator set-up cancel out
    rss = _rss_at_each_sync(400, mode, tmp_path / "run")
    assert len(rss) == 80, len(rss)
    mib = 2 ** 20
    short, long = rss[7], rss[-1]
    print(f"\n{mode}: RSS {short / mib:.0f} MiB after 40 updates -> {long / mib:.0f} MiB after 400")
    # a leak of what a sync makes (a retraced executable, a kept trajectory or metrics history)
    # adds up over 72 syncs to far more than this
    assert long <= short + max(30 * mib, 0.05 * short), (short / mib, long / mib)
