"""Shared checks of the grid-world suites' tests (test_suite_navix.py, test_suite_xminigrid.py,
test_suite_jumanji.py): one env stepped by hand, and the training runs every suite must pass.

`SuiteRuns` trains a tiny config four ways, once per module: straight through (fused), stopped
half way and resumed (the resumed run must reach the full run's bits), and in the async mode.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.envs import make_env
from jaxrl_async.trainer.training import train

NUM_UPDATES = 6
STOP_AT = 3


def tiny_config(env: str, run_dir, **overrides) -> TrainConfig:
    """`env`, 4 envs x 8 steps, a 16-unit net, NUM_UPDATES updates, a host sync every update."""
    network = {"hidden_sizes": (16,), **overrides.pop("network", {})}
    learner = {"update_epochs": 1, "num_minibatches": 2, **overrides.pop("learner", {})}
    fields = dict(env=env, num_envs=4, num_steps=8, total_timesteps=NUM_UPDATES * 32, iterations_per_call=1,
                  eval_interval=0, eval_episodes=2, run_dir=str(run_dir), **overrides)
    return TrainConfig(**fields, network=NetworkConfig(**network), learner=LearnerConfig(**learner))


def leaves_bytes(tree: Any) -> list[tuple[tuple, str, bytes]]:
    return [(np.shape(x), str(np.asarray(x).dtype), np.asarray(x).tobytes()) for x in jax.tree.leaves(tree)]


@dataclasses.dataclass
class SuiteRuns:
    full: Any  # TrainResult, fused, straight through
    stopped: Any  # the same config stopped at STOP_AT updates
    resumed: Any  # ... and resumed to the end
    async_run: Any  # the async mode (lag 1)


def suite_runs(env: str, root, **overrides) -> SuiteRuns:
    full = train(tiny_config(env, root / "full", **overrides), console=False)
    cfg = tiny_config(env, root / "resumed", **overrides)
    stopped = train(cfg, console=False, stop_after_updates=STOP_AT)
    resumed = train(cfg, console=False, resume=True)
    async_run = train(tiny_config(env, root / "async", mode="async", lag="1", **overrides), console=False)
    return SuiteRuns(full, stopped, resumed, async_run)


def assert_suite_runs(runs: SuiteRuns) -> None:
    """Every run trained all its updates with finite metrics; the resumed run is the full run's twin."""
    for result in (runs.full, runs.resumed, runs.async_run):
        assert result.completed
        assert int(np.asarray(result.state.learner.update_count).max()) == NUM_UPDATES
        assert result.summary["env_steps"] == NUM_UPDATES * 32
        assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(result.state.learner.params))
        # the final greedy evaluation ran whole episodes (the suites' limits bound it)
        assert result.eval_result is not None and np.asarray(result.eval_result.complete).all()
    assert not runs.stopped.completed
    assert int(np.asarray(runs.stopped.state.learner.update_count).max()) == STOP_AT
    assert leaves_bytes(runs.resumed.state.learner.params) == leaves_bytes(runs.full.state.learner.params)
    assert leaves_bytes(runs.resumed.state.rollout) == leaves_bytes(runs.full.state.rollout)
    # the async run learned something else than the fused one (its actor lags a version): not a copy
    assert leaves_bytes(runs.async_run.state.learner.params) != leaves_bytes(runs.full.state.learner.params)


@dataclasses.dataclass
class Steps:
    """Per step of our adapted env: what `step` returned, as NumPy arrays with a leading [T] axis."""

    obs: Any
    final_obs: Any
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episode_return: np.ndarray
    states: list


def run_actions(env_id: str, actions, key: jax.Array, **env_kwargs) -> tuple[Any, Steps]:
    """Our adapted env (wrapped as `make_env` does) from `reset(key)`, stepped with `actions`."""
    env, params = make_env(env_id, **env_kwargs)
    step = jax.jit(env.step)
    key, reset_key = jax.random.split(key)
    obs0, state = jax.jit(env.reset)(reset_key, params)
    rows, states = [], [state]
    for action in actions:
        key, step_key = jax.random.split(key)
        obs, state, reward, terminated, truncated, info = step(step_key, state, jnp.asarray(action), params)
        rows.append((obs, info["final_observation"], reward, terminated, truncated, info["episode_return"]))
        states.append(state)
    stacked = [jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *column) for column in zip(*rows)]
    return obs0, Steps(*stacked, states=states)


def learn_preset(env: str, run_dir, num_seeds: int = 3, **overrides):
    """`env`'s preset, `num_seeds` seeds vmapped, evaluated greedy and sampling at the end only: the
    summary and the greedy episodes' mean length per seed."""
    from jaxrl_async.trainer.presets import config_for

    cfg = dataclasses.replace(config_for(env), num_seeds=num_seeds, eval_stochastic=True, eval_interval=0,
                              run_dir=str(run_dir), **overrides)
    result = train(cfg, console=False)
    lengths = np.asarray(result.eval_result.lengths, np.float64).reshape(num_seeds, -1).mean(axis=-1)
    return result.summary, lengths
