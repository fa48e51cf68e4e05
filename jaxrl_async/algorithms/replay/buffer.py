"""A replay buffer on the device: a fixed-capacity ring of transitions with n-step sampling.

    buffer = replay.init(example, capacity_rows=C)         # example: one step's transitions, leaves [B, ...]
    buffer = replay.add(buffer, transitions)               # transitions: leaves [T, B, ...] (T <= C)
    batch = replay.sample(buffer, key, batch_size=128, n_step=3, gamma=0.99)

    # prioritised (proportional, `priority.py`): a ring made with `prioritised=True`
    buffer = replay.init(example, capacity_rows=C, prioritised=True)
    batch = replay.sample(buffer, key, ..., weight_exponent=beta)   # + batch["weight"]
    buffer = replay.update_priorities(buffer, batch["row"], batch["env"], td_abs, exponent=alpha, epsilon=eps)

The ring keeps time order per env: storage leaves are `[C, B, ...]` (C rows of time, B envs,
capacity C * B transitions), so an n-step window is the rows after the sampled one in the
same env column. A transition is the rollout's record of one step: `obs`, `action`,
`reward`, `terminated`, `truncated` and `next_obs`, the observation after acting *before*
any auto-reset (gymnax's `final_observation`). Observations may be pytrees.

n-step returns (`n_step_target`) stop at the first step that ends an episode: a terminated
one bootstraps with discount 0, a truncated one (the time limit) bootstraps from its
pre-reset `next_obs`; a window never runs past the newest row written.

Prioritised replay keeps a priority per cell, `[C, B]` beside the storage (so it is donated,
checkpointed and stripped with it): a new row gets the largest priority seen, a sampled
cell gets (|TD error| + epsilon)^alpha after its gradient step, and a never-written cell
keeps 0, so it is never drawn. A uniform ring holds no priorities (`None`), and its draws
are the same `randint` calls as before prioritised replay existed.

Why our own ring rather than flashbax (0.1.3 installs here and would hold our pytrees and
be donated like any state): the part that needs care, the n-step rule over terminations,
truncations and the pre-reset observation, is ours to write either way (flashbax samples
fixed-length sequences and leaves the returns to the caller), and what is left is a
scatter into `[C, B]` rows and a uniform draw — about fifty lines, against a dependency
(and its orbax/optax pins) that must earn its place. The state is a plain flax struct, so
it is donated with the train state (the fused loop's `donate_argnums=0`), written in place
by XLA's scatter, and checkpointed by the same msgpack code as everything else.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.algorithms.replay import priority

TRANSITION_FIELDS = ("obs", "action", "reward", "terminated", "truncated", "next_obs")


@struct.dataclass
class ReplayBuffer:
    """The ring's state.

    Attributes:
      storage: dict of `TRANSITION_FIELDS`, leaves `[C, B, ...]` (empty in a checkpoint saved
        without the buffer: `strip`).
      position: `[]` int32, the next row to write.
      size: `[]` int32, rows written so far, at most C.
      priorities: `[C, B]` float32, each cell's p^alpha (0 where never written); None for a
        uniform ring (and in a checkpoint saved without the buffer).
      max_priority: `[]` float32, the largest priority stored so far (new rows get it); None
        with `priorities`.
    """

    storage: Any
    position: jax.Array
    size: jax.Array
    priorities: Any = None
    max_priority: Any = None

    @property
    def capacity_rows(self) -> int:
        return jax.tree.leaves(self.storage)[0].shape[0]

    @property
    def num_envs(self) -> int:
        return jax.tree.leaves(self.storage)[0].shape[1]


def init(example: dict, capacity_rows: int, *, prioritised: bool = False) -> ReplayBuffer:
    """An empty ring of `capacity_rows` rows shaped like `example` (leaves `[B, ...]`, one step);
    `prioritised`: with a priority per cell (all 0; the first rows written get 1)."""
    if capacity_rows < 1:
        raise ValueError(f"capacity_rows={capacity_rows} must be >= 1")
    storage = jax.tree.map(lambda x: jnp.zeros((capacity_rows,) + x.shape, x.dtype), example)
    buffer = ReplayBuffer(storage=storage, position=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))
    if not prioritised:
        return buffer
    num_envs = jax.tree.leaves(example)[0].shape[0]
    return buffer.replace(priorities=jnp.zeros((capacity_rows, num_envs), jnp.float32),
                          max_priority=jnp.ones((), jnp.float32))


def add(buffer: ReplayBuffer, transitions: dict) -> ReplayBuffer:
    """Write T rows `transitions` (leaves `[T, B, ...]`) after the newest, overwriting the oldest."""
    capacity = buffer.capacity_rows
    num_rows = jax.tree.leaves(transitions)[0].shape[0]
    if num_rows > capacity:
        raise ValueError(f"cannot add {num_rows} rows to a ring of {capacity}: the replay capacity must hold "
                         "at least one rollout (num_steps rows of num_envs transitions)")
    chex.assert_trees_all_equal_shapes_and_dtypes(
        jax.tree.map(lambda x: x[0], transitions), jax.tree.map(lambda x: x[0], buffer.storage))
    rows = (buffer.position + jnp.arange(num_rows)) % capacity
    # a scatter into the donated storage: XLA writes the rows in place
    storage = jax.tree.map(lambda store, new: store.at[rows].set(new), buffer.storage, transitions)
    if buffer.priorities is not None:  # new transitions: the largest priority seen, so each is drawn soon
        buffer = buffer.replace(priorities=buffer.priorities.at[rows].set(buffer.max_priority))
    return buffer.replace(storage=storage, position=(buffer.position + num_rows) % capacity,
                          size=jnp.minimum(buffer.size + num_rows, capacity))


def n_step_target(r_t: jax.Array, terminated_t: jax.Array, truncated_t: jax.Array, valid_t: jax.Array,
                  gamma: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The n-step return from one sampled step, stopping where its episode ends.

    With m the steps used — the first k (1-based) whose step ends the episode (terminated or
    truncated), else n, and never a step that is not `valid` (not yet written):

        return   = sum_{k < m} gamma^k r_{t+k}
        discount = gamma^m (1 - terminated_{t+m-1})
        Q-target = return + discount * max_a Q(next_obs_{t+m-1}, a)

    so a termination bootstraps nothing and a truncation bootstraps from its pre-reset
    observation (Sutton & Barto 2018, sec. 7.1; Pardo et al. 2018 for time limits).

    Args:
      r_t, terminated_t, truncated_t, valid_t: `[n]`, the window's steps t, t+1, ..., t+n-1 of
        one env; `valid_t[0]` must be true (the sampled step itself).
      gamma: the discount.

    Returns:
      n_step_return: `[]` float32.
      discount: `[]` float32, the bootstrap's weight.
      last: `[]` int32, m - 1: the window index whose `next_obs` is the bootstrap observation.
    """
    chex.assert_rank([r_t, terminated_t, truncated_t, valid_t], 1)
    chex.assert_equal_shape([r_t, terminated_t, truncated_t, valid_t])
    n = r_t.shape[0]
    ends = terminated_t | truncated_t
    # step k is used if every earlier step went on and step k exists
    goes_on = jnp.concatenate([jnp.ones((1,), bool), ~ends[:-1] & valid_t[1:]])
    used = jnp.cumprod(goes_on.astype(jnp.int32)).astype(bool)
    powers = gamma ** jnp.arange(n, dtype=jnp.float32)
    n_step_return = jnp.sum(jnp.where(used, powers * r_t.astype(jnp.float32), 0.0))
    num_used = jnp.sum(used.astype(jnp.int32))
    last = num_used - 1
    discount = jnp.float32(gamma) ** num_used.astype(jnp.float32) * (1.0 - terminated_t[last].astype(jnp.float32))
    return n_step_return, discount, last


def sample_indices(buffer: ReplayBuffer, key: jax.Array, batch_size: int) -> tuple[jax.Array, jax.Array]:
    """`[batch_size]` rows and env columns, uniform over the transitions written (the buffer
    must hold at least one row)."""
    row_key, env_key = jax.random.split(key)
    rows = jax.random.randint(row_key, (batch_size,), 0, jnp.maximum(buffer.size, 1))
    envs = jax.random.randint(env_key, (batch_size,), 0, buffer.num_envs)
    return rows, envs


def sample(buffer: ReplayBuffer, key: jax.Array, *, batch_size: int, n_step: int, gamma: float,
           weight_exponent: jax.Array | float = 1.0) -> dict:
    """`batch_size` transitions drawn uniformly (or, from a prioritised ring, in proportion to
    their priorities), with their n-step targets' parts.

    Returns a dict: `obs` `[N, ...]`, `action` `[N]`, `n_step_return` `[N]`, `discount` `[N]`
    (gamma^m, 0 after a termination), `bootstrap_obs` `[N, ...]` (the `next_obs` of the
    window's last step: the pre-reset observation where the time limit cut the episode), and
    the cells drawn, `row` and `env` `[N]` int32. A prioritised ring adds `weight` `[N]`, the
    importance weights with exponent `weight_exponent` (beta; `priority.importance_weights`).
    """
    capacity = buffer.capacity_rows
    extra = {}
    if buffer.priorities is None:
        rows, envs = sample_indices(buffer, key, batch_size)
    else:
        num_written = jnp.maximum(buffer.size, 1) * buffer.num_envs
        cells, probabilities = priority.sample_proportional(buffer.priorities, num_written, key, batch_size)
        rows, envs = cells // buffer.num_envs, cells % buffer.num_envs
        extra["weight"] = priority.importance_weights(probabilities, num_written, weight_exponent)
    window_rows = (rows[:, None] + jnp.arange(n_step)) % capacity  # [N, n]
    # rows written at or after the sampled one, in time order: (position - 1 - row) mod C + 1
    available = (buffer.position - 1 - rows) % capacity + 1
    valid = jnp.arange(n_step)[None, :] < available[:, None]
    window = {f: buffer.storage[f][window_rows, envs[:, None]] for f in ("reward", "terminated", "truncated")}
    n_step_return, discount, last = jax.vmap(n_step_target, in_axes=(0, 0, 0, 0, None))(
        window["reward"], window["terminated"], window["truncated"], valid, gamma)
    bootstrap_rows = window_rows[jnp.arange(batch_size), last]
    pick = lambda tree, r: jax.tree.map(lambda x: x[r, envs], tree)
    return dict(obs=pick(buffer.storage["obs"], rows), action=buffer.storage["action"][rows, envs],
                n_step_return=n_step_return, discount=discount,
                bootstrap_obs=pick(buffer.storage["next_obs"], bootstrap_rows), row=rows, env=envs, **extra)


def update_priorities(buffer: ReplayBuffer, rows: jax.Array, envs: jax.Array, td_abs: jax.Array, *,
                      exponent: float, epsilon: float) -> ReplayBuffer:
    """The sampled cells' priorities set to (|TD error| + epsilon)^alpha, and the largest seen
    raised to match; rows, envs, td_abs `[N]`. A cell drawn twice takes the larger of its values:
    DQN's two are equal, but SAC's and TD3's targets draw their own next actions, and which of two
    writes to one cell a scatter keeps is up to the backend (a GPU's may differ run to run)."""
    new = priority.from_td_error(td_abs, exponent, epsilon)
    cleared = buffer.priorities.at[rows, envs].set(0.0)  # every value written here is the same
    return buffer.replace(priorities=cleared.at[rows, envs].max(new),
                          max_priority=jnp.maximum(buffer.max_priority, jnp.max(new)))


def transitions_of(trajectory) -> dict:
    """The rollout's `[T, B]` record as the buffer's transitions."""
    return {f: getattr(trajectory, f) for f in TRANSITION_FIELDS}


def cut_episodes(buffer: ReplayBuffer) -> ReplayBuffer:
    """The newest row of each env column marked truncated (where not terminated): for a resumed
    run whose envs start new episodes (host envs, whose state a checkpoint does not hold), the
    next row written belongs to another episode, so an n-step window must stop before it; a
    truncated step bootstraps from its own `next_obs`, the observation the run stopped at. One
    buffer, no seed axis (`jax.vmap` it over seeds); an empty one is returned as it is."""
    newest = (buffer.position - 1) % buffer.capacity_rows
    truncated, terminated = buffer.storage["truncated"], buffer.storage["terminated"]
    ends = truncated[newest] | (~terminated[newest] & (buffer.size > 0))
    return buffer.replace(storage={**buffer.storage, "truncated": truncated.at[newest].set(ends)})


# -- checkpoints without the buffer ------------------------------------------
def _is_buffer(x) -> bool:
    return isinstance(x, ReplayBuffer)


def strip(tree: Any) -> Any:
    """`tree` with every buffer's storage dropped (position and size zero): what a checkpoint
    saved without `--checkpoint-replay` holds."""
    return jax.tree.map(lambda x: ReplayBuffer({}, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
                        if _is_buffer(x) else x, tree, is_leaf=_is_buffer)  # priorities, max_priority: None


def graft(stripped: Any, fresh: Any) -> Any:
    """`stripped` with each buffer taken from `fresh` (same structure otherwise): a restored
    state whose buffers start empty and refill."""
    return jax.tree.map(lambda s, f: f if _is_buffer(s) else s, stripped, fresh, is_leaf=_is_buffer)


def gradient_steps_once_ready(gradient_step, carry: Any, key: jax.Array, *, num_steps: int,
                              ready: jax.Array) -> tuple[Any, dict]:
    """`num_steps` scanned `gradient_step(carry, key) -> (carry, metrics)` calls where `ready` (the
    buffer holds `learning_starts` transitions), else none; returns the carry and the steps' mean
    metrics (zeros of the same shapes while waiting). Shared by the replay learners."""

    def learn(carry):
        carry, metrics = jax.lax.scan(gradient_step, carry, jax.random.split(key, num_steps))
        return carry, jax.tree.map(jnp.mean, metrics)

    def wait(carry):
        shapes = jax.eval_shape(learn, carry)[1]
        return carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    return jax.lax.cond(ready, learn, wait, carry)
