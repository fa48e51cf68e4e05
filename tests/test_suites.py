"""The suites' mechanism: `SUITE:ID` routing, the missing-extra and refused-suite errors,
`--env-kwargs`, and `SuiteEnv`'s protocol (time limit, termination over truncation, auto-reset,
final observation) on a hand-written env whose every step is known."""

import importlib.util
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async.config import parse_env_kwargs
from jaxrl_async import TrainConfig
from jaxrl_async.envs import suites
from jaxrl_async.envs.suites.functional import SuiteEnv, SuiteParams


class Countdown(SuiteEnv):
    """obs = [position]; each step moves by the action (0: +1, 1: +2) and pays the new position;
    it terminates at `goal` or beyond. Reset draws the start from {0, 1} with the key, so a fresh
    reset is visible. No time limit of its own: SuiteEnv's `max_steps_in_episode` gives one."""

    name = "Countdown"

    def __init__(self, goal: int = 5, max_steps_in_episode: int = 0):
        super().__init__(max_steps_in_episode)
        self.goal = goal

    def reset_env(self, key, params):
        start = jax.random.bernoulli(key).astype(jnp.int32)
        return start[None].astype(jnp.float32), start

    def step_env(self, key, inner, action, params):
        position = inner + 1 + action
        return (position[None].astype(jnp.float32), position, position.astype(jnp.float32),
                position >= self.goal, jnp.bool_(False))

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 10.0, (1,), jnp.float32)


def test_an_adapter_without_one_of_the_four_methods_cannot_be_made():
    class NoObservationSpace(SuiteEnv):
        reset_env, step_env, action_space = Countdown.reset_env, Countdown.step_env, Countdown.action_space

    with pytest.raises(TypeError, match="observation_space"):
        NoObservationSpace()


def _run(env, actions, seed=0):
    """Step the env through `actions` from a reset; a list of the step's outputs as numpy."""
    key = jax.random.PRNGKey(seed)
    obs, state = env.reset(key)
    step = jax.jit(env.step)
    out = []
    for action in actions:
        key, step_key = jax.random.split(key)
        next_obs, state, reward, terminated, truncated, info = step(step_key, state, jnp.int32(action))
        out.append(dict(obs=float(obs[0]), next_obs=float(next_obs[0]), reward=float(reward),
                        terminated=bool(terminated), truncated=bool(truncated),
                        final=float(info["final_observation"][0]), time=int(state.time)))
        obs = next_obs
    return out


def test_a_termination_resets_and_keeps_the_final_observation():
    steps = _run(Countdown(goal=5), [1, 1, 1, 0])
    start = steps[0]["obs"]
    assert steps[0]["next_obs"] == start + 2 and steps[0]["reward"] == start + 2
    # start 0: 2, 4, 6 (>= 5: terminated); start 1: 3, 5 (terminated)
    end = 2 if start == 0 else 1
    assert [s["terminated"] for s in steps[:end + 1]] == [False] * end + [True]
    done = steps[end]
    assert done["final"] == start + 2 * (end + 1) and done["reward"] == done["final"]
    assert done["next_obs"] in (0.0, 1.0) and done["time"] == 0 and not done["truncated"]
    # the step after the reset moves from the reset observation
    assert steps[end + 1]["obs"] == done["next_obs"]


def test_the_time_limit_truncates_and_a_termination_at_the_limit_wins():
    steps = _run(Countdown(goal=100, max_steps_in_episode=3), [0] * 7)
    assert [s["truncated"] for s in steps] == [False, False, True, False, False, True, False]
    assert not any(s["terminated"] for s in steps)
    assert steps[2]["final"] == steps[0]["obs"] + 3 and steps[2]["time"] == 0 and steps[1]["time"] == 2
    # goal reached on the limit's step: terminated, not truncated (no bootstrap past the end)
    both = _run(Countdown(goal=3, max_steps_in_episode=3), [0, 0, 0], seed=1)
    first = both[0]["obs"]
    hit = 2 if first == 0 else 1
    assert both[hit]["terminated"] and not both[hit]["truncated"]


def test_suite_env_vmaps_and_draws_fresh_resets_per_env():
    env = Countdown(goal=2)
    keys = jax.random.split(jax.random.PRNGKey(3), 64)
    obs, state = jax.vmap(env.reset)(keys)
    next_obs, state, reward, terminated, truncated, info = jax.vmap(env.step)(keys, state, jnp.ones(64, jnp.int32))
    assert bool(terminated.all()) and not bool(truncated.any())
    np.testing.assert_array_equal(info["final_observation"], obs + 2)
    assert set(np.unique(next_obs).tolist()) == {0.0, 1.0}  # fresh draws, not one copied start
    assert reward.dtype == jnp.float32 and terminated.dtype == jnp.bool_


class CountedCountdown(Countdown):
    """Countdown that counts how often its Python is traced."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.traces = {"reset_env": 0, "step_env": 0}

    def reset_env(self, key, params):
        self.traces["reset_env"] += 1
        return super().reset_env(key, params)

    def step_env(self, key, inner, action, params):
        self.traces["step_env"] += 1
        return super().step_env(key, inner, action, params)


def test_a_program_traces_the_suites_reset_and_step_once_and_gives_the_same_values():
    # the vmapped step holds the reset twice (the auto-reset's cond for one env, its batched rows)
    # and the initial states once more: one trace of the suite's Python serves them all
    env = CountedCountdown(goal=2)
    keys = jax.random.split(jax.random.PRNGKey(3), 8)

    def reset_and_step(keys):
        _, state = jax.vmap(env.reset)(keys)
        return jax.vmap(env.step)(keys, state, jnp.ones(8, jnp.int32))

    traced = jax.jit(reset_and_step).lower(keys)
    assert env.traces == {"reset_env": 1, "step_env": 1}
    # inlined, not called: the program is the one the suite's own functions give
    jaxpr = str(jax.make_jaxpr(reset_and_step)(keys))
    assert "name=reset_env" not in jaxpr and "name=step_env" not in jaxpr
    next_obs, state, _, terminated, *_ = traced.compile()(keys)
    assert bool(terminated.all()) and not bool(state.time.any())  # every env at the goal: a fresh episode
    reset_keys = jax.vmap(lambda key: jax.random.split(key)[1])(keys)  # the step's reset key
    fresh = jax.vmap(lambda key: Countdown.reset_env(env, key, env.default_params)[0])(reset_keys)
    np.testing.assert_array_equal(next_obs, fresh)


def test_a_suite_env_is_built_once_per_id_and_kwargs_and_its_traces_serve_every_run(monkeypatch):
    built = []
    adapter = types.ModuleType("countdown_adapter")
    adapter.env_ids = lambda: ["Countdown-v0"]
    adapter.make = lambda inner, **kwargs: built.append(kwargs) or CountedCountdown(**kwargs)
    monkeypatch.setitem(sys.modules, "countdown_adapter", adapter)
    monkeypatch.setitem(suites.SUITES, "countdown", suites.Suite("countdown", "countdown_adapter", "numpy", "countdown"))

    env = suites.make_suite_env("countdown:Countdown-v0", goal=3)
    assert suites.make_suite_env("countdown:Countdown-v0", goal=3) is env
    assert suites.make_suite_env("countdown:Countdown-v0", goal=4) is not env
    assert built == [{"goal": 3}, {"goal": 4}]
    # two runs' programs (a jitted function each, as two train() calls make): one trace of the reset
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    for _ in range(2):
        jax.jit(lambda keys: jax.vmap(suites.make_suite_env("countdown:Countdown-v0", goal=3).reset)(keys)).lower(keys)
    assert env.traces["reset_env"] == 1


def test_suite_params_are_static_and_validated():
    assert SuiteParams(7).max_steps_in_episode == 7 and not jax.tree.leaves(SuiteParams(7))
    with pytest.raises(ValueError, match="max_steps_in_episode=-1 must be >= 0"):
        Countdown(max_steps_in_episode=-1)


def test_suite_ids_route_to_their_suite_and_others_do_not():
    suite, inner = suites.split_suite_id("brax:ant")
    assert suite.name == "brax" and inner == "ant"
    assert suites.split_suite_id("CartPole-v1") is None
    assert suites.split_suite_id("gymnasium:CartPole-v1") is None  # a host env's prefix, not a suite


def test_a_missing_suite_names_its_pip_line_and_kinetix_says_why_not(monkeypatch):
    missing = suites.Suite("ghost", "jaxrl_async.envs.suites.ghost", "no_such_package_here", "ghost")
    monkeypatch.setitem(suites.SUITES, "ghost", missing)
    with pytest.raises(ValueError, match=r"ghost suite is not installed .*pip install 'jaxrl_async\[ghost\]'"):
        suites.make_suite_env("ghost:Thing-v0")
    with pytest.raises(ValueError, match="every kinetix-env release pins jax<=0.9.0"):
        suites.make_suite_env("kinetix:anything")
    # POPGym Arcade installs only without its stable-gymnax dependency: its pip line says so
    assert suites.SUITES["popgym_arcade"].install.startswith("pip install --no-deps popgym-arcade==0.0.7 ")
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        suites.suite_env_ids("nope")


def test_env_kwargs_parse_json_values_and_reject_bad_pairs():
    assert parse_env_kwargs(("backend=mjx", "episode_length=500", "scale=0.5", "flag=true", "sizes=[1, 2]")) == {
        "backend": "mjx", "episode_length": 500, "scale": 0.5, "flag": True, "sizes": [1, 2]}
    assert parse_env_kwargs(()) == {}
    with pytest.raises(ValueError, match="write KEY=VALUE"):
        parse_env_kwargs(("backend",))
    with pytest.raises(ValueError, match="gives 'a' twice"):
        parse_env_kwargs(("a=1", "a=2"))
    with pytest.raises(ValueError, match="write KEY=VALUE"):
        TrainConfig(env_kwargs=("1x=2",))


def test_env_kwargs_survive_the_config_round_trip():
    import dataclasses
    import json

    config = TrainConfig(env="CartPole-v1", env_kwargs=("a=1",))
    again = TrainConfig.from_dict(json.loads(json.dumps(dataclasses.asdict(config))))
    assert again == config and again.env_kwargs == ("a=1",)


def test_env_kwargs_an_env_does_not_take_are_named():
    from jaxrl_async.envs import make_env

    with pytest.raises(ValueError, match=r"env 'CartPole-v1' does not take env_kwargs \{'sizes': 3\}"):
        make_env("CartPole-v1", sizes=3)


def test_envs_suite_lists_or_names_what_is_wrong(capsys):
    from jaxrl_async.cli.main import main

    assert main(["envs", "--suite", "nope"]) == 2
    assert "unknown suite 'nope'; choose one of brax" in capsys.readouterr().err
    assert main(["envs", "--suite"]) == 2
    assert "--suite takes one suite name" in capsys.readouterr().err
    assert main(["envs", "--suite", "kinetix"]) == 2
    assert "pins jax<=0.9.0" in capsys.readouterr().err
    assert main(["envs"]) == 0
    assert "JAX suites, as --env SUITE:ID" in capsys.readouterr().out


@pytest.mark.skipif(importlib.util.find_spec("brax") is None, reason="needs brax: pip install -e '.[brax]'")
def test_envs_suite_shows_each_preset_with_its_backend(capsys):
    from jaxrl_async.cli.main import main

    assert main(["envs", "--suite", "brax"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows["brax:ant"].split(None, 1)[1] == "preset ppo, 50,000,000 steps, backend=positional"
    assert rows["brax:hopper"].endswith("preset sac, 6,553,600 steps, backend=positional")
    assert rows["brax:reacher"] == "brax:reacher"  # no preset


def test_the_env_kwargs_flag_reaches_the_config():
    from jaxrl_async.cli.main import parse_train

    command = parse_train(["--env", "CartPole-v1", "--env-kwargs", "backend=mjx", "episode_length=500"])
    assert command.config.env_kwargs == ("backend=mjx", "episode_length=500")
