"""Probe environments: tiny gymnax envs whose correct value/policy is known.

Each isolates one part of a trainer (value fitting, observation use, credit
assignment over time, policy gradient, truncation bootstrapping, Gaussian
heads), so a learning bug shows up as a wrong number in seconds. All are real
gymnax `Environment`s: functional, jittable, vmappable; observations are
float32 vectors of shape (1,) (but see the Dict / Tuple ones); rewards float32 []; terminated bool [].

| id                     | actions     | steps | correct answer                      |
|------------------------|-------------|-------|-------------------------------------|
| Probe-ConstantReward   | Discrete(1) | 1     | V = 1                               |
| Probe-ObsReward        | Discrete(1) | 1     | V(obs) = obs (obs = +-1)            |
| Probe-TwoStep          | Discrete(1) | 2     | V([0]) = gamma, V([1]) = 1          |
| Probe-ActionReward     | Discrete(2) | 1     | pi(1) = 1, V = 1                    |
| Probe-ObsActionReward  | Discrete(2) | 1     | pi(a = [obs > 0]) = 1, V = 1        |
| Probe-Truncation       | Discrete(1) | 10    | V = 1 / (1 - gamma) everywhere      |
| Probe-ContinuousAction | Box[-2, 2]  | 1     | a* = 1, V = 0                       |
| Probe-Memory           | Discrete(2) | k + 1 | recall the first obs: reward 1 (0.5 without memory) |
| Probe-DictObs          | Discrete(3) | 1     | a = (s1 + s2) / 2 + 1, from both leaves of a Dict obs |
| Probe-TupleObs         | Discrete(3) | 1     | the same with a Tuple obs               |
| Probe-MultiDiscrete    | MultiDiscrete([2, 3]) | 1 | a = (1, 2) on [+1], (0, 0) on [-1] |
| Probe-ActionMask       | Discrete(3) | 2     | never an illegal action; a = 1 where legal, else 2 |

Probe-Memory's observations have shape (2,): [cue, query]. Probe-DictObs's are
{"vector": [s1], "image": [3, 3, 1]}, Probe-TupleObs's ([s1], [s2, -s2]), Probe-ActionMask's
{"observation": [t / 2], "action_mask": [0, m, 1]} (`spaces.ACTION_MASK`).
"""

from __future__ import annotations

import abc
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl_async.envs.spaces import ACTION_MASK, MultiDiscrete


@struct.dataclass
class ProbeState(environment.EnvState):
    """time: [] int32, steps taken this episode; sign: [] float32, +1 or -1."""

    time: jax.Array
    sign: jax.Array


@struct.dataclass
class ProbeParams(environment.EnvParams):
    max_steps_in_episode: int = 10


class ProbeEnv(environment.Environment[ProbeState, ProbeParams], abc.ABC):
    """Shared plumbing; a probe defines `reward` (abstract here), and `get_obs` and
    `is_terminated` where the defaults do not fit.

    Truncation is the time limit reached *without* natural termination, so a
    one-step probe terminates and never also truncates, whatever the limit.
    """

    env_id = "Probe-Base"

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def num_actions(self) -> int:
        return 1

    def action_space(self, params: ProbeParams | None = None) -> spaces.Space:
        return spaces.Discrete(self.num_actions)

    def observation_space(self, params: ProbeParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def reset_env(self, key: jax.Array, params: ProbeParams) -> tuple[jax.Array, ProbeState]:
        sign = jnp.where(jax.random.bernoulli(key), 1.0, -1.0).astype(jnp.float32)
        state = ProbeState(time=jnp.zeros((), jnp.int32), sign=sign)
        return self.get_obs(state, params), state

    def step_env(
        self, key: jax.Array, state: ProbeState, action: Any, params: ProbeParams
    ) -> tuple[jax.Array, ProbeState, jax.Array, jax.Array, dict[str, Any]]:
        reward = jnp.asarray(self.reward(state, action, params), jnp.float32)
        next_state = state.replace(time=state.time + 1)
        terminated = jnp.asarray(self.is_terminated(next_state, params), jnp.bool_)
        info = {"discount": 1.0 - terminated.astype(jnp.float32)}
        return self.get_obs(next_state, params), next_state, reward, terminated, info

    def is_truncated(self, state: ProbeState, params: ProbeParams) -> jax.Array:
        return jnp.logical_and(
            state.time >= params.max_steps_in_episode,
            jnp.logical_not(self.is_terminated(state, params)),
        )

    def get_obs(self, state: ProbeState, params: Any = None, key: Any = None) -> jax.Array:
        return jnp.zeros((1,), jnp.float32)

    @abc.abstractmethod
    def reward(self, state: ProbeState, action: Any, params: ProbeParams) -> jax.Array:
        """Reward for taking `action` in `state` (the pre-step state); each probe defines its own."""

    def is_terminated(self, state: ProbeState, params: ProbeParams) -> jax.Array:
        """Natural termination of the post-step `state`; one step by default."""
        return state.time >= 1


class ConstantRewardProbe(ProbeEnv):
    """One action, obs [0], one step, reward +1. Tests value fitting: V = 1."""

    env_id = "Probe-ConstantReward"

    def reward(self, state, action, params):
        return 1.0


class ObsRewardProbe(ProbeEnv):
    """Obs [+1] or [-1] at random, one step, reward = obs. Tests V(obs) = obs."""

    env_id = "Probe-ObsReward"

    def get_obs(self, state, params=None, key=None):
        return jnp.reshape(state.sign, (1,))

    def reward(self, state, action, params):
        return state.sign


class TwoStepProbe(ProbeEnv):
    """Obs [0] then [1]; reward 0 then +1; terminates after two steps.

    Tests discounting across a step: V([0]) = gamma, V([1]) = 1.
    """

    env_id = "Probe-TwoStep"

    def get_obs(self, state, params=None, key=None):
        # the terminal observation repeats [1]; it is never bootstrapped from
        return jnp.reshape(jnp.minimum(state.time, 1).astype(jnp.float32), (1,))

    def reward(self, state, action, params):
        return jnp.where(state.time == 1, 1.0, 0.0)

    def is_terminated(self, state, params):
        return state.time >= 2


class ActionRewardProbe(ProbeEnv):
    """Obs [0], two actions, one step; reward +1 for action 1, else 0."""

    env_id = "Probe-ActionReward"

    @property
    def num_actions(self) -> int:
        return 2

    def reward(self, state, action, params):
        return jnp.where(action == 1, 1.0, 0.0)


class ObsActionRewardProbe(ProbeEnv):
    """Obs [+1] or [-1]; reward +1 for action 1 on [+1] / action 0 on [-1], else 0.

    Tests that policy and value both condition on the observation.
    """

    env_id = "Probe-ObsActionReward"

    @property
    def num_actions(self) -> int:
        return 2

    def get_obs(self, state, params=None, key=None):
        return jnp.reshape(state.sign, (1,))

    def reward(self, state, action, params):
        correct_action = (state.sign > 0).astype(jnp.int32)
        return jnp.where(action == correct_action, 1.0, 0.0)


class TruncationProbe(ProbeEnv):
    """Never terminates; reward +1 each step; obs [time / max_steps] after the step.

    Truncated by the time limit (default 10 steps). Since truncation is not
    termination, V = 1 / (1 - gamma) in every state; a trainer that treats the
    time limit as terminal learns values that shrink toward the end. The final
    observation [1.0] differs from the reset observation [0.0], so a test can see
    which one a bootstrap read (tests/test_rollout.py); the learned values cannot
    tell, V being the same in both.
    """

    env_id = "Probe-Truncation"

    def get_obs(self, state, params=None, key=None):
        params = self.default_params if params is None else params
        fraction = state.time.astype(jnp.float32) / params.max_steps_in_episode
        return jnp.reshape(fraction, (1,))

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    def reward(self, state, action, params):
        return 1.0

    def is_terminated(self, state, params):
        return jnp.zeros((), jnp.bool_)


class ContinuousActionProbe(ProbeEnv):
    """Obs [0], Box action in [-2, 2] of shape (1,), one step, reward -(a - 1)^2.

    The env itself does not clip, so `ClipAction` is observable. Optimal a = 1.
    """

    env_id = "Probe-ContinuousAction"

    def action_space(self, params=None):
        return spaces.Box(-2.0, 2.0, (1,), jnp.float32)

    def reward(self, state, action, params):
        action = jnp.reshape(jnp.asarray(action, jnp.float32), (-1,))
        return -jnp.sum(jnp.square(action - 1.0))


MEMORY_DELAY = 3


class MemoryProbe(ProbeEnv):
    """A cue of +1 or -1 shown at the first step, a query `MEMORY_DELAY` steps later.

    Obs [cue, 0] at the first step, [0, 0] in between, [0, 1] at the query. The
    action at the query earns +1 if it names the cue (1 for +1, 0 for -1), else 0;
    other actions earn nothing; the episode ends after the query. The query's
    observation carries no trace of the cue, so a memoryless policy can only guess
    (expected return 0.5); a recurrent policy that remembers the cue earns 1.
    """

    env_id = "Probe-Memory"

    @property
    def num_actions(self) -> int:
        return 2

    def observation_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

    def get_obs(self, state, params=None, key=None):
        cue = jnp.where(state.time == 0, state.sign, 0.0)
        query = (state.time == MEMORY_DELAY).astype(jnp.float32)
        return jnp.stack([cue, query]).astype(jnp.float32)

    def reward(self, state, action, params):
        correct_action = (state.sign > 0).astype(jnp.int32)
        return jnp.where((state.time == MEMORY_DELAY) & (action == correct_action), 1.0, 0.0)

    def is_terminated(self, state, params):
        return state.time >= MEMORY_DELAY + 1


@struct.dataclass
class PairState(ProbeState):
    """A probe state with a second sign, shown in a second observation leaf."""

    other_sign: jax.Array


class DictObsProbe(ProbeEnv):
    """Obs {"vector": [s1], "image": 3x3x1 filled with s2}, signs +-1 at random; one step.

    Three actions; reward +1 for action (s1 + s2) / 2 + 1 (0: both -1, 1: they differ, 2: both
    +1), else 0. The answer needs BOTH leaves: a network that ignores one earns 0.5 at best. It
    is additive in the leaves, as the leaf encoders' features meet only in the linear heads of
    a feedforward network (an XOR of the leaves would need a joint layer after them). The
    image leaf goes through the CNN, the vector leaf through the MLP.
    """

    env_id = "Probe-DictObs"

    @property
    def num_actions(self) -> int:
        return 3

    def observation_space(self, params=None):
        return spaces.Dict({"vector": spaces.Box(-1.0, 1.0, (1,), jnp.float32),
                            "image": spaces.Box(-1.0, 1.0, (3, 3, 1), jnp.float32)})

    def reset_env(self, key, params):
        first, second = jax.random.bernoulli(key, shape=(2,))
        sign = lambda b: jnp.where(b, 1.0, -1.0).astype(jnp.float32)
        state = PairState(time=jnp.zeros((), jnp.int32), sign=sign(first), other_sign=sign(second))
        return self.get_obs(state, params), state

    def get_obs(self, state, params=None, key=None):
        return {"vector": jnp.reshape(state.sign, (1,)), "image": jnp.full((3, 3, 1), state.other_sign)}

    def reward(self, state, action, params):
        correct_action = ((state.sign + state.other_sign) / 2 + 1).astype(jnp.int32)
        return jnp.where(action == correct_action, 1.0, 0.0)


class TupleObsProbe(DictObsProbe):
    """Probe-DictObs with a Tuple observation of two vector leaves: ([s1], [s2, -s2])."""

    env_id = "Probe-TupleObs"

    def observation_space(self, params=None):
        return spaces.Tuple((spaces.Box(-1.0, 1.0, (1,), jnp.float32), spaces.Box(-1.0, 1.0, (2,), jnp.float32)))

    def get_obs(self, state, params=None, key=None):
        return (jnp.reshape(state.sign, (1,)), jnp.stack([state.other_sign, -state.other_sign]))


class MultiDiscreteProbe(ProbeEnv):
    """Obs [+1] or [-1], a MultiDiscrete([2, 3]) action, one step.

    Reward +1 only when every sub-action is right: (1, 2) on [+1], (0, 0) on [-1]; else 0 (a
    uniform policy earns 1/6, one that gets one sub-action right still 0).
    """

    env_id = "Probe-MultiDiscrete"

    def action_space(self, params=None):
        return MultiDiscrete([2, 3])

    def get_obs(self, state, params=None, key=None):
        return jnp.reshape(state.sign, (1,))

    def reward(self, state, action, params):
        positive = state.sign > 0
        correct = jnp.stack([jnp.where(positive, 1, 0), jnp.where(positive, 2, 0)])
        return jnp.where(jnp.all(action == correct), 1.0, 0.0)


MASK_EPISODE_LENGTH = 2
MASK_REWARDS = (1.0, 0.5, 0.0)  # per action, legal or not


@struct.dataclass
class MaskState(ProbeState):
    """A probe state with the actions' legality (`[3]` float32, 1 legal) and whether the last action
    was illegal."""

    mask: jax.Array
    illegal: jax.Array


class ActionMaskProbe(ProbeEnv):
    """Three actions whose legality the observation's action mask gives; episodes of
    `MASK_EPISODE_LENGTH` steps.

    Action 0 pays the most (1) and is never legal; action 1 pays 0.5 and is legal at a step with
    probability 1/2, drawn afresh at every step (so a policy must read the mask, not learn it);
    action 2 pays 0 and is always legal. An illegal action still pays, and ends the episode at
    once: a learner that ignores the mask is drawn to action 0 (at the last step above all), and
    every episode shorter than `MASK_EPISODE_LENGTH` steps is an illegal action taken. The right
    policy: action 1 where it is legal, else 2 (the observation [t / 2] shows the step; the
    encoders do not see the mask).
    """

    env_id = "Probe-ActionMask"

    @property
    def num_actions(self) -> int:
        return 3

    def observation_space(self, params=None):
        return spaces.Dict({"observation": spaces.Box(0.0, 1.0, (1,), jnp.float32),
                            ACTION_MASK: spaces.Box(0.0, 1.0, (3,), jnp.float32)})

    @staticmethod
    def draw_mask(key: jax.Array) -> jax.Array:
        return jnp.stack([0.0, jax.random.bernoulli(key).astype(jnp.float32), 1.0]).astype(jnp.float32)

    def reset_env(self, key, params):
        state = MaskState(time=jnp.zeros((), jnp.int32), sign=jnp.ones((), jnp.float32), mask=self.draw_mask(key),
                          illegal=jnp.zeros((), jnp.bool_))
        return self.get_obs(state, params), state

    def is_illegal(self, mask: jax.Array, action: jax.Array) -> jax.Array:
        return mask[jnp.asarray(action, jnp.int32)] < 0.5

    def step_env(self, key, state, action, params):
        reward = jnp.asarray(self.reward(state, action, params), jnp.float32)
        next_state = state.replace(time=state.time + 1, mask=self.draw_mask(key),
                                   illegal=self.is_illegal(state.mask, action))
        terminated = jnp.asarray(self.is_terminated(next_state, params), jnp.bool_)
        info = {"discount": 1.0 - terminated.astype(jnp.float32)}
        return self.get_obs(next_state, params), next_state, reward, terminated, info

    def get_obs(self, state, params=None, key=None):
        fraction = state.time.astype(jnp.float32) / MASK_EPISODE_LENGTH
        return {"observation": jnp.reshape(fraction, (1,)), ACTION_MASK: state.mask}

    def reward(self, state, action, params):
        return jnp.asarray(MASK_REWARDS, jnp.float32)[jnp.asarray(action, jnp.int32)]

    def is_terminated(self, state, params):
        return (state.time >= MASK_EPISODE_LENGTH) | state.illegal


PROBE_ENVS: dict[str, type[ProbeEnv]] = {
    cls.env_id: cls
    for cls in (
        ConstantRewardProbe,
        ObsRewardProbe,
        TwoStepProbe,
        ActionRewardProbe,
        ObsActionRewardProbe,
        TruncationProbe,
        ContinuousActionProbe,
        MemoryProbe,
        DictObsProbe,
        TupleObsProbe,
        MultiDiscreteProbe,
        ActionMaskProbe,
    )
}
