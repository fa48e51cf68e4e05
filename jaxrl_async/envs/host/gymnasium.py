"""Host environments: `--env gymnasium:<id>`, any registered gymnasium 1.x id, stepped in NumPy;
`make_host_env` also hands `--env envpool:<id>` to `envpool.py` (both on `vec.py`'s base).

    spec = make_host_env("gymnasium:CartPole-v1")       # spaces (as gymnax spaces), checked early
    envs = spec.make_vec(num_envs=4)                      # a GymnasiumVecEnv (a vec.HostVecEnv)
    obs = envs.reset(seeds=[0, 1, 2, 3])
    step = envs.step(actions)                             # a HostStep of [B] / [B, ...] arrays

**Autoreset.** gymnasium 1.x vector envs default to NEXT_STEP autoreset: the step *after* an episode
ends ignores its action and returns the reset observation with a dummy transition (reward 0, not
done). Recording that step would teach the learner a transition that never happened. The vector env
here is built with `autoreset_mode=SAME_STEP` instead: the step that ends an episode returns the
reset observation as `obs` and the pre-reset one in `info["final_obs"]`, so every step is a real
transition; `HostStep.final_obs` is that pre-reset observation (the truncation bootstrap's input),
equal to `obs` wherever the episode went on. gymnasium's native vector entry points (e.g.
CartPoleVectorEnv) support NEXT_STEP only, so they are not used: at 4 envs the sync vector env was
the faster of the two anyway (README, "Host environments").

Spaces map to ours (`spaces.from_gymnasium`): observations may be a `Box`, a `Discrete` or a
`Dict` / `Tuple` of them, nested (each env's observation is then a pytree of float32 `[B, ...]`
arrays, one leaf per entry, and the network encodes each leaf); actions a `Discrete` (start 0), a
`MultiDiscrete` or a flat `Box`. Any other space raises a clear error naming it. gymnasium is
imported only when a host env is asked for.
"""

from __future__ import annotations

import difflib
from typing import Any

import jax
import numpy as np

from jaxrl_async.config import ENVPOOL_PREFIX, GYMNASIUM_PREFIX, host_env_kind
from jaxrl_async.envs.host.vec import HostEnvSpec, HostVecEnv, set_row, to_gymnax_space


class GymnasiumVecEnv(HostVecEnv):
    """`num_envs` gymnasium envs in a SAME_STEP vector env."""

    def __init__(self, vec_env: Any, observation_space: Any, action_space: Any):
        super().__init__(vec_env.num_envs, observation_space, action_space)
        self._env = vec_env

    def _reset(self, seeds: list[int]) -> Any:
        obs, _ = self._env.reset(seed=seeds)
        return self._observation(obs)

    def _step(self, actions: np.ndarray) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
        obs, reward, terminated, truncated, info = self._env.step(actions)
        obs = self._observation(obs)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        final_obs = obs
        if (terminated | truncated).any():  # the ended envs' pre-reset observations, one env (a pytree) each
            final_obs = jax.tree.map(np.copy, obs)
            for i in np.flatnonzero(info["_final_obs"]):
                set_row(self._obs_shape, final_obs, i, self._observation(info["final_obs"][i]))
        return obs, final_obs, np.asarray(reward, np.float32), terminated, truncated

    def close(self) -> None:
        self._env.close()


def _gymnasium_id(name: str) -> Any:
    import gymnasium as gym

    try:
        return gym.spec(name)
    except gym.error.Error:
        known = sorted(gym.registry)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = "did you mean " + ", ".join(f"'gymnasium:{c}'" for c in close) + "?" if close else "no close matches."
        raise ValueError(f"env={GYMNASIUM_PREFIX + name!r} is unknown: gymnasium has no env {name!r}; {hint} "
                         f"(gymnasium.pprint_registry() lists the {len(known)} registered ids)") from None


def make_host_env(env_id: str, **env_kwargs: Any) -> HostEnvSpec:
    """Check a host env id and read its spaces (gymnasium: one env is built and closed).

    Raises:
      ValueError: an unknown id (with close matches), an unsupported space, a missing optional extra
        (naming the pip command), or an id that is not a host env.
    """
    kind = host_env_kind(env_id)
    name = env_id.split(":", 1)[1] if kind else env_id
    if kind == ENVPOOL_PREFIX and name:
        from jaxrl_async.envs.host.envpool import make_envpool_env  # imported only when asked for

        return make_envpool_env(env_id, **env_kwargs)
    if kind != GYMNASIUM_PREFIX or not name:
        raise ValueError(f"env={env_id!r} is not a host env id: write gymnasium:<id> or envpool:<id>, e.g. "
                         "gymnasium:CartPole-v1")
    import gymnasium as gym

    spec = _gymnasium_id(name)
    try:
        probe = gym.make(name, disable_env_checker=True, **env_kwargs)
    except gym.error.DependencyNotInstalled as error:
        raise ValueError(f"env={env_id!r} needs an optional dependency: {error} (for MuJoCo envs: "
                         "pip install -e '.[mujoco]')") from None
    try:
        observation_space = to_gymnax_space(probe.observation_space, f"env={env_id!r}: its observation")
        action_space = to_gymnax_space(probe.action_space, f"env={env_id!r}: its action")
    finally:
        probe.close()

    def make_vec(num_envs: int) -> GymnasiumVecEnv:
        vec = gym.make_vec(name, num_envs=num_envs, vectorization_mode="sync", disable_env_checker=True,
                           vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}, **env_kwargs)
        return GymnasiumVecEnv(vec, observation_space, action_space)

    return HostEnvSpec(env_id, observation_space, action_space, spec.max_episode_steps, make_vec)
