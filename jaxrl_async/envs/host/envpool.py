"""EnvPool host environments: `--env envpool:<id>` (the optional extra: pip install -e '.[envpool]').

    spec = make_envpool_env("envpool:CartPole-v1")      # a HostEnvSpec, as host.make_host_env's
    envs = spec.make_vec(num_envs=4)                     # an EnvPoolVecEnv
    obs = envs.reset(seeds=[11, 12, 13, 14])             # env i seeded with seeds[i]
    step = envs.step(actions)                            # a HostStep (vec.py: SAME_STEP)

EnvPool steps a batch of C++ envs in one call, without Python per env. Its autoreset is
NEXT_STEP, like gymnasium's default: the step after an episode ends resets that env, ignores its
action and returns a dummy transition (reward 0, not done). `EnvPoolVecEnv` gives the steps the
actor records (vec.py, "Autoreset") instead: where a step ends an episode it resets those envs
at once (EnvPool's `reset(env_id)`), so that step returns their reset observations as `obs` and
the observations it reached as `final_obs`, and the next step acts on the reset observation with
the action it is given.

EnvPool fixes every env's seed when the pool is made (its `reset(seed=...)` is ignored), so
`reset(seeds)` makes a new pool with env i seeded by `seeds[i]` (`env_seed`). The pool runs its
envs on `num_threads` threads of its own: one by default, which stepped CartPole-v1 x 4 fastest on
the 2-core CPU (the actor thread already keeps a core busy; docs/host_envs.md, "EnvPool"); pass
num_threads through the env kwargs for envs whose step is dearer (MuJoCo) on a machine with cores
to spare.
"""

from __future__ import annotations

import contextlib
import difflib
import warnings
from typing import Any

import jax
import numpy as np

from jaxrl_async.config import ENVPOOL_PREFIX, refused_env_kwargs
from jaxrl_async.envs.host.vec import HostEnvSpec, HostVecEnv, observation_space_of, set_row, to_gymnax_space

ENVPOOL_MISSING = ("env {env_id!r} needs EnvPool, an optional extra that is not installed: pip install -e "
                   "'.[envpool]' (or pip install envpool; it publishes wheels for Linux), or use gymnasium:{name}")
DEFAULT_THREADS = 1
INT32_SEEDS = 2**31 - 1  # EnvPool takes int32 seeds; the actor's are drawn from [0, 2^32)


def _import_envpool() -> Any:
    import envpool

    return envpool


@contextlib.contextmanager
def _quiet_spaces():
    """EnvPool builds float64 gymnasium Boxes, which gymnasium warns it casts to float32: that is
    what the actor feeds the network anyway."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
        yield


class EnvPoolVecEnv(HostVecEnv):
    """An EnvPool batch of `num_envs` envs (gymnasium API), with SAME_STEP steps (module docstring)."""

    def __init__(self, name: str, num_envs: int, observation_space: Any, action_space: Any, **env_kwargs: Any):
        super().__init__(num_envs, observation_space, action_space)
        self._env: Any = None  # made by each reset
        self._name, self._env_kwargs = name, {"num_threads": DEFAULT_THREADS, **env_kwargs}

    def _reset(self, seeds: list[int]) -> Any:
        self.close()
        with _quiet_spaces():  # the pool builds its spaces at its first reset
            self._env = _import_envpool().make(self._name, env_type="gymnasium", num_envs=self.num_envs,
                                               env_seed=[seed % INT32_SEEDS for seed in seeds], **self._env_kwargs)
            obs, _ = self._env.reset()
        return self._observation(obs)

    def _step(self, actions: np.ndarray) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
        self._send(actions)
        return self._receive()

    def _send(self, actions: np.ndarray) -> None:
        self._env.send(actions)  # the pool's threads step the envs; the GIL is free meanwhile

    def _receive(self) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
        # a pool as big as its batch (EnvPool's sync mode) returns its envs in order
        obs, reward, terminated, truncated, _ = self._env.recv()
        final_obs = self._observation(obs)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        ended = np.flatnonzero(terminated | truncated)
        obs = final_obs
        if ended.size:  # reset the ended envs now, so this step's obs is theirs to act on next
            reset_obs, info = self._env.reset(ended.astype(np.int32))
            obs = jax.tree.map(np.copy, final_obs)
            set_row(self._obs_shape, obs, np.asarray(info["env_id"]), self._observation(reset_obs))
        return obs, final_obs, np.asarray(reward, np.float32), terminated, truncated

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def _known_id(envpool: Any, env_id: str, name: str) -> None:
    known = sorted(envpool.list_all_envs())
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = "did you mean " + ", ".join(f"'{ENVPOOL_PREFIX}{c}'" for c in close) + "?" if close else "no close matches."
    raise ValueError(f"env={env_id!r} is unknown: EnvPool has no env {name!r}; {hint} (envpool.list_all_envs() "
                     f"lists the {len(known)} ids)")


def make_envpool_env(env_id: str, **env_kwargs: Any) -> HostEnvSpec:
    """Check an `envpool:<id>` and read its spaces from EnvPool's spec (no env is built).

    Raises:
      ValueError: EnvPool not installed (naming the pip command), an unknown id (with close
        matches), or an unsupported space.
    """
    name = env_id[len(ENVPOOL_PREFIX):]
    try:
        envpool = _import_envpool()
    except ImportError:
        raise ValueError(ENVPOOL_MISSING.format(env_id=env_id, name=name)) from None
    _known_id(envpool, env_id, name)
    with _quiet_spaces():
        try:
            spec = envpool.make_spec(name, **env_kwargs)
        except TypeError as error:
            if not env_kwargs:
                raise
            raise refused_env_kwargs(env_id, env_kwargs, error) from error
        observation_space = observation_space_of(spec.gymnasium_observation_space, env_id)
        action_space = to_gymnax_space(spec.gymnasium_action_space, f"env={env_id!r}: its action")

    def make_vec(num_envs: int) -> EnvPoolVecEnv:
        return EnvPoolVecEnv(name, num_envs, observation_space, action_space, **env_kwargs)

    # a task that repeats its simulator's step (MuJoCo, Atari: `frame_skip`) steps long enough for one
    # group's envs to step while the actor acts for the other; a classic-control step is shorter than
    # the hand-over to the pool's thread, which is quickest on the actor's own core (docs/host_envs.md,
    # "Env groups" and "One core for the actor and its pool")
    steps_long = "frame_skip" in spec.config._fields
    return HostEnvSpec(env_id, observation_space, action_space, spec.config.max_episode_steps, make_vec,
                       double_buffers=steps_long, shares_actor_core=not steps_long)
