"""Tests for jaxrl_async.trainer.training: the run directory contract, determinism, chunking."""

import dataclasses
import functools
import json
import math
import re
import threading

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxrl_async.trainer import run_dir as run_dir_lib
from jaxrl_async.trainer import training
from jaxrl_async.algorithms import sweep_hparams
from jaxrl_async.config import ReplayConfig
from jaxrl_async.core.programs import over_seeds, seed_keys, warm_up
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.build import build, check_sweep, forget_builds, init_state, initial_states, run_iterations
from jaxrl_async.trainer.compile_thread import CompileThread
from jaxrl_async.trainer.fused import train_fused
from jaxrl_async.trainer.run import Run, check_finite, evaluation_program
from jaxrl_async.trainer.schedule import chunk_plan, sync_every
from jaxrl_async.trainer.sharding import Placement
from jaxrl_async.trainer.training import train

NUM_UPDATES = 30  # enough that 'auto' chunks by 2, not 1
HIGH_LR = 4e-3  # a learning rate the sweep test runs beside the config's

# The public contract of summary.json (more keys may follow; these must be there).
SUMMARY_CONTRACT = {"env_id", "algo", "num_seeds", "env_steps", "final_eval_return",
                    "final_eval_return_mean", "wall_s", "compile_s", "steps_per_second",
                    "params_digest"}


def _reject_nan(constant):
    raise ValueError(f"metrics.jsonl holds {constant}, which is not JSON")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line, parse_constant=_reject_nan) for line in f]


@pytest.fixture(scope="module")
def base_config(tiny_config):
    return tiny_config(total_timesteps=NUM_UPDATES * 32, iterations_per_call=1)


@pytest.fixture(scope="module")
def runs(base_config, tiny_config):
    """Every training run this module compares, each trained once, keyed by name."""
    variants = {
        "base": {},
        "again": {},
        "all": dict(iterations_per_call="all"),
        "auto": dict(iterations_per_call="auto"),
        "uneven": dict(iterations_per_call=7),
        "seed1": dict(seed=1),
        "two_seeds": dict(num_seeds=2),
        "two_seeds_high_lr": dict(num_seeds=2,
                                  learner=dataclasses.replace(base_config.learner, learning_rate=HIGH_LR)),
        "sweep": dict(num_seeds=2),  # seed 0 at the config's learning rate, seed 1 at HIGH_LR
    }
    sweep, _ = sweep_hparams(base_config.learner, 1, learning_rate=[base_config.learner.learning_rate, HIGH_LR])
    results = {}
    for name, changes in variants.items():
        cfg = dataclasses.replace(base_config, run_dir=tiny_config().run_dir, **changes)
        results[name] = train(cfg, console=False, hparams=sweep if name == "sweep" else None)
    return results


def test_summary_json_contract(runs, base_config):
    result = runs["base"]
    summary = run_dir_lib.read_json(f"{result.run_dir}/summary.json")
    assert SUMMARY_CONTRACT <= set(summary)
    assert summary["env_id"] == "CartPole-v1" and summary["algo"] == "ppo"
    assert summary["num_seeds"] == 1
    assert summary["env_steps"] == base_config.env_steps == NUM_UPDATES * 32
    assert isinstance(summary["final_eval_return"], list) and len(summary["final_eval_return"]) == 1
    assert summary["final_eval_return_mean"] == summary["final_eval_return"][0]
    assert summary["wall_s"] >= summary["compile_s"] > 0
    assert summary["steps_per_second"] > 0
    assert len(summary["params_digest"]) == 1
    assert re.fullmatch(r"[0-9a-f]{64}", summary["params_digest"][0])
    # the digest is of the params the run returns
    params = jax.tree.map(lambda x: x[0], result.state.learner.params)
    assert summary["params_digest"][0] == run_dir_lib.params_digest(params)
    assert summary == json.loads(json.dumps(result.summary))


def test_two_seed_summary_lists_one_entry_per_seed(runs):
    summary = run_dir_lib.read_json(f"{runs['two_seeds'].run_dir}/summary.json")
    assert summary["num_seeds"] == 2
    assert len(summary["final_eval_return"]) == 2
    np.testing.assert_allclose(summary["final_eval_return_mean"], np.mean(summary["final_eval_return"]))
    assert len(summary["params_digest"]) == 2
    assert summary["params_digest"][0] != summary["params_digest"][1]


def test_config_json_round_trips(runs, base_config):
    saved = run_dir_lib.read_json(f"{runs['base'].run_dir}/config.json")
    assert TrainConfig.from_dict(saved) == dataclasses.replace(base_config, run_dir=runs["base"].run_dir)


@pytest.mark.parametrize("name, num_lines", [("base", NUM_UPDATES), ("all", 1),
                                              ("auto", 16),  # 1 + 1 + 14 x 2
                                              ("uneven", 5), ("two_seeds", NUM_UPDATES)])
def test_metrics_jsonl_has_one_valid_line_per_host_sync(runs, name, num_lines):
    lines = read_jsonl(f"{runs[name].run_dir}/metrics.jsonl")
    assert len(lines) == num_lines
    assert lines[-1]["iteration"] == NUM_UPDATES
    assert lines[-1]["env_steps"] == NUM_UPDATES * 32
    assert [line["iteration"] for line in lines] == sorted({line["iteration"] for line in lines})
    for line in lines:
        for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm",
                    "learning_rate", "steps_per_second"):
            assert isinstance(line[key], float) and math.isfinite(line[key]), key


def test_same_seed_gives_identical_params(runs):
    assert runs["base"].summary["params_digest"] == runs["again"].summary["params_digest"]


def test_different_seed_gives_different_params(runs):
    assert runs["base"].summary["params_digest"] != runs["seed1"].summary["params_digest"]


@pytest.mark.parametrize("name", ["all", "auto", "uneven"])
def test_chunking_does_not_change_the_maths(runs, name):
    assert runs[name].summary["params_digest"] == runs["base"].summary["params_digest"]
    assert runs[name].summary["final_eval_return"] == runs["base"].summary["final_eval_return"]


def test_seed_index_does_not_depend_on_num_seeds(runs):
    """Seed index 0 of a 2-seed run trains the same agent as the 1-seed run.

    Not bit-identical on XLA:CPU: under vmap the matmuls become batched dots with a
    different summation order, so parameters differ by ~1e-8 after 30 updates (the
    sampled actions, hence the data, are the same). The single-seed run squeezes the
    seed axis rather than vmapping, which is why the two programs differ at all.
    """
    one = jax.tree.map(lambda x: np.asarray(x[0]), runs["base"].state.learner.params)
    two = jax.tree.map(lambda x: np.asarray(x[0]), runs["two_seeds"].state.learner.params)
    chex.assert_trees_all_close(one, two, rtol=1e-5, atol=1e-6)
    other = jax.tree.map(lambda x: np.asarray(x[1]), runs["two_seeds"].state.learner.params)
    assert not np.allclose(jax.tree.leaves(one)[-1], jax.tree.leaves(other)[-1], atol=1e-3)
    assert runs["two_seeds"].summary["final_eval_return"][0] == runs["base"].summary["final_eval_return"][0]


def test_a_vmapped_sweep_trains_each_seed_at_its_own_learning_rate(runs):
    """A sweep's seed i equals seed i of a plain run at that seed's learning rate, bit for bit
    (the same vmapped program: the learning rate is an array in the state either way)."""
    def seed(name, i):
        return jax.tree.map(lambda x: np.asarray(x[i]), runs[name].state.learner.params)

    chex.assert_trees_all_equal(seed("sweep", 0), seed("two_seeds", 0))
    chex.assert_trees_all_equal(seed("sweep", 1), seed("two_seeds_high_lr", 1))
    # and the learning rate did change seed 1's training
    assert not np.allclose(jax.tree.leaves(seed("sweep", 1))[-1], jax.tree.leaves(seed("two_seeds", 1))[-1],
                           atol=1e-4)
    assert runs["sweep"].summary["params_digest"][1] == runs["two_seeds_high_lr"].summary["params_digest"][1]


def test_sweep_hparams_lays_out_the_grid_point_by_point():
    from jaxrl_async.config import LearnerConfig

    hparams, points = sweep_hparams(LearnerConfig(vf_coef=0.25), 2, learning_rate=[1e-3, 1e-4], ent_coef=[0.0, 0.1])
    assert points == [dict(learning_rate=1e-3, ent_coef=0.0), dict(learning_rate=1e-3, ent_coef=0.1),
                      dict(learning_rate=1e-4, ent_coef=0.0), dict(learning_rate=1e-4, ent_coef=0.1)]
    np.testing.assert_allclose(hparams.learning_rate, [1e-3] * 4 + [1e-4] * 4)
    np.testing.assert_allclose(hparams.ent_coef, [0.0, 0.0, 0.1, 0.1] * 2)
    np.testing.assert_allclose(hparams.vf_coef, [0.25] * 8)  # the fields not swept keep the config's value
    with pytest.raises(ValueError, match=r"cannot sweep \['num_minibatches'\]"):
        sweep_hparams(LearnerConfig(), 2, num_minibatches=[2, 4])
    with pytest.raises(ValueError, match="at least one value"):
        sweep_hparams(LearnerConfig(), 2, learning_rate=[])
    # each point by the rules its flag has: a negative step size trained before
    with pytest.raises(ValueError, match=r"^sweep point \{'learning_rate': -0.001\} is invalid: learning_rate=-0.001 "
                                         r"is invalid: must be a finite number > 0$"):
        sweep_hparams(LearnerConfig(), 1, learning_rate=[-1e-3, 1e-3])
    hparams, _ = sweep_hparams(LearnerConfig(), 1, clip_eps=jnp.asarray([0.1, 0.2]))  # an array's elements
    np.testing.assert_allclose(hparams.clip_eps, [0.1, 0.2])


def test_sweep_of_the_wrong_size_is_a_clear_error(base_config):
    hparams, _ = sweep_hparams(base_config.learner, 3, learning_rate=[1e-3])
    with pytest.raises(ValueError, match=r"hparams.learning_rate has shape \(3,\).*\(2,\)"):
        train(dataclasses.replace(base_config, num_seeds=2, run_dir=None), console=False, hparams=hparams)
    with pytest.raises(ValueError, match="hparams must be a LearnerHyperparams"):
        train(dataclasses.replace(base_config, num_seeds=2, run_dir=None), console=False,
              hparams={"learning_rate": np.ones(2)})


@pytest.mark.parametrize("algo, field, reads", [
    ("a2c", "clip_eps", "learning_rate, ent_coef, vf_coef"), ("dqn", "ent_coef", "learning_rate"),
    ("ppo", "clip_eps", None),
])
def test_a_sweep_over_a_field_the_learner_does_not_read_is_refused(base_config, algo, field, reads):
    """A2C has no clip range, DQN no entropy bonus: a sweep over them would train every point alike."""
    cfg = dataclasses.replace(base_config, algo=algo, num_seeds=2, run_dir=None)
    hparams, _ = sweep_hparams(cfg.learner, 1, **{field: [0.1, 0.3]})
    if reads is None:
        check_sweep(build(cfg), hparams)
        return
    with pytest.raises(ValueError, match=rf"hparams.{field} varies over the seeds \(\[0.1.*, 0.3.*\]\), but "
                                         rf"algo='{algo}' does not read {field}: .* sweep {reads}$"):
        check_sweep(build(cfg), hparams)
    same, _ = sweep_hparams(cfg.learner, 2, learning_rate=[1e-3])  # the field at the config's value: fine
    check_sweep(build(cfg), same)


def test_a_mode_misspelt_from_python_is_refused(base_config):
    """The CLI's choices guard --mode; a Python caller's "fuse" would otherwise train asynchronously."""
    with pytest.raises(ValueError, match="mode='fuse' is invalid: choose fused or async"):
        dataclasses.replace(base_config, mode="fuse")


@pytest.mark.parametrize("fields, message", [
    ({"num_envs": 4.5}, "num_envs=4.5 is invalid: must be an integer"),  # was blamed on num_actors
    ({"num_envs": "4"}, "num_envs='4' is invalid: must be an integer"),  # was a TypeError naming no field
    ({"total_timesteps": True}, "total_timesteps=True is invalid: must be an integer"),
    ({"learning_rate": "fast"}, "learning_rate='fast' is invalid: must be a number"),
    ({"hidden_sizes": 64}, "hidden_sizes=64 is invalid: must be a tuple of integers"),
    ({"env_kwargs": {"foo": 1}}, "env_kwargs={'foo': 1} is invalid: must be a tuple of strings"),
    ({"eval_interval": 2.5}, "eval_interval=2.5 is invalid: must be an integer, or 'auto'"),
    ({"layer_norm": 1}, "layer_norm=1 is invalid: must be True or False"),  # a learner's own section
    ({"priority_exponent": None}, "priority_exponent=None is invalid: must be a number"),
    ({"run_dir": ""}, "run_dir='' is invalid: give a directory, or leave it unset for runs/<env>-<algo>-<time>"),
])
def test_a_value_of_the_wrong_kind_is_refused_naming_its_field(base_config, fields, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        base_config.with_fields(**fields)


def test_a_config_saved_with_a_value_now_refused_still_loads(base_config):
    """config.json of a run started from Python with preset='auto' (which trained the plain
    defaults), or with --run-dir '' (the default directory): it resumes and evaluates as before."""
    saved = {**base_config.to_dict(), "preset": "auto", "run_dir": ""}
    assert TrainConfig.from_dict(saved) == dataclasses.replace(base_config, preset="none", run_dir=None)


def test_a_budget_past_the_int32_update_count_is_refused(base_config):
    """1e20 steps ran out of memory laying out the schedule, with a traceback."""
    batch = base_config.batch_size
    with pytest.raises(ValueError, match=rf"total_timesteps=100000000000000000000 is invalid: must be under 2\*\*31 "
                                         rf"rollouts of num_envs\*num_steps={batch} env steps"):
        dataclasses.replace(base_config, total_timesteps=10**20)
    assert dataclasses.replace(base_config, total_timesteps=(2**31 - 1) * batch).num_updates == 2**31 - 1


def test_values_of_the_right_kind_pass_the_type_check(base_config):
    cfg = base_config.with_fields(learning_rate=1, hidden_sizes=[32, 32], num_envs=np.int64(8), gamma=np.float32(0.9))
    assert cfg.learner.learning_rate == 1 and cfg.network.hidden_sizes == [32, 32] and cfg.num_envs == 8


def test_an_env_object_or_an_unresolved_preset_is_refused_from_python(base_config):
    """Neither would train as asked: an env object is not an id (`register_env` gives it one), and
    a config holding preset='auto' trains with its other fields, not with the env's preset."""
    with pytest.raises(ValueError, match=r"env=<object .*> is invalid: must be an env id .*jaxrl_async.register_env"):
        dataclasses.replace(base_config, env=object())
    with pytest.raises(ValueError, match=r"preset='auto' is invalid: .*trainer\.presets\.config_for\(env\) applies"):
        dataclasses.replace(base_config, preset="auto")


def test_a_replay_run_that_ends_before_it_learns_says_so(base_config):
    dqn = dataclasses.replace(base_config, algo="dqn", num_envs=4, num_steps=8, total_timesteps=4096,
                              replay=ReplayConfig(learning_starts=5000))
    assert dqn.replay_note() == ("note: learning_starts=5000 is more than the run's 4096 env steps per seed: it "
                                 "fills the replay buffer and takes no gradient step; lower --learning-starts or "
                                 "raise --total-timesteps")
    assert dataclasses.replace(dqn, replay=ReplayConfig(learning_starts=4096)).replay_note() is None
    assert base_config.replay_note() is None  # PPO has no replay


def test_existing_run_dir_is_refused(runs, base_config):
    run_dir = runs["base"].run_dir
    with open(f"{run_dir}/metrics.jsonl", encoding="utf-8") as f:
        before = f.read()
    with pytest.raises(ValueError, match="already holds a run"):
        train(dataclasses.replace(base_config, run_dir=run_dir), console=False)
    with open(f"{run_dir}/metrics.jsonl", encoding="utf-8") as f:
        assert f.read() == before


# ----------------------------------------------------------------- chunking


@pytest.mark.parametrize("num_updates, per_call, plan", [
    (4, 1, [1, 1, 1, 1]),
    (4, "all", [4]),
    (10, 3, [3, 3, 3, 1]),
    (5, 10, [5]),
    (1, "auto", [1]),
    (7, "auto", [1] * 7),
    # 'auto': the first call is one iteration, so the first metrics line comes after one
    (30, "auto", [1, 1] + [2] * 14),
    (100, "auto", [1, 4] + [5] * 19),
    (97, "auto", [1, 4] + [5] * 18 + [2]),  # one short last call: the chunk length is not compiled in
    (1000, "auto", [1, 49] + [50] * 19),
    (5000, "auto", [1, 49] + [50] * 99),  # long runs: at most 50 iterations between host syncs
])
def test_chunk_plan(num_updates, per_call, plan):
    assert chunk_plan(num_updates, per_call) == plan


@given(num_updates=st.integers(1, 5000),
       per_call=st.one_of(st.integers(1, 300), st.sampled_from(["auto", "all"])))
def test_chunk_plan_covers_every_update(num_updates, per_call):
    plan = chunk_plan(num_updates, per_call)
    assert sum(plan) == num_updates
    assert all(k >= 1 for k in plan)
    if per_call == "auto":
        assert plan[0] == 1  # the first metrics line after one iteration
        # ... and the later syncs where every sync_every-th update puts them
        every = sync_every(num_updates, "auto")
        steady = chunk_plan(num_updates, every)
        assert set(np.cumsum(plan).tolist()) - {1} == set(np.cumsum(steady).tolist()) - {1}
        # about 20 host syncs, and never more than 50 iterations between two
        assert max(plan) <= 50
        assert len(plan) <= max(20, math.ceil(num_updates / 50)) + 2
        assert len(plan) >= min(num_updates, 10)
    else:
        # explicit counts and 'all': every call that count, the last one the rest
        assert len(set(plan)) <= 2 and plan[-1] <= plan[0]
        assert all(k == plan[0] for k in plan[:-1])


# ----------------------------------------------------------------- divergence


def test_check_finite():
    check_finite({"loss": np.array([1.0, 2.0]), "episode_return_sum": np.array([np.nan, 1.0])}, 3)
    for name in ("loss", "grad_norm", "policy_loss", "value_loss"):
        with pytest.raises(FloatingPointError, match=rf"{name} became NaN or infinite at the updates up to 7"):
            check_finite({name: np.array([0.5, np.nan])}, 7)
    with pytest.raises(FloatingPointError, match="at update 5; the last good checkpoint is ck/update_4"):
        check_finite({"loss": np.float32(np.inf)}, 8, first_bad=4, last_good="ck/update_4")
    with pytest.raises(FloatingPointError, match="the params became NaN"):
        check_finite({"loss": np.float32(1.0), "params_finite": np.array([True, False])}, 8)
    check_finite({"loss": np.float32(1.0), "params_finite": np.array([True, True])}, 8)


def test_diverging_run_raises_floating_point_error(tiny_config):
    # a step size of 1e30 sends the params to ~1e30 and the value loss to inf after one step
    cfg = tiny_config(iterations_per_call=1, learner=dict(learning_rate=1e30))
    with pytest.raises(FloatingPointError, match="diverged"):
        train(cfg, console=False)
    lines = read_jsonl(f"{cfg.run_dir}/metrics.jsonl")
    assert len(lines) == 0  # the poisoned window is not logged


def test_warm_up_runs_the_program_on_copies_and_leaves_donated_arguments_intact():
    calls = []

    def double(x):
        calls.append(None)  # traced once, at lowering
        return x * 2

    x = jax.numpy.arange(4.0)
    compiled = jax.jit(double, donate_argnums=0).lower(x).compile()
    warm_up(compiled, x)
    assert not x.is_deleted(), "warm_up donated the caller's buffer"
    np.testing.assert_array_equal(np.asarray(x), [0.0, 1.0, 2.0, 3.0])
    # the real call still donates as compiled
    np.testing.assert_array_equal(np.asarray(compiled(x)), [0.0, 2.0, 4.0, 6.0])
    assert x.is_deleted() and len(calls) == 1


# -- a config's programs, built once per process (build.py) --------------------------------------

COMPILE_PHASES = tuple(f"{prefix}_{phase}_s" for prefix in ("compile", "eval_compile") for phase in ("trace", "lower", "xla"))


@pytest.mark.parametrize("mode", ["fused", "async"])
def test_a_second_run_of_a_config_reuses_its_programs_and_trains_as_a_fresh_build(tiny_config, mode):
    """Another seed and run directory, the same programs: the second run traces, lowers and compiles
    nothing, and trains what a run of that seed from a fresh build trains (the seed is no constant
    of the kept programs)."""
    forget_builds()
    cfg = tiny_config(mode=mode, total_timesteps=4 * 8 * 3)
    first = train(cfg, console=False).summary
    second = train(dataclasses.replace(cfg, seed=1, run_dir=tiny_config().run_dir), console=False).summary
    assert first["compile_xla_s"] > 0 and first["compile_trace_s"] > 0
    assert {key: second[key] for key in COMPILE_PHASES} == dict.fromkeys(COMPILE_PHASES, 0.0)
    forget_builds()
    fresh = train(dataclasses.replace(cfg, seed=1, run_dir=tiny_config().run_dir), console=False).summary
    assert fresh["compile_trace_s"] > 0
    assert second["params_digest"] == fresh["params_digest"] != first["params_digest"]
    assert second["final_eval_return"] == fresh["final_eval_return"]


def test_kept_programs_serve_only_the_pieces_they_were_made_from(tiny_config):
    cfg = tiny_config(total_timesteps=4 * 8 * 5)
    c = build(cfg)
    made = []

    def make():
        made.append(None)
        number = len(made)
        return lambda: number

    # another seed, run directory, schedule or pipeline policy: fields no program sees
    host_side = dict(seed=3, run_dir=None, eval_interval=1, checkpoint_interval=2, iterations_per_call=2,
                     keep_checkpoints=1, eval_stochastic=True, mode=cfg.mode)
    assert build(dataclasses.replace(cfg, **host_side)).program("p", make) is c.program("p", make)
    assert len(made) == 1
    # a piece replaced, or a config the programs see changed: made anew, and the kept one stays
    replaced = c._replace(algo=c.algo._replace(update=lambda learner, trajectory: (learner, {})))
    other_config = c._replace(cfg=dataclasses.replace(cfg, num_seeds=2))
    assert replaced.program("p", make) is not c.program("p", make)
    assert other_config.program("p", make) is not c.program("p", make)
    assert len(made) == 3 and c.program("p", make)() == 1
    # a host env's envs are live simulators: every build makes its own
    host = TrainConfig(env="gymnasium:CartPole-v1", mode="async", num_envs=2, num_steps=4)
    assert build(host).env is not build(host).env


def test_one_evaluation_program_serves_greedy_and_sampling_and_agrees_with_each_alone(tiny_config):
    """With eval_stochastic the evaluation takes `greedy` as an argument: one program, whose two
    evaluations are those of the greedy-only and sampling-only programs (CartPole's actions are
    integers, so equal actions give equal episodes to the bit)."""
    cfg = tiny_config(eval_stochastic=True, num_seeds=2, eval_episodes=4)
    c = build(cfg)
    state = initial_states(c)
    args = (state.learner.params, state.rollout.obs_stats, np.asarray(seed_keys(cfg.seed, cfg.num_seeds)),
            jax.numpy.uint32(5))
    both = evaluation_program(c)
    apart = evaluation_program(c._replace(cfg=dataclasses.replace(cfg, eval_stochastic=False)))
    assert both is not apart
    for greedy in (True, False):
        one, alone = both(*args, greedy=greedy), apart(*args, greedy=greedy)
        chex.assert_trees_all_equal(one, alone)
    assert both._cache_size() == 1 and apart._cache_size() == 2
    greedy_run, sampling_run = both(*args, greedy=True), both(*args, greedy=False)
    assert not np.array_equal(np.asarray(greedy_run.lengths), np.asarray(sampling_run.lengths))


# -- what compiles, said as it happens (run.Run.compiling) -----------------------------------------

COMPILE_LINE = re.compile(r"compiled (the training loop|the evaluation) in \d+\.\d s")


def test_every_compile_is_named_with_its_seconds_on_the_console_and_in_the_metrics(runs, base_config, tiny_config,
                                                                                    capsys, monkeypatch):
    """The console names each program as its compile starts and, with its seconds, as it ends; the
    metrics lines carry the same in a field (`compiled`), not in lines of their own. On a host
    without cores to spare the evaluation's compile starts after the first metrics line."""
    lines = read_jsonl(f"{runs['base'].run_dir}/metrics.jsonl")
    compiled = [entry for line in lines for entry in line.get("compiled", [])]
    assert sorted(entry["program"] for entry in compiled) == ["the evaluation", "the training loop"]
    assert all(entry["seconds"] > 0 for entry in compiled)
    assert "the training loop" in [entry["program"] for entry in lines[0]["compiled"]]  # at the first line
    capsys.readouterr()
    monkeypatch.setattr(training, "cores_to_spare", lambda: False)
    # its programs kept: quick; the first metrics line evaluates nothing (only the final sync does)
    train(dataclasses.replace(base_config, run_dir=tiny_config().run_dir, eval_interval=0), console=True)
    out = capsys.readouterr().out.splitlines()
    ends = {}
    for program in ("the training loop", "the evaluation"):
        start = out.index(f"compiling {program}...")
        ends[program] = [i for i, line in enumerate(out) if COMPILE_LINE.fullmatch(line) and program in line]
        assert len(ends[program]) == 1 and ends[program][0] > start, out
    assert out.index("compiling the evaluation...") > ends["the training loop"][0], out
    first_line = next(i for i, line in enumerate(out) if line.startswith("["))  # the iterations up to it
    assert out.index("compiling the evaluation...") > first_line, out  # have the cores alone


def test_a_compile_thread_runs_when_started_or_waited_for_and_raises_its_error_in_the_waiter():
    ran = []
    deferred = CompileThread(lambda: ran.append(threading.current_thread().name), name="deferred")
    deferred.close()  # never started: nothing to wait for, nothing run
    assert ran == []
    deferred.wait()  # starts it, as an evaluation before the first sync does
    assert ran == ["deferred"]

    def fails():
        raise ValueError("the evaluation's compile failed")

    failing = CompileThread(fails, name="failing")
    failing.start()
    with pytest.raises(ValueError, match="compile failed"):
        failing.wait()


def test_the_loop_trains_while_the_evaluation_compiles(base_config, tiny_config):
    """The loop's first iterations need not wait for the evaluation's compile: here it cannot end
    until the first metrics line is written, which it would wait for forever if the loop waited."""
    cfg = dataclasses.replace(base_config, run_dir=tiny_config().run_dir)
    c = build(cfg)
    first_line = threading.Event()

    class FirstLine:
        def write(self, record):
            first_line.set()

        def close(self):
            pass

    program = evaluation_program(c)

    def evaluation(*args, **kwargs):
        assert first_line.wait(timeout=60), "the loop waited for the evaluation's compile"
        return program(*args, **kwargs)

    state = initial_states(c)
    with Run.create(cfg, evaluation, Placement(cfg.devices, cfg.num_seeds, cfg.num_envs), console=False,
                    extra_sinks=(FirstLine(),)) as run:
        run.start_compiling_evaluation(state)
        state, timing = train_fused(c, run, state)
    assert timing["updates_done"] == cfg.num_updates and run.last_eval is not None
