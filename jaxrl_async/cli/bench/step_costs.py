"""Where one step's time goes: benchmark cases that split a step into its parts, so a
throughput target can be checked against what the parts alone allow.

- `gradient_step_cost`: a replay learner's gradient step, per sampled transition and fixed.
- `host_step_cost`: a host env's fragment, per vector step: the envs, the act call, the rest.
- `host_sync_cost`: what the fused mode's host syncs (its calls of the compiled loop) add to training.
- `bootstrap_cost`: a rollout's bootstrap values, the truncated steps' alone against every step's.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.trainer import presets
from jaxrl_async.cli.bench.configs import DQN_CARTPOLE, REFERENCE
from jaxrl_async.cli.bench.measure import time_calls
from jaxrl_async.trainer.build import build, init_state, initial_states
from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.envs.wrappers import max_truncations as env_truncation_bound
from jaxrl_async.trainer.fused import compile_fused, fused_program
from jaxrl_async.rollout.device import make_rollout
from jaxrl_async.envs.host.cores import on_core
from jaxrl_async.trainer.schedule import chunk_plan


def _median_us(call: Callable[[], Any], repeats: int, per: int) -> float:
    """Microseconds per unit of a call doing `per` units: the median of `repeats` (at least 2) timed calls."""
    return 1e6 * float(np.median(time_calls(call, warmup=1, repeats=max(2, repeats)))) / per


def gradient_step_cost(quick: bool, repeats: int) -> dict:
    """What a replay learner's gradient step costs, split into a part per sampled transition and
    a fixed part: the fused iteration (act, add to the buffer, `replay_ratio` gradient steps),
    learning from the first fragment on, timed at two batch sizes. Per row: `us_per_gradient_step`
    at each batch (the iteration's time over its gradient steps), the line through the two
    (`us_per_sample`, `fixed_us`), the config's own steps/s (`config_steps_per_second`), and
    `compute_bound_steps_per_second`, the steps/s its batch allows if the fixed part cost nothing:
    the arithmetic on the sampled transitions alone bounds it (issue #16 asks for 20x SB3 / sbx;
    this says how far that is)."""
    # each row: the config, a small batch to time beside the config's own, iterations per timed call
    rows = {"dqn/CartPole-v1/8x32": (DQN_CARTPOLE, 8, 20)}
    if not quick:
        rows["sac/Pendulum-v1/1x1"] = (presets.config_for("Pendulum-v1"), 32, 400)
    results = {}
    for label, (base, small, iterations) in rows.items():
        iterations = max(2, iterations // (10 if quick else 1))
        own_batch = base.replay.replay_batch_size
        per_step_us = {}
        for batch in (small, own_batch):
            cfg = dataclasses.replace(base, num_seeds=1, total_timesteps=base.batch_size * iterations * 4,
                                      replay=dataclasses.replace(base.replay, replay_batch_size=batch,
                                                                 learning_starts=base.batch_size))
            c = build(cfg)
            state = [initial_states(c)]
            compiled = fused_program(c).lower(state[0], jnp.int32(1)).compile()

            def call(compiled=compiled, state=state):  # the state is donated: each call takes the last one's
                state[0] = compiled(state[0], jnp.int32(iterations))[0]
                return state[0]

            per_step_us[batch] = _median_us(call, repeats, iterations * cfg.replay.replay_ratio)
        per_sample = (per_step_us[own_batch] - per_step_us[small]) / (own_batch - small)
        gradient_steps_per_env_step = base.replay.replay_ratio / base.batch_size
        results[f"gradient_step_cost/{label}"] = {
            "us_per_gradient_step": {str(b): us for b, us in per_step_us.items()},
            "us_per_sample": per_sample, "fixed_us": per_step_us[small] - per_sample * small,
            "batch_size": own_batch, "gradient_steps_per_env_step": gradient_steps_per_env_step,
            "config_steps_per_second": 1e6 / (gradient_steps_per_env_step * per_step_us[own_batch]),
            "compute_bound_steps_per_second": 1e6 / (gradient_steps_per_env_step * per_sample * own_batch)}
    return results


# host_step_cost's rows: (env, the config's settings beside the reference's); quick mode times the first two
HOST_STEP_ROWS = (("gymnasium:CartPole-v1", {}), ("envpool:CartPole-v1", {"env_groups": 2}), ("envpool:CartPole-v1", {}),
                  ("gymnasium:HalfCheetah-v5", {}), ("envpool:HalfCheetah-v4", {}),
                  ("envpool:HalfCheetah-v4", {"env_groups": 2}),
                  # README row 8's shape (SB3's PPO settings): one env, so nothing overlaps its steps
                  ("gymnasium:HalfCheetah-v5", {"num_envs": 1, "num_steps": 2048}))


def host_step_cost(quick: bool, repeats: int) -> dict:
    """Where a host env's fragment goes, per vector step, the actor alone (no learner beside it): at
    the reference (PureJaxRL) config's 4 envs, gymnasium and EnvPool CartPole-v1 and HalfCheetah,
    the actor's envs in one vector env or in two groups (`--env-groups 2`: one group steps on
    EnvPool's threads while the actor acts for the other); and HalfCheetah-v5 at 1 env x 2048 steps.
    Per step: the envs' step as the actor makes it, one vector env of all the envs (`env_us`), the
    policy's jitted act call with its action brought to the host (`act_us`), a jitted call that does
    nothing on an observation (`dispatch_floor_us`), the two alternated on one thread with nothing
    else (`alternated_us`: what any actor that steps its envs and acts in turn pays; each slows the
    other there), and the actor's whole fragment over its steps (`fragment_us`: env, act, recording,
    the fragment's draws, its log-probabilities, values, GAE and the transfer; `fragment_to_alternated`
    its ratio to the alternated floor). `env_bound_steps_per_second` is the rate if acting,
    recording and learning cost nothing; `actor_to_env` the actor's share of it. Where the actor runs
    on one core with its envs' threads (`envs.host.cores.actor_core`), `env_us_on_actor_core` is the
    envs alone stepped so too. Envs whose extra (EnvPool, MuJoCo) is not installed are left out."""
    results = {}
    for env_id, settings in HOST_STEP_ROWS[:2] if quick else HOST_STEP_ROWS:
        try:
            cfg = TrainConfig(env=env_id, mode="async", devices=1, **{"env_groups": 1, **settings})
            c = build(cfg)
        except ValueError as error:  # an optional extra not installed
            print(f"host_step_cost: {env_id} left out: {error}")
            continue
        groups = cfg.env_groups
        label = f"host_step_cost/{env_id}/{cfg.num_envs}x{cfg.num_steps}" + (f"/groups={groups}" if groups > 1 else "")
        results[label] = _host_step_row(c, steps=32 if quick else 512, repeats=repeats)
    return results


def _host_step_row(c, steps: int, repeats: int) -> dict:
    """`host_step_cost`'s figures for one config's actor; `steps` vector steps per timed call."""
    cfg, r = c.cfg, c.rollout
    num_envs = cfg.num_envs
    state = initial_states(c)
    device = jax.devices()[0]
    actor = r.actor(list(range(num_envs)), device, jax.sharding.SingleDeviceSharding(device))
    actor.warm_up(state.learner.params, state.rollout)
    rollout_state = [state.rollout]

    def fragment():
        rollout_state[0], trajectory = actor.collect(state.learner.params, rollout_state[0])
        return trajectory

    envs = c.env.make_vec(num_envs)
    obs = envs.reset(list(range(num_envs)))
    single = r.with_num_envs(num_envs) if r.env_groups > 1 else r  # the act call over all the envs
    stats, carry, noise = r.unbatch((state.rollout.obs_stats, state.rollout.carry, state.rollout.noise))
    reset = np.zeros((num_envs,), bool)
    params, packed = single.actor_params(state.learner.params)  # as the actor takes them
    _, draws = single.fragment_draws(params, jax.random.PRNGKey(0), steps)
    draws = [jax.tree.map(lambda x, t=t: np.asarray(x[t]), draws) for t in range(steps)]
    # the envs' steps take actions the policy chose (a random action can leave a MuJoCo env's bounds)
    actions = [np.asarray(single.observe_and_act(packed, stats, obs, obs, carry, reset, draws[t], noise)[0])
               for t in range(steps)]

    def env_steps(vec=envs):
        for action in actions:
            vec.step(action)

    # the act call's other inputs as the actor passes them: its state's, and each step's draw on the host
    def act_calls():
        for t in range(steps):
            np.asarray(single.observe_and_act(packed, stats, obs, obs, carry, reset, draws[t], noise)[0])

    def alternated(vec):  # the actor's loop with nothing recorded: act, step, act on what it returned
        step_obs = obs
        for t in range(steps):
            vec.step_async(np.asarray(single.observe_and_act(packed, stats, step_obs, step_obs, carry, reset, draws[t],
                                                             noise)[0]))
            step_obs = vec.receive()[0]

    nothing = jax.jit(lambda x: x)

    def empty_calls():
        for _ in range(steps):
            np.asarray(nothing(obs))

    per_step_us = {name: _median_us(call, repeats, per) for name, call, per in (
        ("fragment_us", fragment, cfg.num_steps), ("env_us", env_steps, steps), ("act_us", act_calls, steps),
        ("dispatch_floor_us", empty_calls, steps))}
    envs.close()
    with on_core(actor.core):  # as the actor steps its envs: on its core where it has one, their threads too
        vec = c.env.make_vec(num_envs)
        vec.reset(list(range(num_envs)))
        per_step_us["alternated_us"] = _median_us(lambda: alternated(vec), repeats, steps)
        vec.close()
    on_actor_core = {}
    if actor.core is not None:  # the envs alone where the actor steps them: on its core, with their threads
        with on_core(actor.core):
            pinned = c.env.make_vec(num_envs)
            pinned.reset(list(range(num_envs)))
            on_actor_core = {"actor_core": actor.core,
                             "env_us_on_actor_core": _median_us(lambda: env_steps(pinned), repeats, steps)}
            pinned.close()
    actor.close()
    return {**per_step_us, **on_actor_core, "num_envs": num_envs, "env_groups": r.env_groups,
            "actor_steps_per_second": 1e6 * num_envs / per_step_us["fragment_us"],
            "env_bound_steps_per_second": 1e6 * num_envs / per_step_us["env_us"],
            "actor_to_env": per_step_us["env_us"] / per_step_us["fragment_us"],
            "fragment_to_alternated": per_step_us["fragment_us"] / per_step_us["alternated_us"]}


def host_sync_cost(quick: bool, repeats: int) -> dict:
    """What the fused mode's host syncs cost: the reference config's updates run as the default
    plan of calls ('auto': about 20 calls, one host sync after each) and as one call of them all,
    the two alternated in one process (the compiled loop alone, no host bookkeeping between calls).
    `auto_to_one_call` is the median of each pair's ratio; `extra_ms_per_call` spreads the
    difference over the calls. `empty_call_ms` is a call of zero iterations (dispatch and
    bringing the metrics to the host), `first_iteration_extra_ms` what a call's first iteration
    costs beyond a later one (a call of 2 iterations against one of 1)."""
    cfg = TrainConfig(**{**REFERENCE, "total_timesteps": 40 * 512} if quick else REFERENCE, devices=1)
    c = build(cfg)
    state = [initial_states(c)]
    compiled = compile_fused(c, state[0], None)

    def calls(plan):  # the state is donated: each call takes the last one's
        def run():
            for n in plan:
                state[0], sums, diagnostics = compiled(state[0], jnp.int32(n))
                jax.device_get((sums, diagnostics))
        return run

    num_updates = cfg.num_updates
    auto_plan = chunk_plan(num_updates, "auto")
    pairs = [(time_calls(calls([num_updates]), warmup=0, repeats=1)[0],
              time_calls(calls(auto_plan), warmup=0, repeats=1)[0]) for _ in range(max(2, repeats))]
    ratio = float(np.median([auto / one for one, auto in pairs]))
    one_call_s = float(np.median([one for one, _ in pairs]))
    call_ms = {n: 1e3 * float(np.median(time_calls(calls([n]), warmup=1, repeats=20 if quick else 100)))
               for n in (0, 1, 2)}
    return {f"host_sync_cost/CartPole-v1/{cfg.num_envs}x{cfg.num_steps}": {
        "updates": num_updates, "calls": len(auto_plan), "one_call_s": one_call_s,
        "auto_calls_s": float(np.median([auto for _, auto in pairs])), "auto_to_one_call": ratio,
        "extra_ms_per_call": 1e3 * (ratio - 1) * one_call_s / (len(auto_plan) - 1),
        "iteration_ms": 1e3 * one_call_s / num_updates, "empty_call_ms": call_ms[0],
        "first_iteration_extra_ms": 2 * call_ms[1] - call_ms[2] - call_ms[0], "pairs": len(pairs)}}


def bootstrap_cost(quick: bool, repeats: int) -> dict:
    """What valuing only the truncated steps' pre-reset observations saves (`bootstrap.py`): the
    rollout as built (the critic on `max_truncations` + 1 rows per env) against the same rollout
    valuing all T x B (`max_truncations=num_steps`, the layout before), the two alternated.
    `truncated_to_every_step` is the median of each round's ratio of collect times; outside
    quick mode the reference config adds `iteration_truncated_to_every_step`, the same for the
    compiled training loop (100 iterations a call)."""
    results = {}
    for num_envs, num_steps in ((4, 128),) if quick else ((4, 128), (2048, 64)):
        c = build(TrainConfig(**{**REFERENCE, "num_envs": num_envs, "num_steps": num_steps}, devices=1))
        state = jax.jit(functools.partial(init_state, c))(jax.random.PRNGKey(0))
        every_step = make_rollout(c.env, c.env_params, c.policy, num_envs=num_envs, num_steps=num_steps,
                                  gamma=c.cfg.learner.gamma, gae_lambda=c.cfg.learner.gae_lambda,
                                  unroll=c.speed.scan_unroll, gae_scan=c.speed.gae_scan, max_truncations=num_steps)
        args = (state.learner.params, state.rollout)
        compiled = [jax.jit(r.collect).lower(*args).compile() for r in (c.rollout, every_step)]
        rounds = [[float(np.median(time_calls(lambda: f(*args), warmup=1, repeats=repeats))) for f in compiled]
                  for _ in range(2 if quick else 10)]
        truncated, every = (np.array(times) for times in zip(*rounds))
        row = {"truncated_ms": 1e3 * float(np.median(truncated)), "every_step_ms": 1e3 * float(np.median(every)),
               "truncated_to_every_step": float(np.median(truncated / every)),
               "max_truncations": env_truncation_bound(c.env, c.env_params, num_steps), "rounds": len(rounds)}
        if not quick and num_envs == 4:
            row["iteration_truncated_to_every_step"] = _iteration_ratio([c, c._replace(rollout=every_step)], 12)
        results[f"bootstrap_cost/CartPole-v1/{num_envs}x{num_steps}"] = row
    return results


def _iteration_ratio(variants: list, rounds: int, iterations: int = 100) -> float:
    """The first variant's compiled training loop time over the second's: the median of each
    round's ratio, the two alternated (each keeps training its own state)."""
    states = [initial_states(c) for c in variants]
    programs = [compile_fused(c, state, None) for c, state in zip(variants, states)]
    times = [[], []]
    for _ in range(rounds):
        for i, program in enumerate(programs):
            def call(i=i, program=program):
                states[i], sums, _ = program(states[i], jnp.int32(iterations))
                return sums
            times[i] += time_calls(call, warmup=0, repeats=1)
    return float(np.median(np.array(times[0]) / np.array(times[1])))
