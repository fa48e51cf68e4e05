"""SAC in the async mode (lag 0 is the fused mode exactly; lag 1 learns otherwise; the warm-up
follows the env steps taken) and the replay learners on host envs (gymnasium): the transitions
the host actor hands over, truncations bootstrapping from the pre-reset observation."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax import serialization

from jaxrl_async.algorithms.replay import buffer as replay
from jaxrl_async.trainer import checkpoint as ckpt
from jaxrl_async.trainer.asynchronous.loop import behaviour_hook
from jaxrl_async.trainer.build import build, initial_states
from jaxrl_async.rollout.host import env_seeds
from jaxrl_async.trainer.training import train
from compilation import optimized  # tests/compilation.py
from host_envs_helpers import SCRIPTED_ID, register  # tests/host_envs_helpers.py

register()
SCRIPTED = "gymnasium:" + SCRIPTED_ID  # obs [t, parity]; even parity terminates at t=3, odd is truncated at t=4


def small_pendulum(tiny_config, **overrides):
    """test_sac.py's config: 40 iterations of 2 envs x 8 steps, learning from the 8th."""
    dqn = dict(replay_capacity=1024, learning_starts=128, replay_ratio=2, replay_batch_size=32)
    dqn.update(overrides.pop("dqn", {}))
    fields = dict(env="Pendulum-v1", algo="sac", num_envs=2, total_timesteps=16 * 40, iterations_per_call=10,
                  eval_interval=20)
    cfg = tiny_config(**{**fields, **overrides})
    return cfg.with_fields(**dqn, tau=0.05)


@pytest.fixture(scope="module")
def sac_runs(tiny_config):
    variants = {"fused": {}, "lag0": dict(mode="async", lag="0"), "lag1": dict(mode="async", lag="1")}
    with optimized():  # the lag-0 programs against the fused one, to the bit (compilation.py)
        return {name: train(small_pendulum(tiny_config, **changes), console=False)
                for name, changes in variants.items()}


def test_sac_lag_0_gives_the_fused_learner(sac_runs):
    fused, lag0 = sac_runs["fused"], sac_runs["lag0"]
    assert lag0.summary["params_digest"] == fused.summary["params_digest"]
    jax.tree.map(np.testing.assert_array_equal, lag0.state.learner, fused.state.learner)
    assert lag0.summary["gradient_steps"] == fused.summary["gradient_steps"] == 2 * (40 - 7)


def test_sac_lag_1_acts_with_the_previous_version_and_learns_otherwise(sac_runs):
    lag1 = sac_runs["lag1"].summary
    assert lag1["policy_lag_max"] == 1 and lag1["samples_per_gradient_step"] == sac_runs["fused"].summary[
        "samples_per_gradient_step"]
    assert lag1["params_digest"] != sac_runs["lag0"].summary["params_digest"]


def test_sac_warm_up_follows_the_env_steps_taken(tiny_config):
    """Rollout k acts at random while k x 16 env steps < learning_starts (128), as in the fused
    mode, even with params of a version from before learning started; once off, it stays off."""
    cfg = small_pendulum(tiny_config, mode="async", lag="1")
    c = build(cfg)
    state = initial_states(c)
    hook = behaviour_hook(c, state)
    random_params = state.learner.params
    assert bool(random_params.random_actions[0])
    assert [bool(hook(random_params, k - 1, k).random_actions[0]) for k in (1, 7, 8, 9)] == [True, True, False, False]
    learned = random_params.replace(random_actions=jnp.zeros_like(random_params.random_actions))
    assert not bool(hook(learned, 3, 4).random_actions[0])


# -- host envs ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scripted_dqn(tiny_config):
    """DQN, lag 1, on 4 scripted envs (parities 0, 1, 1, 0) for 10 fragments of 8 steps."""
    cfg = tiny_config(env=SCRIPTED, algo="dqn", mode="async", lag="1", total_timesteps=32 * 10,
                      iterations_per_call=5, learner=dict(gamma=0.5))
    cfg = cfg.with_fields(replay_capacity=512, learning_starts=64, replay_batch_size=16,
                          n_step=3, target_update_period=4)
    assert [s % 2 for s in env_seeds(cfg.seed, 0, cfg.num_envs)] == [0, 1, 1, 0]
    return cfg, train(cfg, console=False)


def test_dqn_on_a_host_env_runs_and_reports_its_replay_rates(scripted_dqn):
    cfg, result = scripted_dqn
    summary = result.summary
    assert summary["mode"] == "async" and summary["policy_lag_max"] == 1
    assert summary["gradient_steps"] == 10 - 1  # learning from the 2nd fragment (2 x 32 = 64)
    assert summary["replay_fill"] == 10 * 8 / 128
    assert summary["final_eval_episodes"] == cfg.eval_episodes


def test_host_transitions_keep_the_pre_reset_obs(scripted_dqn):
    """In the buffer: a truncated step's next_obs is the final obs [4, 1], the next row starts
    again at t=0; a terminated one's is [3, 0]; every other step's next_obs is the next obs."""
    _, result = scripted_dqn
    storage = jax.tree.map(lambda x: np.asarray(x[0]), result.state.learner.extra.buffer.storage)
    rows = int(result.state.learner.extra.buffer.size[0])
    obs, next_obs = storage["obs"][:rows], storage["next_obs"][:rows]
    terminated, truncated = storage["terminated"][:rows], storage["truncated"][:rows]
    assert truncated.sum() > 0 and terminated.sum() > 0
    np.testing.assert_array_equal(next_obs[truncated], np.tile([4.0, 1.0], (truncated.sum(), 1)))
    np.testing.assert_array_equal(next_obs[terminated], np.tile([3.0, 0.0], (terminated.sum(), 1)))
    ended = (terminated | truncated)[:-1]
    np.testing.assert_array_equal(obs[1:][ended][:, 0], 0.0)
    np.testing.assert_array_equal(next_obs[:-1][~ended], obs[1:][~ended])
    np.testing.assert_array_equal(storage["reward"][:rows], next_obs[..., 0] + 0.5 * storage["action"][:rows])


def test_host_n_step_targets_bootstrap_truncations_from_the_pre_reset_obs(scripted_dqn):
    cfg, result = scripted_dqn
    buffer = jax.tree.map(lambda x: x[0], result.state.learner.extra.buffer)
    key = jax.random.PRNGKey(3)
    sample = jax.jit(lambda b, k: replay.sample(b, k, batch_size=512, n_step=3, gamma=0.5))
    batch = jax.tree.map(np.asarray, sample(buffer, key))
    rows, _ = replay.sample_indices(buffer, key, 512)  # the rows `sample` drew
    whole = np.asarray(rows) < int(buffer.size) - 2  # windows the newest row does not cut short
    t, parity = batch["obs"][:, 0], batch["obs"][:, 1]
    # odd parity from t=2: steps to t=3, then t=4 (truncated): 2 steps, bootstrap from [4, 1]
    odd = (parity == 1) & (t == 2) & whole
    assert odd.any()
    np.testing.assert_array_equal(batch["discount"][odd], 0.25)
    np.testing.assert_array_equal(batch["bootstrap_obs"][odd], np.tile([4.0, 1.0], (odd.sum(), 1)))
    # even parity from t=1: to t=2, then t=3 (terminated): nothing to bootstrap
    even = (parity == 0) & (t == 1) & whole
    assert even.any()
    np.testing.assert_array_equal(batch["discount"][even], 0.0)


def test_sac_on_gymnasium_pendulum_runs(tiny_config):
    cfg = small_pendulum(tiny_config, env="gymnasium:Pendulum-v1", mode="async", total_timesteps=16 * 12,
                         iterations_per_call=6, dqn=dict(learning_starts=64))
    summary = train(cfg, console=False).summary
    assert summary["gradient_steps"] == 2 * (12 - 3) and summary["policy_lag_max"] == 1
    assert np.isfinite(summary["final_eval_return_mean"])  # a smoke run: too short to learn


def test_a_host_run_resumed_with_its_buffer_ends_the_saved_episodes_there(scripted_dqn):
    """Host envs restart their episodes on a resume (their state is not checkpointed): the
    restored buffer's newest row of each env ends its episode (`replay.cut_episodes`), so no
    n-step window runs on into the next episode's rows; every other cell is restored as saved."""
    cfg, result = scripted_dqn
    c = build(cfg.with_fields(checkpoint_replay=True))
    learner, extra = c.algo.host.for_checkpoint(result.state.learner)
    saved = {"state": serialization.to_state_dict(result.state.replace(learner=learner)), "extra": extra,
             "config": {"env": cfg.env}}
    restored, _, note = c.algo.host.restore(initial_states(c), saved, ckpt.restore_state)
    assert note is None
    before = jax.tree.map(lambda x: np.asarray(x[0]), result.state.learner.extra.buffer.storage)
    after = jax.tree.map(lambda x: np.array(x[0]), restored.learner.extra.buffer.storage)
    newest = int(result.state.learner.extra.buffer.position[0]) - 1
    assert not (before["terminated"] | before["truncated"])[newest].all()  # some envs were mid-episode
    np.testing.assert_array_equal(after["truncated"][newest], ~before["terminated"][newest])
    after["truncated"][newest] = before["truncated"][newest]
    jax.tree.map(np.testing.assert_array_equal, after, before)

