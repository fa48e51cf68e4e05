"""Tests for jaxrl_async.trainer.asynchronous.loop: the async mode against the fused one, lag policies,
the run directory it writes, and errors on the learner's side."""

from __future__ import annotations

import json
import os
import threading
import time

import jax
import numpy as np
import pytest

from jaxrl_async.trainer import run_dir as run_dir_lib
from jaxrl_async.trainer.asynchronous.loop import TIMING_FIELDS, PipelineAccounting, train_async
from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async.trainer.run import Run, evaluation_program
from jaxrl_async.trainer.schedule import chunk_plan
from jaxrl_async.trainer.sharding import Placement
from jaxrl_async.trainer.training import train
from jaxrl_async.types import Algorithm
from learning_checks import CARTPOLE_SEEDS, assert_cartpole_solved  # tests/learning_checks.py

# the async programs at lag 0 against the fused program, to the bit: compiled optimised, where
# they agree (compilation.py)
pytestmark = pytest.mark.optimized_compile

NUM_UPDATES = 22
ITERATIONS_PER_CALL = 6  # log windows of 6, 6, 6, 4: an uneven last window too
ASYNC_FIELDS = {"policy_lag", "learner_wait_s", "actor_wait_s", "rollout_s", "update_s", "env_s", "inference_s",
                "transfer_s",
                "updates_per_second", "samples_per_update"}
TIMING_FIELDS = {"steps_per_second", "wall_s", "compiled"} | ASYNC_FIELDS  # compiled: each compile's seconds


def small_config(run_dir, **changes) -> TrainConfig:
    fields = dict(env="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=NUM_UPDATES * 64,
                  iterations_per_call=ITERATIONS_PER_CALL, eval_episodes=4, run_dir=str(run_dir),
                  network=NetworkConfig(hidden_sizes=(16,)),
                  learner=LearnerConfig(update_epochs=2, num_minibatches=2))
    fields.update(changes)
    return TrainConfig(**fields)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def worker_threads():
    return [t for t in threading.enumerate() if t.name == "rollout-worker" and t.is_alive()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run this module compares, trained once each, keyed by name."""
    root = tmp_path_factory.mktemp("async_runs")
    variants = {
        "fused": dict(),
        "lag0": dict(mode="async", lag="0"),
        "fused_2_seeds": dict(num_seeds=2),
        "lag0_2_seeds": dict(mode="async", lag="0", num_seeds=2),
        "lag1": dict(mode="async", lag="1"),
        "lag1_again": dict(mode="async", lag="1"),
        "latest": dict(mode="async", lag="latest"),
    }
    results = {}
    for name, changes in variants.items():
        cfg = small_config(root / name, **changes)
        result = train(cfg, console=False)
        results[name] = (cfg, result, read_jsonl(os.path.join(result.run_dir, run_dir_lib.METRICS_FILE)))
    assert worker_threads() == []
    return results


def without_timings(line: dict) -> dict:
    return {key: value for key, value in line.items() if key not in TIMING_FIELDS}


# -- lag 0: the fused mode, exactly --------------------------------------------

# On a GPU, XLA fuses the fused program's reductions differently from the async programs' (unrolled
# loops, the matrix GAE), so the two agree to float rounding there, not to the bit: the last digits
# of a metric differ (docs/benchmarks.md, "Speed on a GPU"). The bitwise claim is the CPU's.
bitwise_on_this_backend = pytest.mark.xfail(jax.default_backend() != "cpu", strict=False,
                                            reason="lag 0 equals the fused mode to the bit on the CPU only")


@bitwise_on_this_backend
@pytest.mark.parametrize("fused, lag0", [("fused", "lag0"), ("fused_2_seeds", "lag0_2_seeds")])
def test_lag_0_gives_the_fused_params(runs, fused, lag0):
    fused_digests = runs[fused][1].summary["params_digest"]
    assert runs[lag0][1].summary["params_digest"] == fused_digests
    assert len(fused_digests) == runs[fused][0].num_seeds


@bitwise_on_this_backend
@pytest.mark.parametrize("fused, lag0", [("fused", "lag0"), ("fused_2_seeds", "lag0_2_seeds")])
def test_lag_0_writes_the_fused_metrics_line_for_line(runs, fused, lag0):
    cfg, _, fused_lines = runs[fused]
    _, _, async_lines = runs[lag0]
    plan = chunk_plan(cfg.num_updates, cfg.iterations_per_call)
    assert plan == [6, 6, 6, 4]
    assert [line["iteration"] for line in async_lines] == np.cumsum(plan).tolist()
    for fused_line, async_line in zip(fused_lines, async_lines, strict=True):
        assert set(async_line) - set(fused_line) == ASYNC_FIELDS
        async_values, fused_values = without_timings(async_line), without_timings(fused_line)
        if cfg.num_seeds > 1:
            # Var(target - value) over [T, B] is one reduction that XLA orders differently
            # when vmapped inside the fused scan: bitwise equal params, last-bits equal here
            np.testing.assert_allclose(async_values.pop("explained_variance"),
                                       fused_values.pop("explained_variance"), rtol=1e-4)
        assert async_values == fused_values
        assert {"loss", "policy_loss", "value_loss", "env_steps"} <= set(without_timings(fused_line))
    assert any(line.get("episode_return_mean") is not None for line in async_lines)
    if cfg.num_seeds > 1:
        assert all(len(line["episode_return_per_seed"]) == 2 for line in async_lines)


def test_lag_0_summary_reports_no_lag(runs):
    summary = runs["lag0"][1].summary
    assert summary["mode"] == "async" and summary["lag"] == "0"
    assert summary["policy_lag_max"] == 0 and summary["policy_lag_mean"] == 0.0
    assert summary["params_version"] == NUM_UPDATES
    assert summary["final_eval_return"] == runs["fused"][1].summary["final_eval_return"]


# -- lag 1: overlapped and deterministic ---------------------------------------

def test_lag_1_is_deterministic(runs):
    assert runs["lag1"][1].summary["params_digest"] == runs["lag1_again"][1].summary["params_digest"]
    first, second = runs["lag1"][2], runs["lag1_again"][2]
    assert [without_timings(line) for line in first] == [without_timings(line) for line in second]


def test_lag_1_learns_from_other_params_than_lag_0(runs):
    assert runs["lag1"][1].summary["params_digest"] != runs["lag0"][1].summary["params_digest"]


def test_lag_1_summary(runs):
    cfg, result, _ = runs["lag1"]
    summary = result.summary
    assert summary["lag"] == "1" and summary["mode"] == "async"
    assert summary["policy_lag_max"] == 1
    # rollout 0 acts with version 0 (lag 0), every later rollout k with version k - 1
    assert summary["policy_lag_mean"] == pytest.approx((NUM_UPDATES - 1) / NUM_UPDATES)
    assert summary["params_version"] == NUM_UPDATES
    assert summary["overlap_efficiency"] > 0
    assert 0.0 <= summary["learner_wait_fraction"] <= 1.0
    assert summary["env_steps"] == cfg.env_steps
    on_disk = run_dir_lib.read_json(os.path.join(result.run_dir, run_dir_lib.SUMMARY_FILE))
    assert on_disk["params_digest"] == summary["params_digest"]
    assert on_disk["policy_lag_max"] == 1


def test_overlap_counts_only_the_rollout_time_inside_the_steady_state():
    """Rollouts collected while the pipeline filled (prefetched, or during the first compile) are
    consumed in the steady state, but their collecting time is not in it: counted, a short run's
    overlap efficiency read 16 and 85 (a review's), where 2.0 is perfect overlap."""
    accounting = PipelineAccounting(start=0, num_updates=6, samples_per_update=64)
    metrics, finite = {"loss": np.zeros(1)}, np.ones(1, bool)
    timings = {**dict.fromkeys(TIMING_FIELDS, 0.0), "rollout_s": 1.0}
    long_ago = time.perf_counter() - 10.0
    for index in range(5):  # collected for a second each, long before; the steady state starts at the 3rd
        accounting.start_iteration(index, host_s=0.0)
        accounting.add(index, metrics, finite, {**timings, "rollout_start": long_ago})
    accounting.start_iteration(5, host_s=0.0)
    time.sleep(0.2)
    # the last: 0.25 s of collecting, begun 0.1 s before the steady state
    accounting.add(5, metrics, finite, {**timings, "rollout_s": 0.25, "rollout_start": accounting._steady_start - 0.1})
    overlap = accounting.summary(host_s=0.0)["overlap_efficiency"]
    steady_wall = time.perf_counter() - accounting._steady_start
    assert overlap == pytest.approx(0.15 / steady_wall, rel=0.05)  # before: (3 x 1.0 + 0.25) / 0.2 s = 16


def test_lag_1_metrics_lines_carry_the_pipeline_timings(runs):
    cfg, _, lines = runs["lag1"]
    plan = chunk_plan(cfg.num_updates, cfg.iterations_per_call)
    assert len(lines) == len(plan)
    for window, line in zip(plan, lines):
        assert ASYNC_FIELDS <= set(line)
        for field in ("learner_wait_s", "actor_wait_s", "rollout_s", "update_s"):
            assert line[field] >= 0.0, (field, line)
        assert line["rollout_s"] > 0 and line["update_s"] > 0
        assert line["updates_per_second"] > 0
        assert line["samples_per_update"] == cfg.num_seeds * cfg.batch_size == 64
    # the window mean of k - version: (0 + 1 * 5) / 6 in the first window, then 1
    assert lines[0]["policy_lag"] == pytest.approx((plan[0] - 1) / plan[0])
    assert [line["policy_lag"] for line in lines[1:]] == [1.0] * (len(plan) - 1)


# -- latest ----------------------------------------------------------------------

def test_latest_runs_to_completion(runs):
    cfg, result, lines = runs["latest"]
    path = os.path.join(result.run_dir, run_dir_lib.SUMMARY_FILE)
    assert os.path.exists(path)
    summary = run_dir_lib.read_json(path)
    assert summary["lag"] == "latest" and summary["num_updates"] == NUM_UPDATES
    assert summary["params_version"] == NUM_UPDATES
    # the actor can be at most the buffered rollouts plus the one in hand ahead of the learner
    assert 0 <= summary["policy_lag_max"] <= cfg.buffer_size + 1
    assert [line["iteration"] for line in lines] == [6, 12, 18, 22]
    assert all(np.isfinite(line["loss"]) for line in lines)


# -- errors on the learner's side --------------------------------------------------

class LearnerFailure(RuntimeError):
    pass


def _fail_at_update_3(update_count):
    if int(update_count) == 3:
        raise LearnerFailure("learner update 3 failed")


def _open_run(cfg, c, **kwargs) -> Run:
    return Run.create(cfg, evaluation_program(c), Placement(cfg.devices, cfg.num_seeds, cfg.num_envs), console=False, **kwargs)


def test_learner_exception_propagates_and_stops_the_actor(tmp_path):
    cfg = small_config(tmp_path / "failing", mode="async", lag="1")
    c = build(cfg)
    update = c.algo.update

    def raising_update(learner, trajectory):
        # fails when it runs, not when it is traced: the actor thread is running by then
        jax.debug.callback(_fail_at_update_3, learner.update_count)
        return update(learner, trajectory)

    c = c._replace(algo=Algorithm(c.algo.init, raising_update))
    with _open_run(cfg, c) as run, pytest.raises(Exception, match="learner update 3 failed"):
        train_async(c, run, initial_states(c))
    assert worker_threads() == []


def test_learner_host_exception_propagates_unchanged(tmp_path):
    cfg = small_config(tmp_path / "failing_log", mode="async", lag="0", iterations_per_call=2)
    c = build(cfg)
    lines = []

    class FailingSink:
        def write(self, record):
            lines.append(record)
            if len(lines) == 2:
                raise LearnerFailure("metrics sink full")

        def close(self):
            pass

    with _open_run(cfg, c, extra_sinks=[FailingSink()]) as run:
        with pytest.raises(LearnerFailure, match="metrics sink full"):
            train_async(c, run, initial_states(c))
    assert [line["iteration"] for line in lines] == [2, 4]
    assert worker_threads() == []


# -- learning ---------------------------------------------------------------------

@pytest.mark.slow
def test_ppo_with_lag_1_solves_cartpole(tmp_path):
    # the default config, 4 seeds in one run; on an AMD EPYC CPU (jax 0.10.2) seeds 0-7 reached
    # 500, 499.8, 500, 469, 500, 500, 500, 500
    cfg = TrainConfig(mode="async", lag="1", run_dir=str(tmp_path / "cartpole_async"), num_seeds=CARTPOLE_SEEDS,
                      devices=1)
    assert cfg.env == "CartPole-v1" and cfg.total_timesteps == 500_000
    summary = train(cfg, console=False).summary
    assert summary["policy_lag_max"] == 1
    assert_cartpole_solved(summary)
    assert worker_threads() == []
