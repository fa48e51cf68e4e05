"""The Craftax adapter (`--env craftax:ID`) against Craftax's own step, and trained through the
trainer: fused, async, stopped and resumed to the bit.

The reference is the suite's env built without its auto-reset, stepped by hand with the keys the
adapter gives it. Episodes end both ways: by Craftax's own time limit (`max_timesteps`, set short)
and by the task (the player standing in lava, put there by editing the state).

Every program here holds Craftax's world generation, which takes seconds to compile: the runs share
one tiny config and module-scoped fixtures.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from craftax.craftax_classic.constants import Action, BlockType
from craftax.craftax_env import make_craftax_env_from_name

from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.envs import make_env
from jaxrl_async.envs.suites import craftax, suite_env_ids
from jaxrl_async.envs.wrappers import max_truncations
from jaxrl_async.trainer.training import train

CLASSIC = "Craftax-Classic-Symbolic-v1"
LIMIT = 5  # max_timesteps: Craftax truncates an episode at this many steps
NOOP = Action.NOOP.value


def _suite_env(limit=LIMIT):
    """Craftax's own Classic env without auto-reset, and its params with the short time limit."""
    env = make_craftax_env_from_name(CLASSIC, auto_reset=False)
    return env, env.default_params.replace(max_timesteps=limit)


def _into_lava(inner):
    """The state with lava where the player stands: the next NOOP ends the episode in lava."""
    x, y = inner.player_position[0], inner.player_position[1]
    return inner.replace(map=inner.map.at[x, y].set(BlockType.LAVA.value))


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


@pytest.fixture(scope="module")
def side_by_side():
    """Steps of the adapter and of Craftax's own env from the same reset, with the same keys:
    LIMIT NOOPs (a truncation), two NOOPs, then lava and a NOOP (a termination), then lava placed on
    the time limit's step (both: a termination), then a fresh episode's clock set to the limit's
    last step (Craftax's own truncation, not a count of ours). A list of dicts, one per step."""
    adapter = craftax.make(CLASSIC, max_timesteps=LIMIT)
    suite, params = _suite_env()
    adapter_step, adapter_reset = jax.jit(adapter.step), jax.jit(adapter.reset)
    # params as constants, as the adapter holds them (compiled as arguments, a few float
    # roundings differ in the last bit)
    suite_step = jax.jit(lambda key, state, action: suite.step_env(key, state, action, params))
    suite_reset = jax.jit(lambda key: suite.reset_env(key, params))

    key = jax.random.PRNGKey(7)
    obs, state = adapter_reset(key)
    suite_obs, suite_state = suite_reset(key)
    assert _same(obs, suite_obs) and _same(state.inner, suite_state)
    # (the step's index, an edit of both states before it)
    plan = [(i, None) for i in range(LIMIT + 2)] + [(LIMIT + 2, "lava")]
    plan += [(LIMIT + 3 + i, None) for i in range(LIMIT - 1)] + [(2 * LIMIT + 2, "lava")]
    plan += [(2 * LIMIT + 3, "late")]
    edits = {"lava": _into_lava, "late": lambda inner: inner.replace(timestep=jnp.int32(LIMIT - 1)), None: None}
    steps = []
    for index, edit in plan:
        if edit:
            state = state.replace(inner=edits[edit](state.inner))
            suite_state = edits[edit](suite_state)
        step_key = jax.random.fold_in(key, index)
        suite_key, reset_key = jax.random.split(step_key)  # as SuiteEnv splits it
        next_obs, next_state, reward, terminated, truncated, info = adapter_step(step_key, state, jnp.int32(NOOP))
        s_obs, s_state, s_reward, s_done, _ = suite_step(suite_key, suite_state, jnp.int32(NOOP))
        fresh_obs, fresh_state = suite_reset(reset_key)
        steps.append(dict(
            index=index, edit=edit, reward=float(reward), suite_reward=float(s_reward),
            terminated=bool(terminated), truncated=bool(truncated), suite_done=bool(s_done),
            timestep=int(s_state.timestep), time=int(next_state.time),
            final_is_suites=_same(info["final_observation"], s_obs),
            next_is_suites=_same(next_obs, s_obs) and _same(next_state.inner, s_state),
            next_is_reset=_same(next_obs, fresh_obs) and _same(next_state.inner, fresh_state),
            state=next_state))
        obs, state = next_obs, next_state
        # the reference resets where the suite said done, from the key the adapter used
        suite_state = fresh_state if bool(s_done) else s_state
    return steps


def test_rewards_and_observations_are_the_suites(side_by_side):
    for step in side_by_side:
        assert step["reward"] == step["suite_reward"], step["index"]
        assert step["final_is_suites"], step["index"]  # the pre-reset observation, at every step
        # an episode goes on with the suite's next state, or restarts from the suite's reset
        assert step["next_is_reset"] if step["suite_done"] else step["next_is_suites"], step["index"]


def test_craftax_time_limit_is_a_truncation(side_by_side):
    first = side_by_side[:LIMIT + 2]
    assert [s["truncated"] for s in first] == [False] * (LIMIT - 1) + [True, False, False]
    assert not any(s["terminated"] for s in first)
    limit_step = first[LIMIT - 1]
    assert limit_step["suite_done"] and limit_step["timestep"] == LIMIT and limit_step["time"] == 0
    assert [s["time"] for s in first] == [1, 2, 3, 4, 0, 1, 2]


def test_lava_is_a_termination_even_on_the_time_limits_step(side_by_side):
    lava = [s for s in side_by_side if s["edit"] == "lava"]
    assert len(lava) == 2
    early, on_limit = lava
    assert early["terminated"] and not early["truncated"] and early["suite_done"] and early["timestep"] == 3
    # the suite's done holds both causes here; the task's end wins (no bootstrap past it)
    assert on_limit["timestep"] == LIMIT
    assert on_limit["terminated"] and not on_limit["truncated"] and on_limit["suite_done"]
    assert all(s["suite_done"] == (s["terminated"] or s["truncated"]) for s in side_by_side)


def test_the_truncation_is_craftaxs_own_clock(side_by_side):
    late = side_by_side[-1]
    assert late["edit"] == "late" and late["timestep"] == LIMIT and late["suite_done"]
    assert late["truncated"] and not late["terminated"] and late["next_is_reset"]


def test_the_env_state_is_a_pytree_of_arrays(side_by_side):
    state = side_by_side[-1]["state"]
    leaves = jax.tree.leaves(state)
    assert leaves and all(isinstance(leaf, jax.Array) for leaf in leaves)


def test_ids_come_from_craftaxs_registry():
    ids = craftax.env_ids()
    assert ids == ["Craftax-Classic-Pixels-v1", "Craftax-Classic-Symbolic-v1", "Craftax-Pixels-v1",
                   "Craftax-Symbolic-v1"]
    assert suite_env_ids("craftax") == [f"craftax:{i}" for i in ids]


def test_spaces_are_the_suites_through_make_env():
    env, params = make_env(f"craftax:{CLASSIC}")
    assert env.action_space(params).n == 17 and env.observation_space(params).shape == (1345,)
    pixels, _ = make_env("craftax:Craftax-Classic-Pixels-v1")  # loads Craftax's textures: seconds
    space = pixels.observation_space(params)
    assert space.shape == (63, 63, 3) and (space.low, space.high) == (0.0, 1.0)
    assert params.max_steps_in_episode == 10_000  # Craftax-Classic's own time limit, for the evaluator


def test_env_kwargs_set_craftax_params_and_name_the_unknown():
    env = craftax.make(CLASSIC, max_timesteps=50, day_length=20, map_size=[32, 32])
    assert env.craftax_params.max_timesteps == 50 and env.craftax_params.day_length == 20
    assert env._env.static_env_params.map_size == (32, 32)
    with pytest.raises(ValueError, match=r"has no setting \['max_steps_in_episode'\]: env_kwargs may set its "
                                         r"EnvParams \[.*'max_timesteps'"):
        craftax.make(CLASSIC, max_steps_in_episode=10)
    # Craftax's clock restarts at each reset: 16 steps hold 4 truncations at its 5-step limit
    assert max_truncations(craftax.make(CLASSIC, max_timesteps=5), None, 16) == 4
    with pytest.raises(ValueError, match="max_timesteps=0 must be >= 1"):
        craftax.make(CLASSIC, max_timesteps=0)
    with pytest.raises(ValueError, match="did you mean 'craftax:Craftax-Classic-Symbolic-v1'"):
        make_env("craftax:Craftax-Classic-Symbolik-v1")


# ------------------------------------------------------------------ through the trainer

TRAIN_LIMIT = 12  # short episodes: some end inside the run, and the evaluation's end soon
NUM_UPDATES, STOP_AT = 4, 2


def tiny_config(run_dir, **overrides) -> TrainConfig:
    fields = dict(env=f"craftax:{CLASSIC}", env_kwargs=(f"max_timesteps={TRAIN_LIMIT}",), num_envs=2,
                  num_steps=8, total_timesteps=NUM_UPDATES * 16, iterations_per_call=2, eval_interval=0,
                  eval_episodes=2, run_dir=str(run_dir), network=NetworkConfig(hidden_sizes=(8,)),
                  learner=LearnerConfig(update_epochs=1, num_minibatches=1))
    return TrainConfig(**{**fields, **overrides})


def _bytes(tree):
    return [np.asarray(x).tobytes() for x in jax.tree.leaves(tree)]


def _metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("craftax")
    full = train(tiny_config(root / "full"), console=False)
    cfg = tiny_config(root / "resumed")
    stopped = train(cfg, console=False, stop_after_updates=STOP_AT)
    resumed = train(cfg, console=False, resume=True)
    asynchronous = train(tiny_config(root / "async", mode="async", lag="1"), console=False)
    return dict(full=full, stopped=stopped, resumed=resumed, asynchronous=asynchronous)


def test_a_fused_run_trains_and_evaluates(runs):
    full = runs["full"]
    assert full.completed and full.summary["num_updates"] == NUM_UPDATES
    # both evaluation episodes ended (by Craftax's time limit or a death)
    assert full.summary["final_eval_episodes"] == 2 and np.all(np.isfinite(full.summary["final_eval_return"]))
    lines = _metrics(full.run_dir)
    assert [line["iteration"] for line in lines] == [2, 4]
    # 64 steps of 2 envs with 12-step episodes: some ended inside the run, none longer than the limit
    assert lines[-1]["episodes"] >= 1 and 1 <= lines[-1]["episode_length_mean"] <= TRAIN_LIMIT


def test_stop_and_resume_reaches_the_same_bits(runs):
    assert not runs["stopped"].completed and runs["resumed"].completed
    assert runs["resumed"].summary["params_digest"] == runs["full"].summary["params_digest"]
    # every leaf: params, optimiser state, Craftax's env states (its worlds), keys
    assert _bytes(runs["resumed"].state) == _bytes(runs["full"].state)


def test_an_async_run_trains_with_the_policy_lag(runs):
    run = runs["asynchronous"]
    assert run.completed and run.summary["num_updates"] == NUM_UPDATES
    lines = _metrics(run.run_dir)
    assert lines[-1]["policy_lag"] == 1 and np.all(np.isfinite(run.summary["final_eval_return"]))


# ------------------------------------------------------------------ slow: the full game, pixels, every learner
# Long for their compilation (the full game's world generation, the CNN, four learners), not their
# runs: a few steps or iterations each, so they compile fast (conftest.py's `fast_compile`).
# The learners train in the async mode: there the actor's rollout and the evaluation are programs
# of their own, and A2C's, REINFORCE's and IMPALA's are PPO's (`runs["asynchronous"]`'s, from the
# compilation cache), so each compiles only its update, which holds no Craftax: 15 s -> 4-5 s each.


@pytest.mark.slow
@pytest.mark.fast_compile
def test_the_full_game_splits_death_from_its_time_limit():
    """Craftax (not Classic): its done is `timestep >= max_timesteps | dead | boss beaten`."""
    limit = 3
    adapter = craftax.make("Craftax-Symbolic-v1", max_timesteps=limit)
    suite = make_craftax_env_from_name("Craftax-Symbolic-v1", auto_reset=False)
    params = suite.default_params.replace(max_timesteps=limit)

    @jax.jit  # one program for the pair: measured 30 s -> 24 s of CPU to compile, fast, as two
    def step_both(key, state, action):
        return adapter.step(key, state, action), suite.step_env(jax.random.split(key)[0], state.inner, action, params)

    _, state = jax.jit(adapter.reset)(jax.random.PRNGKey(0))
    outcomes = []
    for index, dead in enumerate([False] * limit + [False, True]):
        if dead:
            state = state.replace(inner=state.inner.replace(player_health=jnp.zeros_like(state.inner.player_health)))
        key = jax.random.PRNGKey(index + 1)
        (_, state, _, terminated, truncated, _), (_, _, _, suite_done, _) = step_both(key, state, jnp.int32(NOOP))
        outcomes.append((bool(terminated), bool(truncated), bool(suite_done)))
    assert outcomes == [(False, False, False)] * (limit - 1) + [(False, True, True), (False, False, False),
                                                                 (True, False, True)]


@pytest.mark.slow
@pytest.mark.fast_compile
def test_pixels_train_through_the_image_encoder(tmp_path):
    """Craftax-Classic's 63x63x3 pixels through the CNN torso, two iterations."""
    cfg = tiny_config(tmp_path, env="craftax:Craftax-Classic-Pixels-v1", num_steps=4, total_timesteps=16,
                      iterations_per_call=1)
    result = train(cfg, console=False)
    assert result.completed and result.summary["final_eval_episodes"] == 2
    assert np.all(np.isfinite(result.summary["final_eval_return"]))
    assert any(leaf.ndim == 5 for leaf in jax.tree.leaves(result.state.learner.params))  # [S, 3, 3, 3, 16]: a conv


@pytest.mark.slow
@pytest.mark.fast_compile
@pytest.mark.parametrize("algo", ["a2c", "reinforce", "impala", "dqn"])
def test_every_discrete_learner_trains_on_craftax(algo, tmp_path):
    cfg = tiny_config(tmp_path, algo=algo, mode="async", lag="1")
    if algo == "dqn":
        cfg = cfg.with_fields(replay_capacity=64, learning_starts=16, replay_batch_size=8)
    result = train(cfg, console=False)
    assert result.completed and result.summary["num_updates"] == NUM_UPDATES
    assert np.all(np.isfinite(result.summary["final_eval_return"]))
