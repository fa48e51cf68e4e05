"""Host environments: `--env gymnasium:<id>`, any registered gymnasium 1.x id, stepped in NumPy;
`make_host_env` also hands `--env envpool:<id>` to `envpool.py` (both on `vec.py`'s base).

    spec = make_host_env("gymnasium:CartPole-v1")       # spaces (as gymnax spaces), checked early
    envs = spec.make_vec(num_envs=4)                      # a GymnasiumVecEnv (a vec.HostVecEnv)
    obs = envs.reset(seeds=[0, 1, 2, 3])
    step = envs.step(actions)                             # a HostStep of [B] / [B, ...] arrays

**Autoreset.** gymnasium 1.x vector envs default to NEXT_STEP autoreset: the step *after* an episode
ends ignores its action and returns the reset observation with a dummy transition (reward 0, not
done). Recording that step would teach the learner a transition that never happened. The vector env
here steps SAME_STEP instead (as gymnasium's `autoreset_mode=SAME_STEP`): the step that ends an
episode resets the env at once and returns the reset observation as `obs`, so every step is a real
transition; `HostStep.final_obs` is the pre-reset observation (the truncation bootstrap's input),
equal to `obs` wherever the episode went on. gymnasium's native vector entry points (e.g.
CartPoleVectorEnv) support NEXT_STEP only, so they are not used: at 4 envs the sync vector env was
the faster of the two anyway (README, "Host environments"), and this loop is faster than both.

Spaces map to ours (`spaces.from_gymnasium`): observations may be a `Box`, a `Discrete` or a
`Dict` / `Tuple` of them, nested (each env's observation is then a pytree of float32 `[B, ...]`
arrays, one leaf per entry, and the network encodes each leaf; a Discrete one reaches it one-hot,
a uint8 image in [0, 1] with its channels last: `observations`); actions a `Discrete` (start 0), a
`MultiDiscrete` or a flat `Box`. Any other space raises a clear error naming it. gymnasium is
imported only when a host env is asked for.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np

from jaxrl_async.config import ENVPOOL_PREFIX, GYMNASIUM_PREFIX, host_env_kind, refused_env_kwargs
from jaxrl_async.envs.host.vec import HostEnvSpec, HostVecEnv, observation_space_of, to_gymnax_space


class GymnasiumVecEnv(HostVecEnv):
    """`num_envs` gymnasium envs stepped in turn with SAME_STEP autoreset: gymnasium's sync vector
    env's loop and batching (`gymnasium.vector.utils.concatenate`), the same steps, resets and
    observations, without what it adds per env and step that the actor does not use: an info dict
    merged into the batch's, a deep copy of the batch and an iterator over the actions. Those cost
    more than a classic-control step itself (docs/host_envs.md, "A lean vector env")."""

    def __init__(self, envs: list, observation_space: Any, action_space: Any):
        super().__init__(len(envs), observation_space, action_space)
        import gymnasium
        from gymnasium.vector.utils import concatenate, create_empty_array

        self._envs = envs
        single_space = envs[0].observation_space
        if isinstance(single_space, gymnasium.spaces.Box) and self._convert is None:
            # one array: each observation cast to float32 on its way into the batch, as stacking in
            # the space's float dtype and then casting gives, in one NumPy call instead of four
            self._batch = lambda observations: np.asarray(observations, dtype=np.float32)
        else:
            self._batch = lambda observations: self._observation(
                concatenate(single_space, observations, create_empty_array(single_space, len(observations))))

    def _reset(self, seeds: list[int]) -> Any:
        return self._batch([env.reset(seed=seed)[0] for env, seed in zip(self._envs, seeds)])

    def _step(self, actions: np.ndarray) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
        observations, rewards, terminated, truncated = [], [], [], []
        finals = None  # the ended envs' pre-reset observations, by index
        for i, (env, action) in enumerate(zip(self._envs, actions)):
            obs, reward, term, trunc, _ = env.step(action)
            if term or trunc:  # reset now: the next step acts on the reset observation
                finals = finals or {}
                finals[i] = obs
                obs, _ = env.reset()
            observations.append(obs)
            rewards.append(reward)
            terminated.append(term)
            truncated.append(trunc)
        obs = self._batch(observations)
        final_obs = obs if finals is None else self._batch([finals.get(i, o) for i, o in enumerate(observations)])
        # each reward rounded once, to float32 (as a float64 batch cast to float32 would be)
        return (obs, final_obs, np.array(rewards, np.float32), np.array(terminated, bool),
                np.array(truncated, bool))

    def close(self) -> None:
        for env in self._envs:
            env.close()


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
    except TypeError as error:
        if not env_kwargs:
            raise
        raise refused_env_kwargs(env_id, env_kwargs, error) from error
    try:
        observation_space = observation_space_of(probe.observation_space, env_id)
        action_space = to_gymnax_space(probe.action_space, f"env={env_id!r}: its action")
        # the made env's limit: `--env-kwargs max_episode_steps=N` sets it over the registry's, and
        # the evaluator plays episodes up to it
        max_episode_steps = probe.spec.max_episode_steps if probe.spec is not None else spec.max_episode_steps
    finally:
        probe.close()

    def make_vec(num_envs: int) -> GymnasiumVecEnv:
        envs = [gym.make(name, disable_env_checker=True, **env_kwargs) for _ in range(num_envs)]
        return GymnasiumVecEnv(envs, observation_space, action_space)

    return HostEnvSpec(env_id, observation_space, action_space, max_episode_steps, make_vec)
