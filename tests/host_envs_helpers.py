"""A hand-made gymnasium env whose episode ends are known, for tests/test_host_envs.py."""

from __future__ import annotations

import gymnasium as gym
import jax
import numpy as np

SCRIPTED_ID = "JaxrlTest/Scripted-v0"  # time limit 4
NESTED_ID = "JaxrlTest/Nested-v0"  # ScriptedEnv with Dict / Tuple observations, MultiDiscrete actions
TEXT_ID = "JaxrlTest/TextObs-v0"
FAILING_ID = "JaxrlTest/Failing-v0"  # ScriptedEnv failing at its 12th step


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


class NestedEnv(ScriptedEnv):
    """ScriptedEnv's episodes with a nested observation and a MultiDiscrete action:
    obs = {"t": [t, parity], "pair": (a 3x3 grid of t, t mod 4)}; reward = t + 0.5 a_0 + 0.25 a_1."""

    observation_space = gym.spaces.Dict({
        "t": gym.spaces.Box(-10.0, 10.0, (2,), np.float32),
        "pair": gym.spaces.Tuple((gym.spaces.Box(0.0, 10.0, (3, 3), np.float32), gym.spaces.Discrete(4)))})
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def _obs(self):
        return {"t": super()._obs(), "pair": (np.full((3, 3), self._t, np.float32), self._t % 4)}

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(0)
        return obs, float(self._t) + 0.5 * int(action[0]) + 0.25 * int(action[1]), terminated, truncated, info


class FailingEnv(ScriptedEnv):
    """ScriptedEnv whose simulator fails at its 12th step (of each env instance): a ValueError,
    as a real simulator's bad state might raise."""

    def __init__(self):
        self._steps = 0

    def step(self, action):
        self._steps += 1
        if self._steps == 12:
            raise ValueError("the simulator failed at step 12")
        return super().step(action)


class TextObsEnv(ScriptedEnv):
    """An observation space the trainer cannot take."""

    observation_space = gym.spaces.Text(5)


def register() -> None:
    if SCRIPTED_ID not in gym.registry:
        gym.register(SCRIPTED_ID, entry_point=ScriptedEnv, max_episode_steps=4)
        gym.register(NESTED_ID, entry_point=NestedEnv, max_episode_steps=4)
        gym.register(TEXT_ID, entry_point=TextObsEnv, max_episode_steps=4)
        gym.register(FAILING_ID, entry_point=FailingEnv, max_episode_steps=4)


def host_fragments(cfg, count: int = 2) -> tuple[list, object]:
    """`count` fragments of `cfg`'s host env (reset seeds 0 .. num_envs - 1) by its one host actor:
    each fragment's trajectory and the rollout state after them, on the host, without the seed axis."""
    from jaxrl_async.trainer.build import build, initial_states

    c = build(cfg)
    state = initial_states(c)
    device = jax.devices()[0]
    actor = c.rollout.actor(list(range(cfg.num_envs)), device, jax.sharding.SingleDeviceSharding(device))
    rollout, fragments = state.rollout, []
    for _ in range(count):
        rollout, trajectory = actor.collect(state.learner.params, rollout)
        fragments.append(jax.tree.map(lambda x: np.asarray(x[0]), trajectory))
    actor.close()
    return fragments, jax.tree.map(lambda x: np.asarray(x[0]), rollout)
