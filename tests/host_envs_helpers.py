"""A hand-made gymnasium env whose episode ends are known, for tests/test_host_envs.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

SCRIPTED_ID = "JaxrlTest/Scripted-v0"  # time limit 4
DICT_ID = "JaxrlTest/DictObs-v0"


class ScriptedEnv(gym.Env):
    """obs = [t, parity of the reset seed]; reward = t after the step; an even seed's episode
    terminates at t = 3, an odd seed's runs on and is truncated by the registered time limit (4).
    The action adds 0.5 * action to the reward, so a recorded action can be checked."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._parity = seed % 2
        self._t = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self._t, self._parity], np.float32)

    def step(self, action):
        self._t += 1
        terminated = self._parity == 0 and self._t == 3
        return self._obs(), float(self._t) + 0.5 * int(action), terminated, False, {}


class DictObsEnv(ScriptedEnv):
    observation_space = gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})


def register() -> None:
    if SCRIPTED_ID not in gym.registry:
        gym.register(SCRIPTED_ID, entry_point=ScriptedEnv, max_episode_steps=4)
        gym.register(DICT_ID, entry_point=DictObsEnv, max_episode_steps=4)
