"""EnvPool host environments (`--env envpool:<id>`): SAME_STEP steps checked against CartPole's
equations by hand across resets and time limits, per-env seeds, clear errors, and training
through the CLI. EnvPool is in the dev extra, so CI runs these; elsewhere they skip."""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys

import jax
import numpy as np
import pytest

pytest.importorskip("envpool")

from jaxrl_async.cli.main import main  # noqa: E402
from jaxrl_async.config import LearnerConfig, NetworkConfig  # noqa: E402
from jaxrl_async import TrainConfig  # noqa: E402
from jaxrl_async.envs.host.cores import actor_core  # noqa: E402
from jaxrl_async.trainer.build import build, initial_states  # noqa: E402
from jaxrl_async.envs.host.gymnasium import make_host_env  # noqa: E402
from jaxrl_async.trainer.training import train  # noqa: E402

CARTPOLE = "envpool:CartPole-v1"
THETA_LIMIT, X_LIMIT = 12 * 2 * np.pi / 360, 2.4


def cartpole_next(obs: np.ndarray, action: int) -> np.ndarray:
    """CartPole-v1's Euler step (gymnasium's classic_control/cartpole.py constants), in float64."""
    x, x_dot, theta, theta_dot = obs.astype(np.float64)
    force = 10.0 if action == 1 else -10.0
    total_mass, pole_mass_length, half_length = 1.1, 0.05, 0.5
    cos, sin = np.cos(theta), np.sin(theta)
    temp = (force + pole_mass_length * theta_dot ** 2 * sin) / total_mass
    theta_acc = (9.8 * sin - cos * temp) / (half_length * (4.0 / 3.0 - 0.1 * cos ** 2 / total_mass))
    x_acc = temp - pole_mass_length * theta_acc * cos / total_mass
    return np.array([x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc])


def fell(obs: np.ndarray) -> bool:
    return abs(obs[0]) > X_LIMIT or abs(obs[2]) > THETA_LIMIT


def test_spaces_and_time_limit_come_from_envpools_spec():
    spec = make_host_env(CARTPOLE)
    assert spec.observation_space.shape == (4,) and spec.action_space.n == 2
    assert spec.max_episode_steps == 500
    pendulum = make_host_env("envpool:Pendulum-v1")
    assert pendulum.action_space.shape == (1,) and float(pendulum.action_space.high[0]) == 2.0


def test_atari_frames_reach_the_policy_channels_last_in_the_unit_range():
    # EnvPool stacks Pong's 4 frames channels first, uint8: the convs would read 84 rows as channels
    spec = make_host_env("envpool:Pong-v5")
    assert spec.observation_space.shape == (84, 84, 4)
    envs = spec.make_vec(num_envs=2)
    try:
        obs = envs.reset(seeds=[1, 2])
        step = envs.step(np.array([2, 3]))
    finally:
        envs.close()
    import envpool

    pool = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2, env_seed=[1, 2])
    raw = pool.reset()[0]
    raw_next = pool.step(np.array([2, 3]))[0]
    pool.close()
    assert raw.shape == (2, 4, 84, 84) and raw.dtype == np.uint8 and raw.max() > 200
    np.testing.assert_allclose(obs, np.moveaxis(raw, 1, -1) / 255, rtol=1e-6)
    np.testing.assert_allclose(step.obs, np.moveaxis(raw_next, 1, -1) / 255, rtol=1e-6)
    assert obs.dtype == np.float32 and obs.flags["C_CONTIGUOUS"]


def test_every_step_is_a_real_transition_across_terminations():
    """Constant pushes end episodes within ~10 steps. Every step's final_obs is CartPole's equations
    applied to the obs the action was taken in, reset steps included (so no NEXT_STEP dummy
    transition is recorded, and the action after a reset is applied); an ended episode's final_obs
    is past the limits, its obs a fresh reset, and its length counts the steps since that reset."""
    envs = make_host_env(CARTPOLE).make_vec(3)
    obs = envs.reset([5, 6, 7])
    actions = np.array([1, 0, 1])
    lengths, ended = np.zeros(3, int), 0
    for _ in range(40):
        step = envs.step(actions)
        lengths += 1
        for i in range(3):
            np.testing.assert_allclose(step.final_obs[i], cartpole_next(obs[i], actions[i]), atol=1e-5)
            assert fell(step.final_obs[i]) == bool(step.terminated[i])
            if step.terminated[i]:
                assert np.all(np.abs(step.obs[i]) <= 0.05)  # CartPole's reset draws from U(-0.05, 0.05)
                assert step.episode_length[i] == lengths[i] and step.episode_return[i] == lengths[i]
                lengths[i], ended = 0, ended + 1
            else:
                np.testing.assert_array_equal(step.obs[i], step.final_obs[i])
        np.testing.assert_array_equal(step.reward, 1.0)
        assert not step.truncated.any()
        np.testing.assert_array_equal(step.episode_done, step.terminated)
        obs = step.obs
    assert ended >= 9  # every env ended several episodes
    envs.close()


def test_a_time_limit_is_a_truncation_with_the_pre_reset_obs():
    """max_episode_steps=5 (an EnvPool kwarg) with alternating pushes, which keep the pole up: each
    episode is truncated at its 5th step, not terminated, with the reached obs kept apart."""
    spec = make_host_env(CARTPOLE, max_episode_steps=5)
    assert spec.max_episode_steps == 5
    envs = spec.make_vec(2)
    obs = envs.reset([0, 1])
    for t in range(1, 11):
        actions = np.array([t % 2, (t + 1) % 2])
        step = envs.step(actions)
        expected = np.stack([cartpole_next(obs[i], actions[i]) for i in range(2)])
        np.testing.assert_allclose(step.final_obs, expected, atol=1e-5)
        assert not step.terminated.any()
        np.testing.assert_array_equal(step.truncated, [t % 5 == 0] * 2)
        if t % 5 == 0:
            assert not np.allclose(step.obs, step.final_obs) and np.all(np.abs(step.obs) <= 0.05)
            np.testing.assert_array_equal(step.episode_length, [5, 5])
        obs = step.obs
    envs.close()


def _observations(seeds, steps=12):
    envs = make_host_env(CARTPOLE).make_vec(len(seeds))
    rows = [envs.reset(seeds)]
    rows += [envs.step(np.ones(len(seeds), int)).obs for _ in range(steps)]
    envs.close()
    return np.stack(rows)


def test_env_i_is_seeded_by_seeds_i():
    """Reset seeds are per env and a reset with the same seeds replays the same episodes (EnvPool
    fixes seeds per pool, so `reset` makes a new pool)."""
    both = _observations([3, 4])
    np.testing.assert_array_equal(both, _observations([3, 4]))
    np.testing.assert_array_equal(both[:, 1], _observations([4])[:, 0])
    assert not np.array_equal(both[:, 0], _observations([5])[:, 0])
    envs = make_host_env(CARTPOLE).make_vec(2)
    first = envs.reset([3, 4])
    envs.step(np.zeros(2, int))
    np.testing.assert_array_equal(envs.reset([3, 4]), first)
    envs.close()


def test_clear_errors(monkeypatch):
    with pytest.raises(ValueError, match="did you mean 'envpool:CartPole-v1'"):
        make_host_env("envpool:CartPol-v1")
    monkeypatch.setitem(sys.modules, "envpool", None)  # as on a machine without the extra
    with pytest.raises(ValueError, match=r"needs EnvPool.*pip install -e '\.\[envpool\]'.*gymnasium:CartPole-v1"):
        make_host_env(CARTPOLE)


def _cfg(tmp_path, name, **overrides):
    fields = dict(env=CARTPOLE, mode="async", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, eval_episodes=2,
                  run_dir=str(tmp_path / name))
    fields.update(overrides)
    return TrainConfig(**fields, network=NetworkConfig(hidden_sizes=(16,)),
                       learner=LearnerConfig(update_epochs=1, num_minibatches=2))


def test_same_seed_gives_identical_params(tmp_path):
    """Lag 1, the overlapped pipeline (test_host_envs.py runs lag 0 and 1 on gymnasium envs), the
    envs in two groups, each a pool that steps on its thread while the actor acts for the other
    (EnvPool's send / recv); the third run in one group."""
    a = train(_cfg(tmp_path, "a", lag="1", env_groups=2), console=False)
    b = train(_cfg(tmp_path, "b", lag="1", env_groups=2), console=False)
    assert a.summary["params_digest"] == b.summary["params_digest"]
    assert a.summary["final_eval_episodes"] == 2
    c = train(_cfg(tmp_path, "c", lag="1", seed=1), console=False)
    assert c.summary["params_digest"] != a.summary["params_digest"]


def test_cli_trains_and_evaluates_an_envpool_env(tmp_path, capsys):
    """A Box action space too (Pendulum-v1, actions clipped to [-2, 2] before EnvPool sees them)."""
    run_dir = str(tmp_path / "cli")
    assert main(["train", "--env", "envpool:Pendulum-v1", "--num-envs", "2", "--num-steps", "16",
                 "--total-timesteps", "64", "--eval-episodes", "2", "--hidden-sizes", "16", "--run-dir", run_dir]) == 0
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["mode"] == "async" and summary["env_id"] == "envpool:Pendulum-v1"
    # a Pendulum episode is 200 steps of reward in [-16.3, 0]
    assert all(-16.3 * 200 <= r <= 0.0 for r in summary["final_eval_return"])
    capsys.readouterr()
    assert main(["eval", run_dir, "--episodes", "2", "--checkpoint", "latest"]) == 0
    assert "(2 episodes)" in capsys.readouterr().out


@pytest.mark.parametrize("env, overrides, groups", [
    ("envpool:HalfCheetah-v4", {}, 2),  # MuJoCo's steps repeat the simulator (frame_skip): two groups pay
    ("envpool:HalfCheetah-v4", dict(num_envs=3), 1),  # 3 envs do not split evenly
    ("envpool:HalfCheetah-v4", dict(normalize_obs=True), 1),  # one batch of statistics
    ("envpool:HalfCheetah-v4", dict(env_groups=1), 1),
    (CARTPOLE, {}, 1),  # a classic-control step is shorter than the hand-over to the pool's thread
    ("gymnasium:HalfCheetah-v5", {}, 1),  # gymnasium's envs step in the actor's thread
])
def test_env_groups_auto_splits_where_the_envs_step_off_the_thread(env, overrides, groups):
    assert build(TrainConfig(**{"env": env, "mode": "async", **overrides})).rollout.env_groups == groups


def _threads_on(core: int) -> set[int]:
    """This process's threads (Linux's /proc) that may run on `core` alone."""
    found = set()
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            if os.sched_getaffinity(tid) == {core}:
                found.add(tid)
        except OSError:  # a thread that ended meanwhile
            pass
    return found


@pytest.mark.parametrize("env, overrides, actor_shares, evaluator_shares", [
    (CARTPOLE, {}, True, True),  # a classic-control step: a hand-over to the pool's thread, quickest on one core
    (CARTPOLE, dict(env_groups=2), False, True),  # two groups step one while acting for the other: two cores
    ("envpool:HalfCheetah-v4", {}, False, False),  # MuJoCo's longer steps pay for a core of their own
    ("envpool:HalfCheetah-v4", dict(env_groups=1), False, False),
    ("gymnasium:CartPole-v1", {}, False, False),  # gymnasium's envs step in the actor's thread anyway
])
def test_an_actor_shares_its_core_with_its_envs_threads_only_where_a_step_is_a_quick_hand_over(
        env, overrides, actor_shares, evaluator_shares):
    """...and the evaluator (one group) its own, the core before the first actor's: that actor goes
    on collecting while the learner's thread evaluates."""
    r = build(TrainConfig(**{"env": env, "mode": "async", **overrides})).rollout
    cores = sorted(os.sched_getaffinity(0))
    expected = [cores[-1], cores[-2 % len(cores)]] if actor_shares else [None, None]
    assert [actor_core(r.spec, r.env_groups, index) for index in (0, 1)] == expected
    assert r.evaluator(2).core == (cores[-2 % len(cores)] if evaluator_shares else None)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: every thread runs on it anyway")
def test_a_one_group_envpool_actor_collects_on_one_core_with_its_pool_thread():
    """The actor's thread runs on its core while it collects, then where it ran before; the pool it
    makes at its first reset keeps the core (EnvPool's thread inherits its maker's), and the
    process's other threads are left alone. The evaluator likewise, on the core before."""
    c = build(TrainConfig(env=CARTPOLE, mode="async", num_envs=4, num_steps=8, devices=1))
    state = initial_states(c)
    device = jax.devices()[0]
    actor = c.rollout.actor(list(range(4)), device, jax.sharding.SingleDeviceSharding(device))
    cores = set(os.sched_getaffinity(0))
    assert actor.core == max(cores)
    before = _threads_on(actor.core)
    seen = {}

    def collect():
        _, trajectory = actor.collect(state.learner.params, state.rollout)
        seen["after"] = os.sched_getaffinity(0)
        return trajectory

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        trajectory = pool.submit(collect).result()
    try:
        assert trajectory.reward.shape == (1, 8, 4)
        assert seen["after"] == cores and os.sched_getaffinity(0) == cores
        assert len(_threads_on(actor.core) - before) >= 1  # the pool's thread, on the actor's core
    finally:
        actor.close()
    evaluate = c.rollout.evaluator(2)
    assert evaluate.core == sorted(cores)[-2]
    before = _threads_on(evaluate.core)
    result = evaluate(jax.tree.map(lambda x: x[0], state.learner.params), None, jax.random.PRNGKey(0))
    try:
        assert result.complete.all() and os.sched_getaffinity(0) == cores
        assert len(_threads_on(evaluate.core) - before) >= 1  # its pool's thread, on its core
    finally:
        evaluate.close()
