"""Partially observable versions of gymnax tasks: the velocities are hidden.

| id                    | observation                  | hidden                    |
|-----------------------|------------------------------|---------------------------|
| StatelessCartPole-v1  | cart position, pole angle    | both velocities           |
| StatelessPendulum-v1  | cos and sin of the angle     | angular velocity          |

A policy that sees one observation cannot tell which way the pole is moving; a
recurrent policy (`--core gru` or `lstm`) can infer it from the last few. The
dynamics, rewards and episode limits are the gymnax tasks' own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnax

from jaxrl_async.envs.wrappers import ObservationSubset


def _stateless(env_id: str, keep: tuple[int, ...]) -> Callable[..., Any]:
    def factory(**env_kwargs: Any) -> ObservationSubset:
        env, _ = gymnax.make(env_id, **env_kwargs)
        return ObservationSubset(env, keep)

    return factory


# CartPole observes [x, x_dot, theta, theta_dot]; Pendulum [cos, sin, theta_dot]
PARTIALLY_OBSERVABLE_ENVS: dict[str, Callable[..., Any]] = {
    "StatelessCartPole-v1": _stateless("CartPole-v1", (0, 2)),
    "StatelessPendulum-v1": _stateless("Pendulum-v1", (0, 1)),
}
