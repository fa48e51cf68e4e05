"""XLand-MiniGrid (`--env xminigrid:MiniGrid-Empty-8x8`), from xminigrid's own registry.

xminigrid's `Environment.step(params, timestep, action)` does not reset (its auto-reset lives in
the `GymAutoResetWrapper` / `DmEnvAutoResetWrapper`, which `xminigrid.make` does not apply), so
`SuiteEnv` resets in the step and keeps the last observation for the truncation bootstrap. The
inner state is xminigrid's `TimeStep` (its state holds the step count its time limit reads).

Termination vs truncation: xminigrid's dm_env-style step type with discount, as it sets them:
a LAST step with discount 0 is the goal reached (terminated), a LAST step with discount 1 the
time limit (`step_num == max_steps`: truncated); a step that is both has discount 0.

The observation is the agent's view, `[view_size, view_size, 2]` uint8 of (tile, colour) ids,
an image for the network's encoders (the CNN under `--torso auto`).

The XLand-MiniGrid-R* ids are meta-RL worlds whose task (goal and rules) is a ruleset from a
benchmark; without one xminigrid gives them an empty goal that never ends an episode. So they
need `benchmark` (a name from `xminigrid.registered_benchmarks()`, read from $XLAND_MINIGRID_DATA,
never downloaded while we run, or the path of a benchmark file) and `ruleset` (its index):
one fixed task per run.

env_kwargs:
  height, width, view_size, max_steps: xminigrid's `EnvParams` fields (max_steps is its time limit).
  benchmark, ruleset: the XLand ids' task (above).
  max_steps_in_episode: a time limit of ours on top (0: xminigrid's alone).
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import xminigrid
import xminigrid.benchmarks as xminigrid_benchmarks
from gymnax.environments import spaces
from xminigrid.benchmarks import load_benchmark_from_path
from xminigrid.core.constants import NUM_ACTIONS, NUM_COLORS, NUM_TILES

from jaxrl_async.envs.render import GRID_FPS, Renderer, num_states, state_at
from jaxrl_async.envs.suites.functional import SuiteEnv, SuiteParams

_LAST = 2  # xminigrid's StepType.LAST
XLAND_PREFIX = "XLand-MiniGrid"


def env_ids() -> list[str]:
    return list(xminigrid.registered_environments())


class XMiniGridEnv(SuiteEnv):
    """An xminigrid env and its params over its non-resetting step; see the module docstring."""

    steps_on_past_end = True  # a discrete world: see `SuiteEnv`

    def __init__(self, env_id: str, env: Any, env_params: Any, max_steps_in_episode: int = 0):
        super().__init__(max_steps_in_episode)
        self.name = f"xminigrid:{env_id}"
        self._env, self._env_params = env, env_params
        self._view = int(env_params.view_size)

    @property
    def xminigrid_params(self) -> Any:
        """xminigrid's own params (its time limit, sizes, an XLand env's ruleset)."""
        return self._env_params

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[jax.Array, Any]:
        timestep = self._env.reset(self._env_params, key)
        return timestep.observation, timestep

    def own_truncation_interval(self) -> int:
        # xminigrid truncates at `step_num == max_steps`, step_num restarted by each reset
        return int(self._env_params.max_steps)

    def step_env(self, key: jax.Array, timestep: Any, action: jax.Array, params: SuiteParams) -> tuple:
        timestep = self._env.step(self._env_params, timestep, jnp.asarray(action, jnp.int32))
        last = timestep.step_type == _LAST
        return (timestep.observation, timestep, timestep.reward, last & (timestep.discount == 0),
                last & (timestep.discount > 0))

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(int(NUM_ACTIONS))

    def renderer(self) -> Renderer:
        """xminigrid's RGB renderer (`Environment.render` in its 'rgb_array' mode: the whole grid, the
        agent's view highlighted), NumPy on the host."""
        env, params = self._env, self._env_params.replace(render_mode="rgb_array")

        def draw(timesteps: Any) -> Iterator[np.ndarray]:
            for index in range(num_states(timesteps)):
                yield np.asarray(env.render(params, state_at(timesteps, index)), np.uint8)

        return Renderer(select=lambda timestep: timestep, draw=draw, fps=GRID_FPS)

    def observation_space(self, params: Any = None) -> spaces.Box:
        shape = (self._view, self._view, 2)
        high = np.broadcast_to(np.asarray([NUM_TILES - 1, NUM_COLORS - 1], np.uint8), shape)
        return spaces.Box(np.zeros(shape, np.uint8), high, shape, jnp.uint8)


def _named_benchmark(name: str) -> Any:
    """xminigrid's benchmark `name`, from its data directory ($XLAND_MINIGRID_DATA, read when xminigrid
    is imported). Not xminigrid's `load_benchmark`, which downloads a file it does not find: nothing
    may download while we run, so a missing file is an error that names it, where to fetch it and
    the variable that points xminigrid to it."""
    filename = xminigrid_benchmarks.NAME2HFFILENAME[name]
    path = os.path.join(xminigrid_benchmarks.DATA_PATH, filename)
    if not os.path.exists(path):
        url = f"https://huggingface.co/datasets/{xminigrid_benchmarks.HF_REPO_ID}/resolve/main/{filename}"
        raise ValueError(
            f"benchmark={name!r} is not on disk ({path}), and jaxrl_async downloads nothing while it runs: fetch "
            f"it once ({url}) into that directory, set $XLAND_MINIGRID_DATA to the directory that holds {filename} "
            f"(xminigrid's data directory, default ~/.xland_minigrid), or give the benchmark file's path "
            "as --env-kwargs benchmark=PATH")
    return load_benchmark_from_path(path)


def _ruleset(env_id: str, benchmark: str | None, ruleset: int | None) -> Any:
    if benchmark is None or ruleset is None:
        raise ValueError(
            f"xminigrid:{env_id} needs a task: --env-kwargs benchmark=NAME ruleset=INDEX, NAME one of "
            f"{', '.join(xminigrid.registered_benchmarks())} (its file in "
            "$XLAND_MINIGRID_DATA) or a benchmark file's path; without one its goal is empty and no episode "
            "ever ends but by the time limit")
    if os.path.isfile(str(benchmark)):
        bench = load_benchmark_from_path(str(benchmark))
    elif benchmark in xminigrid.registered_benchmarks():
        bench = _named_benchmark(benchmark)
    else:
        raise ValueError(f"benchmark={benchmark!r} is neither a file nor one of xminigrid's benchmarks: choose one "
                         f"of {', '.join(xminigrid.registered_benchmarks())} or give a benchmark file's path")
    count = bench.num_rulesets()
    if not isinstance(ruleset, int) or not 0 <= ruleset < count:
        raise ValueError(f"ruleset={ruleset!r} must be an index into benchmark {benchmark!r}: 0 to {count - 1}")
    return bench.get_ruleset(ruleset)


def make(env_id: str, max_steps_in_episode: int = 0, benchmark: str | None = None, ruleset: int | None = None,
         **params: Any) -> XMiniGridEnv:
    xland = env_id.startswith(XLAND_PREFIX)
    if not xland and (benchmark is not None or ruleset is not None):
        raise ValueError(f"benchmark and ruleset are for the {XLAND_PREFIX}-* ids; xminigrid:{env_id} has its "
                         "task built in: drop them")
    env, env_params = xminigrid.make(env_id)
    unknown = sorted(set(params) - {field for field in env_params.__dataclass_fields__ if field != "ruleset"})
    if unknown:
        raise ValueError(f"env_kwargs {unknown} are not xminigrid params of {env_id}: choose from height, width, "
                         "view_size, max_steps (and benchmark, ruleset, max_steps_in_episode)")
    env_params = env_params.replace(**params)
    if xland:
        env_params = env_params.replace(ruleset=_ruleset(env_id, benchmark, ruleset))
    return XMiniGridEnv(env_id, env, env_params, max_steps_in_episode)
