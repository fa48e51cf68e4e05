"""The benchmark cases. Each returns {key: measurement dict}; keys are stable across runs
so `--compare` can match them."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import tempfile

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.core.advantages import batched_gae, batched_vtrace
from jaxrl_async.cli.bench.configs import DQN_CARTPOLE, LARGE, REFERENCE
from jaxrl_async.cli.bench.hlo_ops import count_ops
from jaxrl_async.cli.bench.measure import Timing, time_jitted
from jaxrl_async.cli.bench.processes import processes
from jaxrl_async.cli.bench.suites import suites
from jaxrl_async.cli.bench.step_costs import bootstrap_cost, gradient_step_cost, host_step_cost, host_sync_cost
from jaxrl_async.trainer.build import build, forget_builds, init_state, initial_states
from jaxrl_async.config import LearnerConfig
from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.trainer.fused import fused_program
from jaxrl_async.trainer.sinks import METRICS_FILE
from jaxrl_async.trainer.schedule import Schedule, sync_every
from jaxrl_async.speed import BACKEND_DEFAULTS

ENV_COUNTS = (1, 16, 256, 4096)
ROLLOUT_ENVS = ("CartPole-v1", "Breakout-MinAtar")
STEPS_PER_CALL = 1 << 16  # environment steps per timed call (fewer in quick mode)


def _steps(num_envs: int, quick: bool) -> int:
    """Rollout length giving about STEPS_PER_CALL env steps per call, at least 16 and at most 4096."""
    budget = STEPS_PER_CALL // (16 if quick else 1)
    return int(min(4096, max(16, budget // num_envs)))


def _env_counts(quick: bool) -> tuple[int, ...]:
    return (16,) if quick else ENV_COUNTS


def env_step(quick: bool, repeats: int) -> dict:
    """Raw gymnax env throughput, random actions, T steps of B vmapped envs in one jit."""
    results = {}
    for env_id in ROLLOUT_ENVS:
        env, params = gymnax.make(env_id)
        for num_envs in _env_counts(quick):
            num_steps = _steps(num_envs, quick)

            def run(state, key, num_steps=num_steps, num_envs=num_envs, env=env, params=params):
                def body(carry, _):
                    state, key = carry
                    key, act_key, step_key = jax.random.split(key, 3)
                    actions = jax.vmap(env.action_space(params).sample)(jax.random.split(act_key, num_envs))
                    _, state, reward, *_ = jax.vmap(env.step, (0, 0, 0, None))(
                        jax.random.split(step_key, num_envs), state, actions, params)
                    return (state, key), reward.sum()
                return jax.lax.scan(body, (state, key), None, num_steps)

            _, state = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.PRNGKey(0), num_envs), params)
            timing = time_jitted(run, state, jax.random.PRNGKey(1), repeats=repeats)
            results[f"env_step/{env_id}/envs={num_envs}"] = timing.as_dict(num_envs * num_steps)
    return results


def rollout(quick: bool, repeats: int, env_results: dict | None = None) -> dict:
    """Our jitted rollout (act + env step + record + GAE) for the same env counts."""
    results = {}
    for env_id in ROLLOUT_ENVS:
        for num_envs in _env_counts(quick):
            num_steps = _steps(num_envs, quick)
            c = build(TrainConfig(env=env_id, num_envs=num_envs, num_steps=num_steps,
                                  total_timesteps=num_envs * num_steps))
            state = jax.jit(functools.partial(init_state, c))(jax.random.PRNGKey(0))
            timing = time_jitted(c.rollout.collect, state.learner.params, state.rollout, repeats=repeats)
            row = timing.as_dict(num_envs * num_steps)
            raw = (env_results or {}).get(f"env_step/{env_id}/envs={num_envs}")
            if raw:
                row["ratio_to_raw_env"] = row["steps_per_second"]["median"] / raw["steps_per_second"]["median"]
            results[f"rollout/{env_id}/envs={num_envs}"] = row
    return results


def advantages(quick: bool, repeats: int) -> dict:
    """GAE and V-trace alone on [T, B] = [128, 1024]."""
    shape = (128, 1024)
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    r, v_tm1, v_t = (jax.random.normal(k, shape) for k in keys[:3])
    discount = 0.99 * (jax.random.uniform(keys[3], shape) > 0.01)
    rho = jnp.exp(0.1 * jax.random.normal(keys[4], shape))
    gae = time_jitted(lambda *a: batched_gae(*a), r, discount, v_tm1, v_t, jnp.float32(0.95), repeats=repeats)
    vtrace = time_jitted(lambda *a: batched_vtrace(*a), v_tm1, v_t, r, discount, rho, repeats=repeats)
    n = shape[0] * shape[1]
    return {"advantages/gae/128x1024": gae.as_dict(n, "transitions_per_second"),
            "advantages/vtrace/128x1024": vtrace.as_dict(n, "transitions_per_second")}


def update(quick: bool, repeats: int) -> dict:
    """The PPO update alone on the reference config (4 envs x 128 steps, 4 epochs x 4 minibatches)."""
    c = build(TrainConfig())
    state = jax.jit(functools.partial(init_state, c))(jax.random.PRNGKey(0))
    _, trajectory = jax.jit(c.rollout.collect)(state.learner.params, state.rollout)
    timing = time_jitted(lambda learner, traj: c.algo.update(learner, traj)[0], state.learner, trajectory,
                         repeats=repeats * 4)
    row = timing.as_dict(c.cfg.batch_size, "samples_per_second")
    row["updates_per_second"] = 1.0 / timing.median
    return {"update/ppo/CartPole-v1/4x128": row}


def gae_placement(quick: bool, repeats: int) -> dict:
    """Where GAE belongs: its cost beside the rollout (which computes it today, on the actor's side
    in the async mode) and the update (whose critical path it would join if the learner's batch
    function computed it). The fused mode runs both in one program either way."""
    results = {}
    for num_envs in (4,) if quick else (4, 64):
        c = build(TrainConfig(num_envs=num_envs, num_steps=128, total_timesteps=num_envs * 128))
        state = jax.jit(functools.partial(init_state, c))(jax.random.PRNGKey(0))
        _, trajectory = jax.jit(c.rollout.collect)(state.learner.params, state.rollout)
        gae = time_jitted(lambda t: batched_gae(t.reward, 0.99 * (1.0 - t.terminated), t.value,
                                                t.bootstrap_value, 0.95 * (1.0 - t.truncated)),
                          trajectory, repeats=repeats * 4)
        collect = time_jitted(c.rollout.collect, state.learner.params, state.rollout, repeats=repeats * 4)
        learn = time_jitted(lambda learner, traj: c.algo.update(learner, traj)[0], state.learner, trajectory,
                            repeats=repeats * 4)
        results[f"gae_placement/CartPole-v1/{num_envs}x128"] = {
            "gae_ms": 1e3 * gae.median, "collect_ms": 1e3 * collect.median, "update_ms": 1e3 * learn.median,
            "gae_share_of_collect": gae.median / collect.median,
            "gae_share_of_update": gae.median / learn.median}
    return results


# End to end: through train(), as a user runs it. Variants are run round-robin so that
# drift in the machine's speed hits each of them alike.
def _timed_run(cfg: TrainConfig, tmp: str, **changes) -> tuple[dict, list[float]]:
    """One benchmark run through train(): its summary and the steps/s of each host-sync window.

    It trains half the config's budget, chunked exactly as the whole run would be (the same
    iterations per host sync), so the steady-state steps/s are the full run's at half the
    cost; evaluation and checkpoints only at the end, as in the peers' benchmark runs. The
    windows after the first are the repeats of the measurement (the program is warmed up at
    compile time, but the first window still starts on cold caches after compiling).
    """
    from jaxrl_async.trainer.training import train

    per_call = sync_every(cfg.num_updates, cfg.iterations_per_call)
    half = max(cfg.batch_size, (cfg.num_updates // 2) * cfg.batch_size)
    cfg = dataclasses.replace(cfg, total_timesteps=half, iterations_per_call=per_call, eval_interval=0,
                              checkpoint_interval=0, run_dir=os.path.join(tmp, str(len(os.listdir(tmp)))),
                              **changes)
    forget_builds()  # each round compiles anew: its compile_s is a cold compile's, as the first round's
    summary = train(cfg, console=False).summary
    with open(os.path.join(cfg.run_dir, METRICS_FILE), encoding="utf-8") as f:
        windows = [json.loads(line)["steps_per_second"] for line in f]
    return summary, windows[1:] or windows


def _train_rows(variants: dict[str, TrainConfig], rounds: int, fields: tuple[str, ...], **changes) -> dict:
    """Train every variant `rounds` times, round-robin (drift in the machine's speed hits each
    alike); a row per variant: steps/s median and min..max over the windows of its runs, the
    runs' own steps/s, compile time, and the median of each summary field in `fields`."""
    runs: dict[str, list] = {key: [] for key in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for key, cfg in variants.items():
                runs[key].append(_timed_run(cfg, tmp, **changes))
    results = {}
    for key, measured in runs.items():
        summaries = [summary for summary, _ in measured]
        windows = [rate for _, rates in measured for rate in rates]
        row = {"steps_per_second": {"median": float(np.median(windows)), "min": min(windows), "max": max(windows)},
               "run_steps_per_second": [s["steps_per_second"] for s in summaries],
               "compile_s": float(np.median([s["compile_s"] for s in summaries])),
               "repeats": len(windows)}
        for field in fields:
            if field in summaries[0]:
                first = summaries[0][field]  # labels and counts are the same in every run
                row[field] = first if isinstance(first, (str, int)) else float(np.median([s[field] for s in summaries]))
        results[key] = row
    return results


def _rounds(quick: bool, repeats: int) -> int:
    # each run already repeats its measurement once per host-sync window (about 10 here), so the
    # default repeats (5) train each variant once; more repeats add whole rounds
    return 1 if quick else max(1, repeats // 5)


def _e2e_variants(quick: bool) -> dict[str, TrainConfig]:
    """The reference config (1 and 8 seeds, every mode) and a larger one; quick: a tiny budget."""
    configs = (("4x128", {**REFERENCE, "total_timesteps": 40 * 512}),) if quick else \
        (("4x128", REFERENCE), ("256x32", LARGE))
    variants = {}
    for label, base in configs:
        variants[f"e2e/{label}/fused/seeds=1"] = TrainConfig(**base)
        if label == "4x128":
            num_seeds = 2 if quick else 8
            variants[f"e2e/{label}/fused/seeds={num_seeds}"] = TrainConfig(**base, num_seeds=num_seeds)
        for lag in ("0", "1", "latest"):
            variants[f"e2e/{label}/async-lag{lag}/seeds=1"] = TrainConfig(**base, mode="async", lag=lag)
        if len(jax.devices("cpu")) >= 2:  # the actor on a core of its own (`jaxrl-async bench` makes cores devices)
            variants[f"e2e/{label}/async-lag1-actor-cpu/seeds=1"] = TrainConfig(
                **base, mode="async", lag="1", actor_device="cpu", devices=1)
    if not quick:  # a replay learner: fused against the async actor one version behind (issue #16)
        variants["e2e/dqn-8x32/fused/seeds=1"] = DQN_CARTPOLE
        variants["e2e/dqn-8x32/async-lag1/seeds=1"] = DQN_CARTPOLE.with_fields(mode="async", lag="1")
    return variants


def end_to_end(quick: bool, repeats: int) -> dict:
    results = _train_rows(_e2e_variants(quick), _rounds(quick, repeats),
                          ("final_eval_return_mean", "overlap_efficiency", "learner_wait_fraction", "policy_lag_mean",
                           "gradient_steps_per_second"))
    for key, row in results.items():
        if "/async-" in key:
            fused = results[key.split("/async-")[0] + "/fused/seeds=1"]
            row["ratio_to_fused"] = row["steps_per_second"]["median"] / fused["steps_per_second"]["median"]
    return results


def _pqn_and_ppo(pqn: TrainConfig, budget: int) -> tuple[TrainConfig, TrainConfig]:
    """PQN's config and PPO's at the same rollout and minibatch shape and network widths, `budget` steps."""
    pqn = dataclasses.replace(pqn, total_timesteps=budget, devices=1)
    ppo = TrainConfig(env=pqn.env, num_envs=pqn.num_envs, num_steps=pqn.num_steps, total_timesteps=budget, devices=1,
                      network=pqn.network, learner=dataclasses.replace(
                          LearnerConfig(), update_epochs=pqn.learner.update_epochs,
                          num_minibatches=pqn.learner.num_minibatches))
    return pqn, ppo


def pqn_vs_ppo(quick: bool, repeats: int) -> dict:
    """PQN's fused iteration against PPO's at the same shape (issue #35: PQN's steps/s >= PPO's):
    PQN's CartPole-v1 preset (16 envs x 128 steps, 5 epochs x 16 minibatches, 64x64) and, unless
    quick, its Breakout-MinAtar preset, each beside PPO with the same envs, steps, epochs,
    minibatches and hidden widths; trained round-robin in one run, `ratio_to_ppo` in PQN's row."""
    from jaxrl_async.trainer import presets

    envs = ("CartPole-v1",) if quick else ("CartPole-v1", "Breakout-MinAtar")
    variants = {}
    for env_id in envs:
        pqn = presets.config_for(env_id, algo="pqn")
        budget = 8 * pqn.batch_size if quick else pqn.total_timesteps
        label = f"pqn_vs_ppo/{env_id}/{pqn.num_envs}x{pqn.num_steps}"
        variants[f"{label}/pqn"], variants[f"{label}/ppo"] = _pqn_and_ppo(pqn, budget)
    results = _train_rows(variants, _rounds(quick, repeats), ("final_eval_return_mean",), eval_episodes=4)
    for key, row in results.items():
        if key.endswith("/pqn"):
            ppo = results[key[: -len("pqn")] + "ppo"]
            row["ratio_to_ppo"] = row["steps_per_second"]["median"] / ppo["steps_per_second"]["median"]
    return results


def devices(quick: bool, repeats: int) -> dict:
    """Aggregate steps/s of 1, 2, 4, 8 seeds: vmapped on one device vs sharded over every device."""
    seed_counts = (1, 2) if quick else (1, 2, 4, 8)
    budget = 40 * 512 if quick else REFERENCE["total_timesteps"]
    # one seed under 'all' runs on one device by design (sharding.py): that row would repeat one-device's
    variants = {f"devices/4x128/seeds={s}/{label}": TrainConfig(**{**REFERENCE, "total_timesteps": budget},
                                                                num_seeds=s, devices=d)
                for s in seed_counts for label, d in (("one-device", 1), ("all-devices", "all"))
                if not (s == 1 and d == "all")}
    # eval_episodes=1: the return is not reported here
    results = _train_rows(variants, _rounds(quick, repeats), ("devices", "sharding"), eval_episodes=1)
    for key, row in results.items():
        if key.endswith("all-devices"):
            one = results[key.replace("all-devices", "one-device")]
            row["ratio_to_one_device"] = row["steps_per_second"]["median"] / one["steps_per_second"]["median"]
    return results


EVAL_COST_FIELDS = ("train_s", "eval_s", "eval_compile_s", "checkpoint_s", "checkpoint_encode_s",
                    "checkpoint_write_s", "eval_checkpoint_s", "compile_s", "wall_s")


def eval_cost(quick: bool, repeats: int) -> dict:
    """What evaluation and checkpoints at their default settings add to training: the reference
    config trained as a user runs it (defaults: about 10 evaluations, a checkpoint at each),
    `eval_checkpoint_pct` = 100 * eval_checkpoint_s / train_s (issue #14 asks for <= 10), with
    the split (summary.json's keys) and the run's rate end to end, env steps / (wall - compile)."""
    from jaxrl_async.trainer.training import train

    cfg = TrainConfig(**{**REFERENCE, "total_timesteps": 40 * 512} if quick else REFERENCE)
    schedule = Schedule.from_config(cfg)
    summaries = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(_rounds(quick, repeats)):
            forget_builds()  # every round's compile_s a cold compile's
            summaries.append(train(dataclasses.replace(cfg, run_dir=os.path.join(tmp, str(i))), console=False).summary)
    row = {field: float(np.median([s[field] for s in summaries])) for field in EVAL_COST_FIELDS}
    pcts = [100 * s["eval_checkpoint_s"] / s["train_s"] for s in summaries]
    wall_rates = [s["env_steps"] / (s["wall_s"] - s["compile_s"]) for s in summaries]
    row.update(eval_checkpoint_pct={"median": float(np.median(pcts)), "min": min(pcts), "max": max(pcts)},
               train_steps_per_second=float(np.median([s["steps_per_second"] for s in summaries])),
               wall_minus_compile_steps_per_second=float(np.median(wall_rates)),
               evaluations=sum(map(schedule.is_eval_point, schedule.sync_points)),
               checkpoints=sum(map(schedule.is_checkpoint_point, schedule.sync_points)), repeats=len(summaries))
    return {"eval_cost/4x128/fused/defaults": row}


VIDEO_COST_FIELDS = ("video_s", "video_draw_s", "video_compile_s", "eval_checkpoint_s", "train_s", "wall_s",
                     "compile_s")


def video_cost(quick: bool, repeats: int) -> dict:
    """What evaluation videos cost training (issue #60 asks that steady-state steps/s with them on
    stay within 5% of those with them off): the reference config as a user runs it (about 10 evaluations), without videos and with one
    at every evaluation (`--video-interval 1`), round-robin. Per variant: `steps_per_second` (the
    training loop's, summary.json's) over the rounds, env steps / (wall - compile) (the host syncs,
    the recordings and the wait for the last video included) and the videos' own seconds; the `on`
    row carries each rate's ratio to `off`."""
    from jaxrl_async.trainer.training import train

    cfg = TrainConfig(**{**REFERENCE, "total_timesteps": 40 * 512} if quick else REFERENCE)
    # quick: a smoke run of the path, so a few frames a video
    variants = {"off": cfg, "every-eval": dataclasses.replace(cfg, video_interval=1,
                                                              video_max_frames=16 if quick else cfg.video_max_frames)}
    summaries: dict[str, list] = {name: [] for name in variants}
    rounds = 1 if quick else max(3, repeats // 5)  # a ratio of two noisy rates: a few rounds
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for name, variant in variants.items():
                run_dir = os.path.join(tmp, f"{name}-{i}")
                summaries[name].append(train(dataclasses.replace(variant, run_dir=run_dir), console=False).summary)
    rows = {}
    for name, runs in summaries.items():
        rates = [s["steps_per_second"] for s in runs]
        walls = [s["env_steps"] / (s["wall_s"] - s["compile_s"]) for s in runs]
        rows[name] = {"steps_per_second": {"median": float(np.median(rates)), "min": min(rates), "max": max(rates)},
                      "wall_minus_compile_steps_per_second": float(np.median(walls)), "repeats": len(runs),
                      **{field: float(np.median([s.get(field, 0.0) for s in runs])) for field in VIDEO_COST_FIELDS}}
    on, off = rows["every-eval"], rows["off"]
    on["ratio_to_off"] = on["steps_per_second"]["median"] / off["steps_per_second"]["median"]
    on["wall_ratio_to_off"] = on["wall_minus_compile_steps_per_second"] / off["wall_minus_compile_steps_per_second"]
    return {f"video_cost/4x128/fused/{name}": row for name, row in rows.items()}


_CACHE_PROBE = """
import json, sys, jax
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
from jaxrl_async import TrainConfig, train
s = train(TrainConfig(total_timesteps=int(sys.argv[3]), run_dir=sys.argv[2], eval_interval=0), console=False).summary
print(json.dumps({k: v for k, v in s.items() if k == "wall_s" or "compile" in k}))
"""

# summary.json's compile split, reported by `compile_cache` for each start
COMPILE_SPLIT = tuple(f"{prefix}_{phase}_s" for prefix in ("compile", "eval_compile") for phase in ("trace", "lower", "xla"))


def compile_cache(quick: bool, repeats: int) -> dict:
    """JAX's persistent compilation cache: compile time of a cold start vs a second start, each
    split into tracing, lowering and XLA (a load from the cache on the second start), for the
    training loop and for the evaluation (compiled beside it: `eval_compile_s`)."""
    timings = []
    with tempfile.TemporaryDirectory() as tmp:
        for start in ("cold", "warm"):
            out = subprocess.run([sys.executable, "-c", _CACHE_PROBE, os.path.join(tmp, "cache"),
                                  os.path.join(tmp, start), "20480"], capture_output=True, text=True, check=True)
            timings.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = timings
    return {"compile_cache/CartPole-v1/fused": {
        "cold_compile_s": cold["compile_s"], "warm_compile_s": warm["compile_s"],
        "speedup": cold["compile_s"] / max(warm["compile_s"], 1e-9),
        "cold_wall_s": cold["wall_s"], "warm_wall_s": warm["wall_s"],
        **{f"{start}_{key}": figures[key] for start, figures in (("cold", cold), ("warm", warm))
           for key in ("eval_compile_s",) + COMPILE_SPLIT}}}


def ops_per_iteration(quick: bool, repeats: int) -> dict:
    """What one fused iteration launches: the ops of its optimised HLO (fusions, library calls,
    copies, loops multiplied out; `hlo_ops`), compiled for this backend with its speed settings at
    'auto' and at each backend's defaults (`speed.BACKEND_DEFAULTS`). Counted, not timed."""
    configs = {"CartPole-v1/4x128": dict(num_envs=4, num_steps=128)}
    if not quick:
        configs["CartPole-v1/2048x64"] = dict(num_envs=2048, num_steps=64, learner=LearnerConfig(num_minibatches=8))
    results = {}
    for label, shape in configs.items():
        for variant, speed in (("auto", {}), *((f"{name}-defaults", defaults.as_dict())
                                               for name, defaults in BACKEND_DEFAULTS.items())):
            cfg = TrainConfig(**shape, total_timesteps=shape["num_envs"] * shape["num_steps"], **speed)
            c = build(cfg)
            state = initial_states(c)
            counted = count_ops(fused_program(c).lower(state, jnp.int32(1)).compile().as_text(), per="loop")
            results[f"ops_per_iteration/{label}/{variant}"] = {
                "ops_per_iteration": counted.total, **counted.as_dict(),
                "backend": jax.default_backend(), "speed": c.speed.as_dict()}
    return results


CASES = {"env_step": env_step, "rollout": rollout, "advantages": advantages, "update": update,
         "gae_placement": gae_placement, "bootstrap_cost": bootstrap_cost, "ops_per_iteration": ops_per_iteration,
         "end_to_end": end_to_end, "devices": devices, "gradient_step_cost": gradient_step_cost,
         "host_step_cost": host_step_cost, "host_sync_cost": host_sync_cost,
         "compile_cache": compile_cache, "eval_cost": eval_cost, "processes": processes, "suites": suites,
         "pqn_vs_ppo": pqn_vs_ppo, "video_cost": video_cost}

__all__ = ["CASES", "Timing"]
