"""POPGym Arcade (Wang et al. 2025) as `--env popgym_arcade:ID`: `popgym_arcade:CartPoleEasy`, ...

The ids are its registry's (`popgym_arcade.registration.REGISTERED_ENVIRONMENTS`): ten games at
three difficulties, each a Discrete action and an [S, S, 3] image (`obs_size` 128 or 256), fully
observable or, with `partial_obs=true`, partially (the game hides what a memory must keep). The
image reaches the policy as float32 in [0, 1] (the suite's uint8 / 255, as its own baselines feed
it).

Its envs are gymnax 0.x envs: `step_env` returns `obs, state, reward, done, info`, with
`info["terminated"]` and `info["truncated"]`; the adapter calls `reset_env` / `step_env` (no
auto-reset of theirs) and splits `done` as each game's code defines the two:

- most games: `info["terminated"]` is the task's end, with no time limit in it;
- CartPole and NoisyCartPole put `done` itself in `info["terminated"]`; their `done` is
  `is_terminal` of the state *before* the step (the pole's fall is seen one step late), so the
  task's end is that state's `is_terminal` with its clock at 0;
- Tetris: its code names `lines_cleared >= 10` success, the time limit truncation and any other
  end a collision, and a collision on the time limit's step is not penalised: the same split here;
- Breakout overwrites its terminal flag with `done`: a ball lost on the very step the time limit
  ends (one step in 2000) counts as truncated, the two causes being indistinguishable there.

A step that is both is a termination (`SuiteEnv`). Every game has a time limit of its own;
`SuiteEnv`'s is set one step past it (CartPole's `done` comes a step late), so that the evaluator
knows how long an episode can last; it never ends an episode itself.

`env_kwargs` go to the game's constructor: `partial_obs`, `obs_size`.

Installing: popgym-arcade 0.0.7 depends on stable-gymnax, which installs a module named `gymnax`
(the 0.x API) over gymnax 1.0.1; install it without its dependencies (it needs only dm-pix and
jaxtyping besides). gymnax 1.x's `discount` asks an env for `is_terminated`, which these 0.x envs
call `is_terminal`: the adapter gives each env the one under the other's name.
"""

from __future__ import annotations

import dataclasses
from importlib import metadata
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

import popgym_arcade
from popgym_arcade.environments.breakout import Breakout
from popgym_arcade.environments.cartpole import CartPole
from popgym_arcade.environments.tetris import Tetris
from popgym_arcade.registration import REGISTERED_ENVIRONMENTS
from jaxrl_async.envs.suites.functional import SuiteEnv, SuiteParams

_TETRIS_LINES = 10  # Tetris's success: lines cleared (tetris.py, is_terminal)


def _stable_gymnax_installed() -> bool:
    try:
        metadata.distribution("stable-gymnax")
    except metadata.PackageNotFoundError:
        return False
    return True


if _stable_gymnax_installed():
    raise ValueError("stable-gymnax is installed (popgym-arcade's dependency): its `gymnax` module, the 0.x API, "
                     "has replaced gymnax 1.0.1's, which every gymnax env here needs. Repair: `pip uninstall "
                     "stable-gymnax && pip install --force-reinstall --no-deps gymnax==1.0.1`, and install "
                     "POPGym Arcade with `pip install --no-deps popgym-arcade==0.0.7 dm-pix jaxtyping`")


def env_ids() -> list[str]:
    return sorted(REGISTERED_ENVIRONMENTS)


def make(env_id: str, **env_kwargs: Any) -> "PopGymArcadeEnv":
    return PopGymArcadeEnv(env_id, **env_kwargs)


def _as_dict(state: Any) -> dict[str, jax.Array]:
    """A game's state (a chex dataclass, which checkpoints cannot write) as a dict of its fields, each
    an array of its own dtype (the reset's Python ints and bools are weakly typed when traced)."""
    return {f.name: jnp.asarray(getattr(state, f.name)).astype(jnp.asarray(getattr(state, f.name)).dtype)
            for f in dataclasses.fields(state)}


class PopGymArcadeEnv(SuiteEnv):
    """One POPGym Arcade game; `SuiteEnv` adds the auto-reset (see the module docstring)."""

    def __init__(self, env_id: str, **env_kwargs: Any):
        self.name = f"popgym_arcade:{env_id}"
        game, self.game_params = popgym_arcade.make(env_id, **env_kwargs)
        # gymnax 1.x's `discount`, which the games' steps call, asks for `is_terminated`
        game.is_terminated = game.is_terminal
        self._game = game
        # the class of the game's state, to rebuild it from our dict of its fields
        self._state_type = type(jax.eval_shape(game.reset_env, jax.random.PRNGKey(0), self.game_params)[1])
        limit = getattr(game, "max_steps_in_episode", None) or getattr(game, "max_episode_length")
        self.time_limit = int(limit)
        super().__init__(max_steps_in_episode=self.time_limit + 1)

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[jax.Array, Any]:
        obs, state = self._game.reset_env(key, self.game_params)
        return self._image(obs), _as_dict(state)

    def step_env(self, key: jax.Array, inner: dict, action: jax.Array, params: SuiteParams) -> tuple:
        inner = self._state_type(**inner)
        obs, state, reward, done, info = self._game.step_env(key, inner, action, self.game_params)
        done = jnp.asarray(done).astype(bool)
        if isinstance(self._game, CartPole):
            # its done is the state before the step's: the task's end there, the clock aside
            task_end = self._game.is_terminal(inner.replace(time=jnp.zeros_like(inner.time)), self.game_params)
        elif isinstance(self._game, Tetris):
            task_end = (state.lines_cleared >= _TETRIS_LINES) | ~jnp.asarray(info["truncated"]).astype(bool)
        elif isinstance(self._game, Breakout):
            task_end = ~jnp.asarray(info["truncated"]).astype(bool)
        else:
            task_end = jnp.asarray(info["terminated"]).astype(bool)
        terminated = done & task_end
        return self._image(obs), _as_dict(state), reward, terminated, done & ~terminated

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(int(self._game.action_space(self.game_params).n))

    def observation_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, tuple(self._game.observation_space(self.game_params).shape), jnp.float32)

    @staticmethod
    def _image(obs: jax.Array) -> jax.Array:
        return jnp.asarray(obs, jnp.float32) / 255.0
