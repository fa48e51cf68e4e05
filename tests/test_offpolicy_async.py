"""The replay learners in the async mode (DQN here; SAC and host envs in
test_offpolicy_async_host.py): lag 0 is the fused mode exactly, resume with the buffer is exact
at lag 0 and lag 1, the replay rates in the metrics, `--sync-interval`, the behaviour params
(epsilon follows the env steps taken) and the donated buffer."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.trainer import run_dir as run_dir_lib
from jaxrl_async.algorithms.dqn import epsilon_schedule
from jaxrl_async.trainer.asynchronous.loop import behaviour_hook, compile_learner
from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.asynchronous.pipeline import Lag, ParamStore
from jaxrl_async.trainer.sharding import Placement
from jaxrl_async.trainer.training import train
from cli_checks import assert_train_refuses  # tests/cli_checks.py

# the async programs at lag 0 (and resumed) against the fused program, to the bit: compiled
# optimised, where they agree (compilation.py)
pytestmark = pytest.mark.optimized_compile

NUM_UPDATES = 40
LEARNING_FROM = 7  # the first update (from 0) that learns: its fragment brings the buffer to 8 x 32 = 256
# fields of a metrics line that are timings (or only the async mode has)
TIMINGS = {"steps_per_second", "wall_s", "gradient_steps_per_second", "policy_lag", "learner_wait_s",
           "actor_wait_s", "rollout_s", "update_s", "env_s", "inference_s", "transfer_s", "updates_per_second",
           "samples_per_update", "compiled"}  # compiled: each compile's seconds


def small_cartpole(tiny_config, **overrides) -> TrainConfig:
    """40 iterations of 4 envs x 8 steps, learning from the 9th, a host sync every 10, buffer
    checkpointed (test_dqn.py's config)."""
    dqn = dict(replay_capacity=2048, learning_starts=256, replay_ratio=2, replay_batch_size=32, n_step=3,
               target_update_period=8, checkpoint_replay=True)
    dqn.update(overrides.pop("dqn", {}))
    cfg = tiny_config(algo="dqn", total_timesteps=32 * NUM_UPDATES, iterations_per_call=10, checkpoint_interval=10,
                      eval_interval=20, **overrides)
    return cfg.with_fields(**dqn)


def lines_of(result) -> list[dict]:
    with open(os.path.join(result.run_dir, run_dir_lib.METRICS_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def runs(tiny_config):
    """The straight runs this module compares, keyed by name (the async ones share compiled programs)."""
    variants = {"fused": {}, "lag0": dict(mode="async", lag="0"), "lag1": dict(mode="async", lag="1")}
    return {name: train(small_cartpole(tiny_config, **changes), console=False) for name, changes in variants.items()}


# -- lag 0 is the fused mode -------------------------------------------------------------------
def test_lag_0_gives_the_fused_params_buffer_and_metrics(runs):
    fused, lag0 = runs["fused"], runs["lag0"]
    assert lag0.summary["params_digest"] == fused.summary["params_digest"]
    jax.tree.map(np.testing.assert_array_equal, lag0.state.learner, fused.state.learner)
    for fused_line, async_line in zip(lines_of(fused), lines_of(lag0), strict=True):
        assert {k: v for k, v in async_line.items() if k not in TIMINGS} == \
            {k: v for k, v in fused_line.items() if k not in TIMINGS}
    for key in ("gradient_steps", "samples_per_gradient_step", "replay_fill"):
        assert lag0.summary[key] == fused.summary[key]


def test_lag_1_acts_with_the_previous_version(runs):
    # (this tiny DQN's greedy policy soon takes the same action everywhere, so its params may
    # end where lag 0's do; test_offpolicy_async_host.py shows SAC's lag 1 learning otherwise)
    summary = runs["lag1"].summary
    assert summary["policy_lag_mean"] == pytest.approx((NUM_UPDATES - 1) / NUM_UPDATES)
    assert summary["policy_lag_max"] == 1 and summary["params_version"] == NUM_UPDATES


# -- the replay rates --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fused", "lag1"])
def test_replay_rates_in_the_metrics_lines_and_summary(runs, name):
    result = runs[name]
    batch, ratio = 32, 2
    lines = lines_of(result)
    assert [line["iteration"] for line in lines] == [10, 20, 30, 40]
    # the first window learns in its last 3 iterations (from update 7), the others in all 10
    assert lines[0]["samples_per_gradient_step"] == pytest.approx(10 * batch / (3 * ratio))
    for line in lines[1:]:
        assert line["samples_per_gradient_step"] == batch / ratio  # held: one fragment per update
        assert line["gradient_steps"] == ratio
    for line in lines:
        assert line["gradient_steps_per_second"] == pytest.approx(
            line["steps_per_second"] / line["samples_per_gradient_step"], rel=1e-6)
        assert 0.0 < line["replay_fill"] <= 1.0
    summary = result.summary
    learned = NUM_UPDATES - LEARNING_FROM
    assert summary["gradient_steps"] == ratio * learned
    assert summary["samples_per_gradient_step"] == pytest.approx(NUM_UPDATES * batch / (ratio * learned))
    assert summary["gradient_steps_per_second"] == pytest.approx(
        summary["steps_per_second"] / summary["samples_per_gradient_step"], rel=1e-6)
    assert summary["replay_fill"] == NUM_UPDATES * 8 / 512  # rows written / the ring's rows
    on_disk = json.load(open(os.path.join(result.run_dir, run_dir_lib.SUMMARY_FILE), encoding="utf-8"))
    assert {"gradient_steps_per_second", "samples_per_gradient_step", "replay_fill"} <= set(on_disk)
    if name == "lag1":
        assert lines[1]["policy_lag"] == 1.0 and on_disk["policy_lag_max"] == 1
        assert on_disk["sync_interval"] == 1 and on_disk["params_published"] == NUM_UPDATES


# -- resume with the buffer --------------------------------------------------------------------
@pytest.mark.parametrize("lag, reference", [("0", "fused"), ("1", "lag1")])
def test_resume_with_the_buffer_is_bit_identical(tiny_config, runs, lag, reference):
    cfg = small_cartpole(tiny_config, mode="async", lag=lag)
    stopped = train(cfg, console=False, stop_after_updates=20)
    assert not stopped.completed and stopped.summary["updates_done"] == 20
    resumed = train(cfg, console=False, resume=True)
    assert "replay_refilled" not in resumed.summary
    assert resumed.summary["params_digest"] == runs[reference].summary["params_digest"]
    jax.tree.map(np.testing.assert_array_equal, resumed.state.learner, runs[reference].state.learner)


def test_resume_without_the_buffer_refills_and_says_so(tiny_config, runs, capsys):
    cfg = small_cartpole(tiny_config, mode="async", lag="1", dqn=dict(checkpoint_replay=False))
    train(cfg, console=False, stop_after_updates=20)
    resumed = train(cfg, console=True, resume=True)
    assert "holds no replay buffer" in capsys.readouterr().out
    assert resumed.summary["replay_refilled"] is True
    assert int(resumed.state.learner.extra.buffer.size[0]) == 20 * cfg.num_steps  # only the resumed rows


# -- --sync-interval ---------------------------------------------------------------------------
def test_sync_interval_publishes_every_n_updates(tiny_config):
    cfg = small_cartpole(tiny_config, mode="async", lag="0", sync_interval=3)
    summary = train(cfg, console=False).summary
    assert summary["params_published"] == NUM_UPDATES // 3 and summary["params_version"] == 39
    # rollout k acts with version 3 floor(k / 3): lags 0, 1, 2, 0, 1, 2, ...
    assert summary["policy_lag_mean"] == pytest.approx(np.mean(np.arange(NUM_UPDATES) % 3))
    assert summary["policy_lag_max"] == 2


def test_lag_versions_round_down_to_the_published_ones():
    assert [Lag.LOCKSTEP.version_for(k, 3) for k in range(7)] == [0, 0, 0, 3, 3, 3, 6]
    assert [Lag.ONE.version_for(k, 3) for k in range(7)] == [0, 0, 0, 0, 3, 3, 3]
    assert [Lag.ONE.version_for(k) for k in range(4)] == [0, 0, 1, 2]
    assert Lag.LATEST.version_for(5, 3) is None


def test_param_store_takes_explicit_versions_and_keeps_the_newest():
    store = ParamStore(history=2)
    for version in (0, 3, 6):
        store.publish(jnp.full((2,), float(version)), version=version)
    assert store.version == 6 and float(store.get(3)[0]) == 3.0
    with pytest.raises(LookupError, match="version 0 is not held"):
        store.get(0)
    with pytest.raises(ValueError, match="version 6 must be newer"):
        store.publish(jnp.zeros((2,)), version=6)


@pytest.mark.parametrize("flags, must_mention", [
    (["--mode", "async", "--sync-interval", "0"], ["sync_interval=0", ">= 1"]),
    (["--mode", "fused", "--sync-interval", "4"], ["sync_interval=4", "--mode async"]),
], ids=["zero", "fused"])
def test_bad_sync_interval_exits_2_naming_the_field(flags, must_mention, capsys, tmp_path):
    assert_train_refuses(["--algo", "dqn", *flags], must_mention, capsys, tmp_path / "run")


# -- the pieces: behaviour params, the donated buffer ------------------------------------------
def test_behaviour_gives_the_epsilon_of_the_env_steps_taken(tiny_config):
    cfg = small_cartpole(tiny_config, mode="async")
    c = build(cfg)
    state = initial_states(c)
    hook = behaviour_hook(c, state)
    params = state.learner.params  # version 0: epsilon_start
    assert hook(params, 5, 5) is params  # the version's own params already are the fused mode's
    acted = hook(params, 4, 5)  # lag 1: version 4's network with rollout 5's epsilon
    expected = epsilon_schedule(cfg.dqn, cfg.total_timesteps)(jnp.int32(5 * cfg.batch_size))
    np.testing.assert_array_equal(acted.epsilon, np.full((1,), expected))
    assert float(expected) < float(params.epsilon[0]) == cfg.dqn.epsilon_start
    jax.tree.map(np.testing.assert_array_equal, acted.network, params.network)


def test_the_learner_writes_the_donated_buffer_in_place(tiny_config):
    cfg = small_cartpole(tiny_config, mode="async")
    c = build(cfg)
    placement = Placement(cfg.devices, cfg.num_seeds, cfg.num_envs)
    state = placement.place(initial_states(c))
    trajectory = jax.eval_shape(lambda p, r: jax.vmap(c.rollout.collect)(p, r)[1],
                                state.learner.params, state.rollout)
    sharding = jax.sharding.SingleDeviceSharding(placement.devices[0])
    trajectory = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), trajectory)
    learn = compile_learner(c, placement, state, trajectory)
    example = jax.tree.map(lambda x: jax.device_put(np.ones(x.shape, x.dtype), sharding), trajectory)
    before = state.learner
    after, *_ = learn(before, example)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(before.extra.buffer))  # donated
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(before.params))  # published: never donated
    assert int(after.extra.buffer.size[0]) == cfg.num_steps
    np.testing.assert_array_equal(after.extra.buffer.storage["reward"][0, :cfg.num_steps], 1.0)
