"""The host collector (`--env gymnasium:<id>`, `envpool:<id>`): NumPy env steps, jitted acting.

    rollout = HostRollout(spec, policy, num_envs=4, num_steps=128, gamma=0.99, gae_lambda=0.95)
    state = rollout.init(key)                          # jittable, like the device rollout's
    actor = rollout.make_actor(placement, states, ...) # `HostActors`: the async mode's actor threads
    state, trajectory = actor.collect(params, state)   # [1, T, B] Trajectory on the learner's device
    evaluate = rollout.evaluator(num_episodes=32)      # `evaluate.HostEvaluator`, on envs of its own

Each of the T steps calls one jitted `act` on the actor's device (params copied there once per
version) and steps the envs on the host; at the fragment's end one jitted call computes the
actions' log-probabilities and values over all T steps at once (a step's act call computes its
action alone), values the pre-reset observations (the truncation bootstrap), runs GAE and builds the
same `Trajectory` that the device rollout produces (`collector.finish`), which reaches the learner's
device as one transfer. The envs' states live on the host and are not part of `RolloutState` (its
`env_state` is a placeholder): a resumed run restarts its episodes. Host envs train one seed (the `[1]` axis the learner expects).
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.envs.host.cores import actor_core, on_core
from jaxrl_async.envs.host.vec import HostEnvSpec, HostVecEnv, set_row
from jaxrl_async.envs.normalize import RunningMeanStd
from jaxrl_async.envs.render import CannotRender
from jaxrl_async.rollout.evaluate import HostEvaluator
from jaxrl_async.core.exploration import check_correlation, correlate, fresh_noise, initial_noise
from jaxrl_async.core.trees import pack, unpack
from jaxrl_async.nets.actor_critic import Policy, reset_carry
from jaxrl_async.envs.spaces import map_shapes, zeros_observation
from jaxrl_async.rollout.collector import HOST_TIMING_FIELDS, finish, observing
from jaxrl_async.types import RECORDED_FIELDS, RolloutState, Trajectory



def env_seeds(seed: int, stream: int, num_envs: int) -> list[int]:
    """Per-env reset seeds from the run's seed and a stream (the update a fragment starts at, so a
    resumed run does not replay the episodes of the run's start)."""
    return [int(s) for s in np.random.SeedSequence([seed, stream]).generate_state(num_envs)]


def _act(policy: Policy, params, obs, carry, reset, draw: Callable, greedy: bool, noise=(), correlation: float = 0.0):
    """One step of the policy: (action, log_prob, value, carry, noise). `draw(dist)` is the step's
    randomness for `dist` (`dist.draw(key)`; with a `correlation`, the fresh normal noise z_t): an
    actor draws a whole fragment's in one call before it (`HostRollout.fragment_draws`), because
    drawing in every act call cost as much as the network. With a `correlation` the action is
    drawn from `noise`'s next value (`exploration.py`), else `noise` stays the empty tuple."""
    dist, value, carry = policy.step(params, obs, reset_carry(policy, carry, reset))
    if greedy:
        action = dist.mode()
    elif correlation > 0.0:
        noise = correlate(draw(dist), noise, reset, correlation)
        action = dist.sample_from_noise(noise)
    else:
        action = dist.sample_from_draw(draw(dist))
    return action, dist.log_prob(action), value, carry, noise


def _with_key(key: jax.Array) -> Callable:
    """`_act`'s `draw` from a key, drawn inside the act call (the evaluator's acts)."""
    return lambda dist: dist.draw(key)


def _drawn(draw) -> Callable:
    """`_act`'s `draw`: one made before the fragment."""
    return lambda dist: draw


def _rows(tree) -> Callable[[Any], Any]:
    """`i -> tree[i]` (a step's row, or `(t, envs)`), over host copies of its leaves, taken leaf by
    leaf: a tree walk at every step costs more than the row's crossing to the device."""
    leaves, treedef = jax.tree.flatten(jax.tree.map(np.asarray, tree))
    return lambda i: treedef.unflatten([leaf[i] for leaf in leaves])


def _join(parts: list, axis: int = 0) -> Any:
    """The env groups' pytrees joined along the env axis (one group: itself)."""
    if len(parts) == 1 or not jax.tree.leaves(parts[0]):
        return parts[0]
    concatenate = np.concatenate if isinstance(jax.tree.leaves(parts[0])[0], np.ndarray) else jnp.concatenate
    return jax.tree.map(lambda *xs: concatenate(xs, axis=axis), *parts)


def _acting(policy: Policy, params, obs, carry, reset, draw, noise, correlation: float):
    """An actor's step: (action, carry, noise). The action's log-probability and the critic's value
    are computed at the fragment's end, for all its steps in one call (`_fragment_outputs`): here,
    step by step, they and their crossing to the host cost a third of the act call."""
    action, _, _, carry, noise = _act(policy, params, obs, carry, reset, _drawn(draw), False, noise, correlation)
    return action, carry, noise


def _fragment_outputs(policy: Policy, params, rec: dict, initial_carry) -> tuple[jax.Array, jax.Array]:
    """(log_prob, value) of a fragment's `[T, B]` steps, as its act calls' policy gives them: the
    policy's unroll over the observations the act calls saw, from the fragment's first carry, reset
    where each step's was; the log-probability of the action taken."""
    batch_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731  unroll takes [B, T]
    dist, value, _ = policy.unroll(params, jax.tree.map(batch_major, rec["obs"]), initial_carry,
                                   batch_major(rec["reset"]))
    return batch_major(dist.log_prob(batch_major(rec["action"]))), batch_major(value)


def _observe_and_act(policy: Policy, params, stats: RunningMeanStd, obs, final_prev, carry, reset, draw, noise,
                     correlation: float):
    """`--normalize-obs`'s step, as the jitted rollout orders it: the statistics take in `obs` (what
    the previous step reached, or the reset observation), then the policy acts on `obs` normalised
    by them, and the previous step's pre-reset observation `final_prev` is normalised by them too
    (the jitted rollout normalises its `next_obs` after the update). Returns (action, carry, noise,
    stats, normalised obs, normalised final_prev)."""
    stats = stats.update(obs)
    obs_in = stats.normalize(obs)
    return (*_acting(policy, params, obs_in, carry, reset, draw, noise, correlation), stats, obs_in,
            stats.normalize(final_prev))


class HostRollout:
    """The host rollout's pure parts (`init`, the jitted act and finish) for one env spec."""

    def __init__(self, spec: HostEnvSpec, policy: Policy, *, num_envs: int, num_steps: int, gamma: float,
                 gae_lambda: float, reward_scale: float = 1.0, gae_scan: str = "sequential",
                 normalize_obs: bool = False, noise_correlation: float = 0.0, env_groups: int | str = 1,
                 record_raw_obs: bool = False):
        correlated = check_correlation(noise_correlation, policy.discrete)
        self._settings = dict(num_steps=num_steps, gamma=gamma, gae_lambda=gae_lambda, reward_scale=reward_scale,
                              gae_scan=gae_scan, normalize_obs=normalize_obs, noise_correlation=noise_correlation,
                              env_groups=env_groups, record_raw_obs=record_raw_obs)
        self.spec, self.policy = spec, policy
        self.num_envs, self.num_steps, self.normalize_obs = num_envs, num_steps, normalize_obs
        # the env's own observations recorded, the statistics handed over beside them (`make_rollout`'s)
        self.record_raw_obs = raw = normalize_obs and record_raw_obs
        # an actor's envs step as this many vector envs (`HostActor`); 'auto': two where that pays
        pays = spec.double_buffers and num_envs % 2 == 0 and not normalize_obs
        self.env_groups = (2 if pays else 1) if env_groups == "auto" else env_groups
        obs_shape = policy.obs_shape

        def init(key: jax.Array) -> RolloutState:
            # the envs live on the host: env_state only holds the env count's shape
            return RolloutState(env_state=jnp.zeros((num_envs,), jnp.int32),
                                obs=zeros_observation(obs_shape, (num_envs,)),
                                obs_stats=RunningMeanStd.create(obs_shape), key=key,
                                carry=policy.initial_carry((num_envs,)), reset=jnp.ones((num_envs,), bool),
                                noise=initial_noise(num_envs, policy.action_shape) if correlated else ())

        def finish_fragment(params, rec: dict, carry_after, initial_carry, stats: RunningMeanStd) -> Trajectory:
            obs_stats = stats if raw else ()
            log_prob, value = _fragment_outputs(observing(policy, stats) if raw else policy, params, rec,
                                                initial_carry)
            rec = {**rec, "log_prob": log_prob, "value": value}
            # host envs' time limits are their own: every step's next_obs is valued
            trajectory = finish(policy, params, rec, carry_after, initial_carry, gamma=gamma, gae_lambda=gae_lambda,
                                gae_scan=gae_scan, max_truncations=num_steps, reward_scale=reward_scale,
                                obs_stats=obs_stats)
            return jax.tree.map(lambda x: x[None], trajectory)  # the learner's seed axis

        self.init = init
        # the actor's act (its noise correlated where asked); the evaluator's, always white: (action,
        # carry), the outputs it uses (a jitted call computes every output it returns)
        self._act = jax.jit(lambda p, o, c, r, d, n: _acting(policy, unpack(p), o, c, r, d, n, noise_correlation))
        self.act = jax.jit(lambda p, o, c, r, k: _act(policy, p, o, c, r, _with_key(k), greedy=False)[::3])
        self.act_greedy = jax.jit(lambda p, o, c, r, k: _act(policy, p, o, c, r, _with_key(k), greedy=True)[::3])
        self._observe_and_act = jax.jit(lambda p, *args: _observe_and_act(policy, unpack(p), *args, noise_correlation))
        # the same without the normalised observations, which a raw recording drops (a jitted call
        # computes every output it returns)
        self._observe_and_act_raw = jax.jit(lambda p, *args: _observe_and_act(policy, unpack(p), *args,
                                                                                noise_correlation)[:4])
        # a published version's params as an actor uses them, in one call: without the seed axis, and
        # packed as the act calls take them (flat arrays: a call pays its dispatch per argument leaf)
        self.actor_params = jax.jit(lambda params: (lambda tree: (tree, pack(tree)))(jax.tree.map(lambda x: x[0], params)))
        # the fragment's last pre-reset observation, normalised as the next fragment's first step would
        self._observe_final = jax.jit(lambda stats, obs, final: stats.update(obs).normalize(final))
        # evaluation: frozen statistics
        self.act_frozen = jax.jit(lambda p, s, o, c, r, k, greedy: _act(policy, p, s.normalize(o), c, r, _with_key(k),
                                                                        greedy)[::3], static_argnums=6)
        self.finish = jax.jit(finish_fragment)
        # the seed axis off the params and the carried state, and back on: one call each, not an
        # eager slice per leaf
        self.unbatch = jax.jit(lambda tree: jax.tree.map(lambda x: x[0], tree))
        self.rebatch = jax.jit(lambda state, obs, stats, key, carry, reset, noise: state.replace(
            obs=jax.tree.map(lambda x: x[None], obs), obs_stats=jax.tree.map(lambda x: x[None], stats), key=key[None],
            carry=jax.tree.map(lambda x: x[None], carry), reset=reset[None],
            noise=jax.tree.map(lambda x: x[None], noise)))
        # a fragment's randomness in one call: the next state's key and each step's draw for `_act`
        # (the draws depend on the step's distribution's shapes alone, found from the params' tree)
        def fragment_draws(params, key: jax.Array, n: int):
            keys = jax.random.split(key, n + 1)
            if correlated:
                draw_one = lambda k: fresh_noise(k, (num_envs, *policy.action_shape))  # noqa: E731
            else:
                draw_one = jax.eval_shape(lambda: policy.step(params, zeros_observation(obs_shape, (num_envs,)),
                                                              policy.initial_carry((num_envs,)))[0]).draw
            return keys[0], jax.vmap(draw_one)(keys[1:])

        self.fragment_draws = jax.jit(fragment_draws, static_argnums=2)

    def observe_and_act(self, packed, stats, obs, final_prev, carry, reset, draw, noise) -> tuple:
        """(action, carry, noise, stats, the obs to record, the previous step's `next_obs` to
        record), for the params as `actor_params` packs them: `_observe_and_act` where observations are normalised
        (recording the env's own where `record_raw_obs`), else the plain act (no statistics, the
        observations as they are: nothing more crosses to the device)."""
        if self.record_raw_obs:
            return (*self._observe_and_act_raw(packed, stats, obs, final_prev, carry, reset, draw, noise), obs,
                    final_prev)
        if self.normalize_obs:
            return self._observe_and_act(packed, stats, obs, final_prev, carry, reset, draw, noise)
        return (*self._act(packed, obs, carry, reset, draw, noise), stats, obs, final_prev)

    def observe_final(self, stats, obs, final):
        """The fragment's last `next_obs` to record: `final` (normalised where observations are and
        the trajectory carries no raw ones)."""
        return self._observe_final(stats, obs, final) if self.normalize_obs and not self.record_raw_obs else final

    def with_num_envs(self, num_envs: int) -> "HostRollout":
        """The same rollout over `num_envs` envs (one actor's share)."""
        return HostRollout(self.spec, self.policy, num_envs=num_envs, **self._settings)

    def collect(self, params, state):
        raise ValueError("a host env (gymnasium:...) is stepped by the async mode's actor thread, not inside "
                         "a jitted program: use --mode async")

    def actor(self, seeds: list[int], device: Any, out_sharding: Any, index: int = 0) -> "HostActor":
        """Actor `index`'s share: these envs, acting on `device`, the trajectory put on `out_sharding`."""
        envs = [self.spec.make_vec(self.num_envs // self.env_groups) for _ in range(self.env_groups)]
        return HostActor(self, envs, seeds, device, out_sharding, core=actor_core(self.spec, self.env_groups, index))

    def make_actor(self, placement, state, *, device, num_seeds: int, seed: int, start: int,
                   num_actors: int, program=None) -> "HostActors":
        """The async mode's actor: `num_actors` threads over this rollout's envs (one seed). Its
        programs are this rollout's own (`program` unused): a host rollout is built for one run."""
        return HostActors(self, placement, state, device, seed=seed, start=start, num_actors=num_actors)

    def evaluator(self, num_episodes: int, unroll: int = 1) -> HostEvaluator:
        return HostEvaluator(self, num_episodes)

    def recorder(self, num_episodes: int, max_frames: int):
        """Host envs record no episode: their states live in the simulators the actor threads step,
        and never reach a program that could return them."""
        raise CannotRender(f"{self.spec.env_id} is a host env, stepped by the async mode's actor threads: its "
                           "states never reach the program that records an episode")

    def record_spec(self, params) -> dict:
        """What a fragment records (`types.RECORDED_FIELDS` but the log-probabilities and values,
        which `finish` computes), as abstract `[T, B, ...]` arrays."""
        T, B, policy = self.num_steps, self.num_envs, self.policy
        carry = policy.initial_carry((B,))
        action = jax.eval_shape(lambda p: _act(policy, p, zeros_observation(policy.obs_shape, (B,)), carry,
                                               jnp.ones((B,), bool), _with_key(jax.random.PRNGKey(0)), False)[0], params)
        f32, boolean = jax.ShapeDtypeStruct((T, B), jnp.float32), jax.ShapeDtypeStruct((T, B), bool)
        observations = map_shapes(lambda s: jax.ShapeDtypeStruct((T, B, *s), jnp.float32), policy.obs_shape)
        spec = dict(obs=observations, action=jax.ShapeDtypeStruct((T, *action.shape), action.dtype), reward=f32,
                    terminated=boolean, truncated=boolean, next_obs=observations, episode_return=f32,
                    episode_length=jax.ShapeDtypeStruct((T, B), jnp.int32), episode_done=boolean, reset=boolean)
        return {name: spec[name] for name in RECORDED_FIELDS if name in spec}

    def trajectory_shape(self, params) -> Trajectory:
        """The abstract `[1, T, B]` trajectory a fragment hands over (for compiling the learner)."""
        carry = self.policy.initial_carry((self.num_envs,))
        carry_after = jax.tree.map(lambda c: jax.ShapeDtypeStruct((self.num_steps, *c.shape), c.dtype), carry)
        return jax.eval_shape(self.finish, params, self.record_spec(params), carry_after, carry,
                              RunningMeanStd.create(self.policy.obs_shape))


class HostActor:
    """One actor thread's envs and its copy of the params on its device: `collect(params, state)`
    steps the envs for a fragment (the pipeline's `collect`); `timings()` the last fragment's split.

    **Env groups (double-buffered sampling).** The envs may be split into groups, each a vector env
    of its own (`--env-groups`): at every step the actor acts for one group and starts its step
    (`HostVecEnv.step_async`), then waits for the next group's step and acts for it, and so on, so
    that where a backend steps its envs off the actor's thread (EnvPool's C++ threads) one group's
    envs step while the actor acts for another. Each env's reset seed, randomness (its columns of
    the fragment's draws) and params version are those it has in one group, so the trajectory is
    the one a single group records, its network outputs to float rounding (a group's act call
    computes fewer rows: docs/host_envs.md, "Env groups"; `tests/test_host_envs.py`).
    """

    def __init__(self, rollout: HostRollout, envs: list[HostVecEnv], seeds: list[int], device: Any,
                 out_sharding: Any, core: int | None = None):
        self._r, self._envs, self._seeds = rollout, envs, seeds
        self.core = core  # where `collect` runs, with the envs' threads it starts (`actor_core`)
        self._device, self._out = device, out_sharding
        # whether a trajectory crosses to the learner's device (a put to the device it is on still
        # walks its leaves: docs/benchmarks.md, "Figures behind the code's comments")
        self._moves = out_sharding.device_set != {device}
        # the state this actor returned last and its seed-less parts (carry, key, reset, stats, noise)
        # on its device: the next fragment starts from them, without taking the seed axis off again
        self._returned: RolloutState | None = None
        self._carried: tuple = ()
        size = rollout.num_envs // len(envs)
        self._groups = [slice(g * size, (g + 1) * size) for g in range(len(envs))]
        self._source = self._params = None
        self._obs: list | None = None  # each group's current observation; None: reset the envs first
        self._spec: dict | None = None  # what a fragment records (`HostRollout.record_spec`), once known
        self._timings = dict.fromkeys(HOST_TIMING_FIELDS, 0.0)

    def _parts(self, tree) -> list:
        """`tree`'s rows of each group (one group: the tree itself)."""
        if len(self._groups) == 1:
            return [tree]
        return [jax.tree.map(lambda x: x[group], tree) for group in self._groups]

    def collect(self, params, state: RolloutState) -> tuple[RolloutState, Trajectory]:
        with on_core(self.core):  # the envs' threads, started at the first reset, take the core too
            return self._collect(params, state)

    def _collect(self, params, state: RolloutState) -> tuple[RolloutState, Trajectory]:
        r, T = self._r, self._r.num_steps
        start = time.perf_counter()
        if params is not self._source:  # once per version: the store hands out the same object
            self._params, self._packed = r.actor_params(jax.device_put(params, self._device) if self._moves else params)
            self._source = params
        if state is self._returned:
            carry, key, reset, stats, noise = self._carried
        else:  # a state from elsewhere (the run's start, a resume)
            state = jax.device_put(state, self._device)
            carry, key, reset, stats, noise = r.unbatch((state.carry, state.key, state.reset, state.obs_stats,
                                                         state.noise))
        transfer_s = time.perf_counter() - start
        if self._obs is None:  # a fresh actor (a new or resumed run): the episodes start here
            self._obs = [envs.reset(self._seeds[group]) for envs, group in zip(self._envs, self._groups)]
            reset = jnp.ones((r.num_envs,), bool)
        if self._spec is None:
            self._spec = r.record_spec(self._params)
        rec = {name: jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), spec) for name, spec in self._spec.items()}
        initial_carry = carry
        # each group's inputs to its next act: obs, the previous step's pre-reset obs (none yet: its
        # recording is skipped), carry, reset flags, noise; and its carries after each step
        obs, final_prev = list(self._obs), list(self._obs)
        carries, resets, noises = self._parts(carry), self._parts(np.asarray(reset)), self._parts(noise)
        carry_steps: list[list] = [[] for _ in self._groups]
        # each group's first reset flags, then per step what it recorded: its observations as the
        # act call saw them, the previous step's next_obs, its actions and what its envs returned
        first_resets = list(resets)
        steps: list[dict] = [{name: [] for name in ("obs", "next_obs", "action", "env")} for _ in self._groups]
        env_s = 0.0
        tick = time.perf_counter()
        key, draws = r.fragment_draws(self._params, key, T)
        draw = _rows(draws)
        inference_s = time.perf_counter() - tick
        for t in range(T + 1):
            for g, (envs, group) in enumerate(zip(self._envs, self._groups)):
                if t:  # the group's step t - 1, started below in the previous round
                    tock = time.perf_counter()
                    obs[g], final_prev[g], reward, terminated, truncated = envs.receive()
                    env_s += time.perf_counter() - tock
                    resets[g] = terminated | truncated
                    steps[g]["env"].append((reward, terminated, truncated))
                if t == T:
                    continue
                tick = time.perf_counter()
                action, carries[g], noises[g], stats, obs_in, final_in = r.observe_and_act(
                    self._packed, stats, obs[g], final_prev[g], carries[g], resets[g], draw((t, group)), noises[g])
                # np.asarray, not jax.device_get: a tenth of the cost per array on the CPU
                action = np.asarray(action)
                steps[g]["action"].append(action)
                steps[g]["obs"].append(obs_in)
                if t:
                    steps[g]["next_obs"].append(final_in)
                carry_steps[g].append(carries[g])
                tock = time.perf_counter()
                envs.step_async(action)
                env_s += time.perf_counter() - tock
                inference_s += tock - tick
        tick = time.perf_counter()
        self._obs = obs
        obs, final_prev, carry = _join(obs), _join(final_prev), _join(carries)
        final = self._parts(r.observe_final(stats, obs, final_prev))
        for g, group_steps in enumerate(steps):  # the last step's next_obs
            group_steps["next_obs"].append(final[g])
        self._record_steps(rec, first_resets, steps)
        carry_after = (_join([jax.tree.map(lambda *c: jnp.stack(c), *steps) for steps in carry_steps], axis=1)
                       if jax.tree.leaves(carry) else carry)
        trajectory = r.finish(self._params, rec, carry_after, initial_carry, stats)
        inference_s += time.perf_counter() - tick
        tick = time.perf_counter()
        trajectory = jax.block_until_ready(jax.device_put(trajectory, self._out) if self._moves else trajectory)
        reset, noise = _join(resets), _join(noises)
        new_state = r.rebatch(state, obs, stats, key, carry, reset, noise)
        self._returned, self._carried = new_state, (carry, key, reset, stats, noise)
        transfer_s += time.perf_counter() - tick
        self._timings = {"env_s": env_s, "inference_s": inference_s, "transfer_s": transfer_s}
        return new_state, trajectory

    def _record_steps(self, rec: dict, first_resets: list, steps: list[dict]) -> None:
        """Each group's steps that its fragment kept in lists (`steps[g]`: observations, next_obs,
        actions, and its envs' rewards and flags) into `rec`, with their episode statistics
        (`HostVecEnv.tally`): written here at once, not step by step, where every write slows
        the env's step and the act call."""
        # np.array of a list of equal arrays stacks them, at a third of np.stack's cost
        stack = lambda rows: jax.tree.map(lambda *leaves: np.array(leaves), *rows)  # noqa: E731
        for g, (envs, group) in enumerate(zip(self._envs, self._groups)):
            reward, terminated, truncated = (np.array(x) for x in zip(*steps[g]["env"]))
            done = terminated | truncated
            episode_return, episode_length = envs.tally(reward, done)
            for name in ("obs", "next_obs"):
                set_row(self._r.policy.obs_shape, rec[name], (slice(None), group), stack(steps[g][name]))
            for name, value in (("action", np.array(steps[g]["action"])), ("reward", reward),
                                ("terminated", terminated), ("truncated", truncated),
                                ("episode_return", episode_return), ("episode_length", episode_length),
                                ("episode_done", done)):
                rec[name][:, group] = value
            rec["reset"][0, group], rec["reset"][1:, group] = first_resets[g], done[:-1]

    def warm_up(self, params, state: RolloutState) -> None:
        """Run the fragment's programs once on zeros (results dropped), so their compilation and
        first-run work count as compilation, not as the first fragment's time."""
        r, B = self._r, self._r.num_envs
        params, packed = r.actor_params(jax.device_put(params, self._device) if self._moves else params)
        state = jax.device_put(state, self._device)
        carry, key, reset, stats, noise = r.unbatch((state.carry, state.key, state.reset, state.obs_stats,
                                                     state.noise))
        zeros = map_shapes(lambda s: np.zeros((B, *s), np.float32), r.policy.obs_shape)
        r.rebatch(state, zeros, stats, np.asarray(key), carry, np.asarray(reset), noise)
        carry = jax.device_put(r.policy.initial_carry((B,)), self._device)
        _, draws = r.fragment_draws(params, jax.device_put(jax.random.PRNGKey(0), self._device), r.num_steps)
        group, first = self._groups[0], lambda tree: self._parts(tree)[0]  # noqa: E731
        r.observe_and_act(packed, stats, first(zeros), first(zeros), first(carry), np.ones((group.stop,), bool),
                          _rows(draws)((0, group)), first(noise))
        _join(self._parts((carry, noise)))
        r.observe_final(stats, zeros, zeros)
        rec = {name: jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), spec)
               for name, spec in r.record_spec(params).items()}
        carry_after = jax.tree.map(lambda c: jnp.stack([c] * r.num_steps), carry)
        jax.block_until_ready(r.finish(params, rec, carry_after, carry, stats))

    def timings(self) -> dict:
        return dict(self._timings)

    def close(self) -> None:
        for envs in self._envs:
            envs.close()


def _joined(axis: int) -> Callable[..., np.ndarray]:
    """Leaves of the actors' parts joined along `axis`, their env axis."""
    return lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=axis)


class HostActors:
    """The async mode's actor over host envs: `num_actors` `HostActor`s, each stepping
    `num_envs / num_actors` envs in a thread of its own (one steps in the caller's thread); their
    trajectories are joined along B. The envs' reset seeds follow the run's seed and `start`, the
    update the actors start at (`env_seeds`)."""

    def __init__(self, collector: HostRollout, placement, state, device: Any | None, *, seed: int, start: int,
                 num_actors: int):
        self._n = num_actors
        shardings = placement.shardings(state)
        self._learner_rollout_sharding = shardings.rollout
        self._device = device = device or placement.devices[0]
        per_actor = collector.num_envs // self._n
        seeds = env_seeds(seed, start, collector.num_envs)
        self._out = jax.sharding.SingleDeviceSharding(placement.devices[0])
        parts = collector if self._n == 1 else collector.with_num_envs(per_actor)
        self._actors = [parts.actor(seeds[i * per_actor:(i + 1) * per_actor], device,
                                    self._out if self._n == 1 else jax.sharding.SingleDeviceSharding(device), index=i)
                        for i in range(self._n)]
        self._pool = concurrent.futures.ThreadPoolExecutor(self._n - 1) if self._n > 1 else None
        params = state.learner.params
        self.trajectory = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self._out),
                                       collector.trajectory_shape(jax.tree.map(lambda x: x[0], params)))
        self.unpack = lambda trajectory: trajectory  # noqa: E731
        for i, actor in enumerate(self._actors):
            actor.warm_up(params, state.rollout if self._n == 1 else self._split(state.rollout, i, state.rollout.key))

    def _split(self, state, i: int, key):
        b = state.reset.shape[1] // self._n
        part = lambda tree: jax.tree.map(lambda x: x[:, i * b:(i + 1) * b], tree)  # noqa: E731
        return state.replace(env_state=part(state.env_state), obs=part(state.obs), carry=part(state.carry),
                             reset=part(state.reset), noise=part(state.noise), key=key)

    def collect(self, params, rollout_state):
        if self._n == 1:
            return self._actors[0].collect(params, rollout_state)
        # each actor carries its share of the envs' state; the key is split per actor
        keys = jax.vmap(lambda k: jax.random.split(k, self._n))(rollout_state.key)
        states = [self._split(rollout_state, i, keys[:, i]) for i in range(self._n)]
        futures = [self._pool.submit(a.collect, params, s) for a, s in zip(self._actors[1:], states[1:])]
        results = [self._actors[0].collect(params, states[0])] + [f.result() for f in futures]
        tick = time.perf_counter()
        # along the envs: axis 2 of the `[S, T, B, ...]` fields, axis 1 of the initial carry's `[S, B, ...]`
        parts = [traj for _, traj in results]
        trajectory = jax.tree.map(_joined(2), *[traj.replace(initial_carry=()) for traj in parts]).replace(
            initial_carry=jax.tree.map(_joined(1), *[traj.initial_carry for traj in parts]))
        trajectory = jax.block_until_ready(jax.device_put(trajectory, self._out))
        join_s = time.perf_counter() - tick
        states = [s for s, _ in results]
        new_state = states[0].replace(**{name: jax.tree.map(_joined(1), *[getattr(p, name) for p in states])
                                         for name in ("env_state", "obs", "carry", "reset", "noise")})
        self._last_join_s = join_s
        return jax.device_put(new_state, self._device), trajectory

    def timings(self) -> dict:
        per_actor = [a.timings() for a in self._actors]
        out = {f: float(np.mean([t[f] for t in per_actor])) for f in HOST_TIMING_FIELDS}
        if self._n > 1:
            out["transfer_s"] += self._last_join_s
        return out

    def to_learner(self, rollout_state):
        return jax.device_put(rollout_state, self._learner_rollout_sharding)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for actor in self._actors:
            actor.close()
