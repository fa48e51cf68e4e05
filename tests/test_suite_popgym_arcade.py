"""The POPGym Arcade adapter (`--env popgym_arcade:ID`) against each game's own `step_env`, and
trained through the trainer.

Each game family splits `done` its own way (the adapter's docstring): CartPole's done is the
state before the step's, Tetris and Breakout fold their time limit into their terminal flag, the
other games keep `info["terminated"]` free of it. Each is stepped side by side with the game's
own step, from the same reset and with the same keys, through episodes that end both ways (a
time limit reached by setting the game's clock forward, a task's end reached by playing).

POPGym Arcade is not installed beside gymnax 1.0.1 by pip's resolver (the adapter's docstring
says how to install it): where it is missing these tests are skipped.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("popgym_arcade")

import popgym_arcade  # noqa: E402

from jaxrl_async import TrainConfig  # noqa: E402
from jaxrl_async.config import LearnerConfig, NetworkConfig  # noqa: E402
from jaxrl_async.envs import make_env  # noqa: E402
from jaxrl_async.envs.suites import popgym_arcade as adapter_module, suite_env_ids  # noqa: E402
from jaxrl_async.trainer.training import train  # noqa: E402


as_dict = adapter_module._as_dict


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def side_by_side(env_id, plan, seed=0, **env_kwargs):
    """Step the adapter and the game's own env through `plan`, a list of (action, edit), where
    `edit(state) -> state` changes both states before the step (None: no change). Returns one
    dict per step."""
    adapter = adapter_module.make(env_id, **env_kwargs)
    game, params = popgym_arcade.make(env_id, **env_kwargs)
    game.is_terminated = game.is_terminal  # as the adapter does (gymnax 1.x's discount asks for it)
    step, reset = jax.jit(adapter.step), jax.jit(adapter.reset)
    game_step = jax.jit(lambda key, state, action: game.step_env(key, state, action, params))
    game_reset = jax.jit(lambda key: game.reset_env(key, params))
    key = jax.random.PRNGKey(seed)
    obs, state = reset(key)
    game_obs, game_state = game_reset(key)
    assert _same(obs, game_obs / 255.0)
    steps = []
    for index, (action, edit) in enumerate(plan):
        if edit is not None:
            game_state = edit(game_state)
            # the adapter keeps the game's state as a dict of its fields (a checkpoint can write it)
            state = state.replace(inner=as_dict(edit(type(game_state)(**state.inner))))
        step_key = jax.random.fold_in(key, index)
        game_key, reset_key = jax.random.split(step_key)
        next_obs, next_state, reward, terminated, truncated, info = step(step_key, state, jnp.int32(action))
        g_obs, g_state, g_reward, g_done, g_info = game_step(game_key, game_state, jnp.int32(action))
        fresh_obs, fresh_state = game_reset(reset_key)
        steps.append(dict(
            reward=float(reward), game_reward=float(g_reward), terminated=bool(terminated),
            truncated=bool(truncated), done=bool(g_done), info_terminated=bool(g_info["terminated"]),
            info_truncated=bool(g_info["truncated"]), final_is_games=_same(info["final_observation"], g_obs / 255.0),
            next_is_games=_same(next_obs, g_obs / 255.0) and _same(next_state.inner, as_dict(g_state)),
            next_is_reset=_same(next_obs, fresh_obs / 255.0) and _same(next_state.inner, as_dict(fresh_state)),
            game_state=g_state))
        obs, state = next_obs, next_state
        game_state = fresh_state if bool(g_done) else g_state
    return steps


def assert_follows_the_game(steps):
    for i, s in enumerate(steps):
        assert s["reward"] == pytest.approx(s["game_reward"], abs=0, rel=0), i
        assert s["final_is_games"], i
        assert s["next_is_reset"] if s["done"] else s["next_is_games"], i
        assert s["done"] == (s["terminated"] or s["truncated"]) and not (s["terminated"] and s["truncated"]), i


def clock(field, value):
    return lambda state: state.replace(**{field: jnp.asarray(value, jnp.asarray(getattr(state, field)).dtype)})


def ends(steps):
    return [("terminated" if s["terminated"] else "truncated" if s["truncated"] else "") for s in steps]


def test_cartpole_falls_a_step_late_and_its_clock_truncates():
    limit = 200  # CartPoleEasy
    # no force: the pole falls on its own; then a fresh episode whose clock is at the limit
    steps = side_by_side("CartPoleEasy", [(0, None)] * 60)
    assert_follows_the_game(steps)
    end = ends(steps).index("terminated")
    assert steps[end]["done"] and steps[end]["info_terminated"] and not steps[end]["info_truncated"]
    # the step before the fall was seen paid the game's reward: the fall shows a step late
    assert steps[end]["reward"] == 0.0 and steps[end - 1]["reward"] == pytest.approx(1 / limit)
    late = side_by_side("CartPoleEasy", [(0, clock("time", limit))], seed=1)
    assert_follows_the_game(late)
    # done by the clock: the game says terminated (its done) and truncated; it is a truncation
    assert late[0]["info_terminated"] and late[0]["info_truncated"] and ends(late) == ["truncated"]


def test_minesweeper_keeps_its_time_limit_out_of_terminated():
    limit = 32  # MineSweeperEasy: 4x4 board, twice its cells
    # moving only (action 0: up) until the limit; then hitting one cell again and again ends the
    # game (a mine, the board cleared, or too many repeated hits)
    steps = side_by_side("MineSweeperEasy", [(0, None)] * limit + [(4, None)] * 12)
    assert_follows_the_game(steps)
    assert ends(steps)[:limit] == [""] * (limit - 1) + ["truncated"]
    assert "terminated" in ends(steps)[limit:]


def test_tetris_success_and_time_limit():
    limit = 3000
    lines = lambda state: state.replace(lines_cleared=jnp.asarray(10, state.lines_cleared.dtype))  # noqa: E731
    steps = side_by_side("TetrisEasy", [(4, clock("time", limit - 1)), (4, None), (4, lines)])
    assert_follows_the_game(steps)
    assert ends(steps) == ["truncated", "", "terminated"]
    assert steps[0]["info_terminated"]  # Tetris's flag holds its time limit too


def test_breakout_ball_lost_and_time_limit():
    steps = side_by_side("BreakoutEasy", [(0, clock("time", 2000 - 1))] + [(0, None)] * 120)
    assert_follows_the_game(steps)
    assert ends(steps)[0] == "truncated"
    assert "terminated" in ends(steps)[1:]  # the unmoved paddle loses the ball


def test_ids_and_spaces_come_from_the_suite():
    assert suite_env_ids("popgym_arcade") == sorted(f"popgym_arcade:{i}" for i in
                                                    popgym_arcade.registration.REGISTERED_ENVIRONMENTS)
    env, params = make_env("popgym_arcade:SkittlesEasy", partial_obs=True)
    assert env.action_space(params).n == 5 and env.observation_space(params).shape == (128, 128, 3)
    assert params.max_steps_in_episode == 101  # one past Skittles' own limit of 100: the evaluator's bound


TINY = dict(num_envs=2, num_steps=4, total_timesteps=32, iterations_per_call=2, eval_interval=0, eval_episodes=2,
            network=NetworkConfig(hidden_sizes=(8,), torso="mlp"), learner=LearnerConfig(update_epochs=1,
                                                                                          num_minibatches=1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("popgym")
    cfg = TrainConfig(env="popgym_arcade:MineSweeperEasy", run_dir=str(root / "full"), **TINY)
    full = train(cfg, console=False)
    stopped_cfg = dataclasses.replace(cfg, run_dir=str(root / "resumed"))
    train(stopped_cfg, console=False, stop_after_updates=2)
    resumed = train(stopped_cfg, console=False, resume=True)
    asynchronous = train(dataclasses.replace(cfg, run_dir=str(root / "async"), mode="async"), console=False)
    return full, resumed, asynchronous


def test_fused_async_and_resumed_runs(runs):
    full, resumed, asynchronous = runs
    for run in runs:
        assert run.completed and run.summary["final_eval_episodes"] == 2
        assert np.all(np.isfinite(run.summary["final_eval_return"]))
    assert [np.asarray(x).tobytes() for x in jax.tree.leaves(resumed.state)] == \
        [np.asarray(x).tobytes() for x in jax.tree.leaves(full.state)]
