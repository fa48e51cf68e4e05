"""Jumanji (`--env jumanji:Snake-v1`), from `jumanji.registered_environments()`.

Jumanji's `reset(key) -> (state, timestep)` and `step(state, action) -> (state, timestep)` do
not reset by themselves (`jumanji.make` applies no auto-reset wrapper), so `SuiteEnv` resets in
the step and keeps the last observation for the truncation bootstrap. The inner state is
jumanji's own env state (it carries its PRNG key: jumanji's step draws from it, not from ours),
held as a flat dict of its leaves keyed by their paths: jumanji's states are chex dataclasses,
which the checkpoints' serialisation (flax's) does not know.

Termination vs truncation: jumanji's dm_env-style timestep: a LAST step with discount 0 is a
termination, a LAST step with discount > 0 a truncation. Jumanji decides which: most envs end
every episode with discount 0, their time limit included (Snake-v1's 4000 steps: the share of
them gone is in the observation, `_time_limit`), and LevelBasedForaging-v0 truncates at its time limit.
Multi-agent envs (a reward or discount per agent: Connector-v3, LevelBasedForaging-v0,
SearchAndRescue-v0) are one agent acting for all, as jumanji's `MultiToSingleWrapper` has it:
the rewards summed, the discount the agents' largest (the episode goes on while one is alive).

Observations are jumanji's NamedTuples / dataclasses as dicts of arrays (nested as the spec
is), booleans as float32 0/1, a rank-3 leaf that is no image with its last two axes joined
(`_leaf_shape`); the observation space is a `spaces.Dict` of Boxes from jumanji's
`observation_spec`. The legal-action mask is the key "action_mask", float32 1 = legal:
`(n,)` for a `Discrete(n)` action; for a MultiDiscrete action whose mask is one row per
sub-action (`[len(nvec), n]`, every sub-action of n choices: Cleaner, Connector, JobShop,
LevelBasedForaging, MMST, RobotWarehouse), that mask flattened to `(sum(nvec),)`.

Actions: `DiscreteArray` -> `Discrete`, `MultiDiscreteArray` -> `MultiDiscrete`, a float
`BoundedArray` -> a flat `Box` (reshaped to jumanji's action shape inside the step:
SearchAndRescue-v0's `[2, 2]`). Refused, with the reason: a joint mask over all sub-actions at
once (BinPack-v2, FlatPack-v0, Minesweeper-v0, Sudoku-*, Tetris-v0: independent sub-action
policies cannot honour it), an integer BoundedArray action (MultiCVRP-v0). Sokoban-v0 builds
its levels from a Hugging Face dataset: from the local cache only (`_hub_offline`), as nothing
may download while we run.

env_kwargs: the env's constructor's keywords (e.g. Snake's num_rows, num_cols, time_limit), and
max_steps_in_episode, a time limit of ours on top (0: jumanji's alone).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import jumanji
import numpy as np
from gymnax.environments import spaces
from jumanji import specs
from jumanji.types import StepType

from jaxrl_async.envs.render import GRID_FPS, Renderer, num_states, state_at
from jaxrl_async.envs.spaces import MultiDiscrete
from jaxrl_async.envs.suites.functional import SuiteEnv, SuiteParams

MASK_KEY = "action_mask"
MAX_FRAME_SIDE = 400  # pixels: jumanji's viewers draw 10-inch figures, 1000 pixels a side at their dpi


def env_ids() -> list[str]:
    return sorted(jumanji.registered_environments())


def _is_leaf(spec: Any) -> bool:
    return isinstance(spec, specs.Array)


def _children(spec: specs.Spec) -> dict[str, Any]:
    # a structured spec's entries, named as the observation's fields (jumanji keeps them private)
    return dict(spec._specs)


def _leaf_shape(spec: specs.Array) -> tuple[int, ...]:
    """The leaf's shape as the policy gets it: a rank-3 leaf stays `[H, W, C]` (the CNN's under
    `--torso auto`) only where its last axis is the shortest, as an image's channels are (Snake's
    `[12, 12, 5]` grid); otherwise its last two axes are joined, so that an MLP reads it as jumanji's
    own networks do: RubiksCube's `[6, 3, 3]` faces, SearchAndRescue's `[2, 3, 128]` views (agents,
    channels, rays), where a 3x3 conv would mix faces, or agents, as if they were neighbouring pixels."""
    shape = tuple(int(d) for d in spec.shape)
    if len(shape) == 3 and not shape[2] < min(shape[:2]):
        return shape[:1] + (shape[1] * shape[2],)
    return shape


def _leaf_box(spec: specs.Array) -> spaces.Box:
    shape, seen = tuple(int(d) for d in spec.shape), _leaf_shape(spec)
    dtype = np.dtype(spec.dtype)
    if dtype == np.bool_:
        return spaces.Box(0.0, 1.0, seen, jnp.float32)
    if isinstance(spec, specs.BoundedArray):
        low, high = np.asarray(spec.minimum), np.asarray(spec.maximum)
    elif np.issubdtype(dtype, np.integer):
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    else:
        low, high = -np.inf, np.inf
    return spaces.Box(np.broadcast_to(low, shape).reshape(seen), np.broadcast_to(high, shape).reshape(seen), seen, dtype)


_COUNTERS = ("step_count", "step")  # jumanji's names for the episode's step counter


def _counter_name(spec: Any) -> str | None:
    """The observation's step counter: its one top-level integer scalar named as in `_COUNTERS`."""
    counters = [(name, child) for name, child in _children(spec).items() if name in _COUNTERS]
    if len(counters) != 1 or counters[0][1].shape != () or not np.issubdtype(np.dtype(counters[0][1].dtype), np.integer):
        return None
    return counters[0][0]


def _time_limit(env: Any, spec: Any) -> int | None:
    """The limit of the observation's step counter (`_counter_name`): the env's `time_limit`, else
    the counter's declared maximum; None where the observation has no counter or it has no limit."""
    name = _counter_name(spec)
    if name is None:
        return None
    limit = getattr(env, "time_limit", None) or getattr(_children(spec)[name], "maximum", None)
    return None if limit is None else int(limit)


def _observation_space(spec: Any, mask_shape: tuple[int, ...] | None, counter: tuple[str, int] | None = None) -> Any:
    if _is_leaf(spec):
        return _leaf_box(spec)
    entries = {name: _observation_space(child, None) for name, child in _children(spec).items()}
    if counter is not None:
        entries[counter[0]] = spaces.Box(0.0, 1.0, (), jnp.float32)
    if mask_shape is not None:
        entries[MASK_KEY] = spaces.Box(0.0, 1.0, mask_shape, jnp.float32)
    return spaces.Dict(entries)


def _observation(spec: Any, obs: Any, mask_shape: tuple[int, ...] | None,
                 counter: tuple[str, int] | None = None) -> Any:
    """jumanji's observation as a dict of arrays shaped as `_observation_space` says; the step
    `counter` (name, time limit) as the share of its limit gone (see `JumanjiEnv`)."""
    if _is_leaf(spec):
        # the spec's dtype, whatever the env returns (PacMan-v1 gives some leaves as Python ints)
        dtype = jnp.float32 if np.dtype(spec.dtype) == np.bool_ else spec.dtype
        return jnp.asarray(obs).astype(dtype).reshape(_leaf_shape(spec))
    out = {name: _observation(child, getattr(obs, name), None) for name, child in _children(spec).items()}
    if counter is not None:
        name, limit = counter
        out[name] = out[name].astype(jnp.float32) / limit
    if mask_shape is not None:
        out[MASK_KEY] = out[MASK_KEY].reshape(mask_shape)
    return out


def _action_space(env_id: str, spec: Any) -> Any:
    if isinstance(spec, specs.DiscreteArray):
        return spaces.Discrete(int(spec.num_values))
    if isinstance(spec, specs.MultiDiscreteArray):
        nvec = np.asarray(spec.num_values)
        if nvec.ndim != 1:
            raise ValueError(f"jumanji:{env_id} has a MultiDiscrete action of shape {nvec.shape}; only a flat one "
                             "[len(nvec)] maps to this project's MultiDiscrete")
        return MultiDiscrete(nvec)
    if isinstance(spec, specs.BoundedArray) and np.issubdtype(np.dtype(spec.dtype), np.floating):
        size = int(np.prod(spec.shape))
        low = np.broadcast_to(np.asarray(spec.minimum, np.float32), spec.shape).reshape(size)
        high = np.broadcast_to(np.asarray(spec.maximum, np.float32), spec.shape).reshape(size)
        return spaces.Box(low, high, (size,), jnp.float32)
    raise ValueError(f"jumanji:{env_id}'s action spec {spec!r} is not supported: use an env whose action is a "
                     "DiscreteArray, a MultiDiscreteArray or a float BoundedArray")


def _mask_shape(env_id: str, action_space: Any, mask_spec: specs.Array) -> tuple[int, ...]:
    """The flat mask's shape, or a ValueError where jumanji's mask does not map to per-action legality."""
    shape = tuple(int(d) for d in mask_spec.shape)
    if isinstance(action_space, spaces.Discrete) and shape == (action_space.n,):
        return shape
    if isinstance(action_space, MultiDiscrete):
        nvec = action_space.nvec
        flat = (sum(nvec),)
        if shape == flat:
            return flat
        # one row per sub-action; a mask shaped like nvec itself (the joint choice) is not one
        # unless rows and columns coincide, which is ambiguous, so refused too
        per_sub_action = len(set(nvec)) == 1 and shape == (len(nvec), nvec[0]) and shape != tuple(nvec)
        if per_sub_action:
            return flat
        raise ValueError(f"jumanji:{env_id}'s action_mask has shape {shape} for the MultiDiscrete action "
                         f"{list(nvec)}: a mask over the joint choice of all sub-actions, which independent "
                         f"sub-action policies cannot honour (only a mask per sub-action maps: {flat}, or one "
                         f"row per sub-action where all have as many choices); {env_id} is not supported")
    raise ValueError(f"jumanji:{env_id}'s action_mask has shape {shape}, which does not fit its action space "
                     f"{action_space!r}; {env_id} is not supported")


class JumanjiEnv(SuiteEnv):
    """A jumanji env over its non-resetting step; see the module docstring."""

    steps_on_past_end = True  # a discrete world: see `SuiteEnv`

    def __init__(self, env_id: str, env: Any, max_steps_in_episode: int = 0):
        super().__init__(max_steps_in_episode)
        self.name = f"jumanji:{env_id}"
        self._env = env
        self._action_spec = env.action_spec
        self._action = _action_space(env_id, self._action_spec)
        obs_spec = env.observation_spec
        if _is_leaf(obs_spec):
            raise ValueError(f"jumanji:{env_id}'s observation is a single array; this adapter expects jumanji's "
                             "structured observations")
        children = _children(obs_spec)
        self._mask_shape = _mask_shape(env_id, self._action, children[MASK_KEY]) if MASK_KEY in children else None
        self._obs_spec = obs_spec
        # the step counter (Snake's 0 to 3999) as the share of the time limit gone: raw, a tanh layer
        # saturates within ~20 steps, and the critic cannot see the limit coming, which most jumanji
        # envs end with a termination (discount 0)
        limit = _time_limit(env, obs_spec)
        self._counter = None if limit is None else (_counter_name(obs_spec), limit)
        paths, self._state_def = jax.tree_util.tree_flatten_with_path(
            jax.eval_shape(env.reset, jax.random.PRNGKey(0))[0])
        self._state_keys = [jax.tree_util.keystr(path) for path, _ in paths]

    def _pack(self, state: Any) -> dict[str, jax.Array]:
        return dict(zip(self._state_keys, jax.tree.leaves(state)))

    def _unpack(self, packed: dict[str, jax.Array]) -> Any:
        return jax.tree.unflatten(self._state_def, [packed[key] for key in self._state_keys])

    def _obs(self, obs: Any) -> dict:
        return _observation(self._obs_spec, obs, self._mask_shape, self._counter)

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[dict, Any]:
        state, timestep = self._env.reset(key)
        return self._obs(timestep.observation), self._pack(state)

    def step_env(self, key: jax.Array, packed: dict, action: jax.Array, params: SuiteParams) -> tuple:
        action = jnp.asarray(action).reshape(self._action_spec.shape).astype(self._action_spec.dtype)
        state, timestep = self._env.step(self._unpack(packed), action)
        # one agent acting for all (jumanji's MultiToSingleWrapper): rewards summed, the largest discount
        reward, discount = jnp.sum(timestep.reward), jnp.max(timestep.discount)
        last = timestep.step_type == StepType.LAST
        return self._obs(timestep.observation), self._pack(state), reward, last & (discount == 0), last & (discount > 0)

    def action_space(self, params: Any = None) -> Any:
        return self._action

    def observation_space(self, params: Any = None) -> spaces.Dict:
        return _observation_space(self._obs_spec, self._mask_shape, self._counter)

    def renderer(self) -> Renderer:
        """Jumanji's own `render(state)` (its matplotlib viewer), the figure it draws read as pixels
        at most `MAX_FRAME_SIDE` a side; matplotlib's off-screen backend, since the writer's thread
        draws (a GUI backend draws only from the main thread)."""
        import matplotlib
        import matplotlib.pyplot as plt

        if matplotlib.get_backend().lower() != "agg":
            plt.switch_backend("agg")
        env = self._env

        def draw(packed: dict) -> Iterator[np.ndarray]:
            try:
                for index in range(num_states(packed)):
                    frame = env.render(self._unpack(state_at(packed, index)))
                    if frame is None:  # a viewer in its 'human' mode draws on pyplot's current figure
                        figure = plt.gcf()
                        figure.set_dpi(min(figure.dpi, MAX_FRAME_SIDE / max(figure.get_size_inches())))
                        figure.canvas.draw()
                        frame = np.asarray(figure.canvas.buffer_rgba())
                    yield np.array(frame[..., :3], np.uint8)
            finally:
                env.close()  # the viewer's figure

        return Renderer(select=lambda packed: packed, draw=draw, fps=GRID_FPS)


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """The Hugging Face Hub offline for the block: Sokoban-v0's build fetches its levels from it,
    and nothing may download while we run. Offline, the Hub's client reads its local cache, or
    fails at once, where online it retried for many seconds with no network. The client reads this
    constant at each call ($HF_HUB_OFFLINE only when it is imported)."""
    try:
        from huggingface_hub import constants
    except ImportError:  # jumanji without the Hub's client: nothing to fetch from it
        yield
        return
    before, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def make(env_id: str, max_steps_in_episode: int = 0, **env_kwargs: Any) -> JumanjiEnv:
    try:
        with _hub_offline():
            env = jumanji.make(env_id, **env_kwargs)
    except Exception as error:  # a bad keyword (TypeError), levels not on disk, ...
        if type(error).__name__ == "LocalEntryNotFoundError":
            raise ValueError(
                f"jumanji:{env_id} builds its levels from a Hugging Face dataset that is not in the local cache "
                f"(jaxrl_async downloads nothing while it runs): fetch it once, e.g. huggingface-cli download "
                f"InstaDeepAI/boxoban-levels unfiltered-train.npy for Sokoban-v0, then build again "
                f"({type(error).__name__}: {error})") from error
        raise ValueError(f"jumanji could not build {env_id} with env_kwargs {env_kwargs}: "
                         f"{type(error).__name__}: {error}") from error
    return JumanjiEnv(env_id, env, max_steps_in_episode)
