"""Proportional prioritised replay (Schaul et al. 2016, "Prioritized Experience Replay", sec. 3.3):
the draw, the importance weights and the priority rule, on plain arrays (`buffer.py` keeps
the priorities in the buffer; `tests/test_priority.py` checks these against NumPy).

    p_i      = (|delta_i| + epsilon)^alpha          stored per cell [C, B] (0: never written)
    P(i)     = p_i / sum_k p_k                      the draw
    w_i      = (N P(i))^-beta / max_j w_j           the loss weight (max over the sampled batch)
    beta     = beta_0 + (1 - beta_0) * progress     annealed linearly to 1 over the run

The stored value is already p^alpha, so the draw needs no alpha, and a transition never
sampled keeps the largest stored value seen (`add` gives it that), so it is likely drawn
soon. The weights' normaliser is the sampled batch's largest weight, as Dopamine's and Acme's
DQN do (the paper's "max_i w_i" leaves the set open; over the
whole buffer it would take one more pass over C*B cells for the smallest priority).

Why prefix sums over all C*B priorities at each draw, not a sum tree: the sum tree (the
paper's O(log n) draw and update) suits a process that draws one transition at a time; here
every gradient step draws a whole batch inside one jitted program, where a tree is ~2 log2(n)
dependent gather/scatter levels per draw and update (34 at n = 1e5, each a small op of its own
on the CPU's executor, a kernel launch on a GPU), while prefix sums are streaming passes XLA
vectorises and the update is one scatter. The draw here has two levels: the prefix sum of
~sqrt(n) block sums picks a block, the prefix sum inside each drawn block picks the cell
(one pass over the n cells, then O(sqrt n) per drawn cell; rounding grows with the shorter
sums). The draw's cost against the alternatives (a sum tree, one prefix sum, a Gumbel draw) is
measured in docs/learners.md, "Prioritised replay" (`python -m experiments.per_sampling`).
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp


def from_td_error(td_abs: jax.Array, exponent: float, epsilon: float) -> jax.Array:
    """(|delta| + epsilon)^alpha: what a sampled cell stores after its gradient step."""
    return (td_abs.astype(jnp.float32) + jnp.float32(epsilon)) ** jnp.float32(exponent)


def sample_proportional(priorities: jax.Array, num_written: jax.Array, key: jax.Array,
                        batch_size: int) -> tuple[jax.Array, jax.Array]:
    """`batch_size` cells drawn with probability priority / sum (with replacement).

    Args:
      priorities: `[C, B]` float32, >= 0; a row-major cell index i = row * B + env; cells
        at i >= num_written (never written) hold 0 and are never drawn.
      num_written: `[]` int32, the cells written (rows written * B, at least 1).
      key: PRNG key.
      batch_size: N.

    Returns:
      cells: `[N]` int32 flat cell indices (`divmod(cells, B)` gives rows and envs).
      probabilities: `[N]` float32, P(i) of each drawn cell.
    """
    chex.assert_rank(priorities, 2)
    flat = priorities.reshape(-1)
    # two levels: the prefix sum of ~sqrt(n) block sums picks a block, then the prefix sum inside
    # each drawn block picks the cell (one pass over the n cells for the block sums, instead of a
    # prefix sum over all n: the faster of the two on the CPU, python -m experiments.per_sampling)
    num_cells = flat.shape[0]
    block = 2 ** max(0, round(math.log2(math.sqrt(num_cells))))
    num_blocks = -(-num_cells // block)
    blocks = jnp.pad(flat, (0, num_blocks * block - num_cells)).reshape(num_blocks, block)
    block_ends = jnp.cumsum(jnp.sum(blocks, axis=1))
    total = block_ends[-1]
    targets = jax.random.uniform(key, (batch_size,), jnp.float32, 0.0, total)
    # rounding can put a target at or past the end of the written cells' sum: the tail beyond
    # them is never-written zeros, so the block (and then the cell) of the last written one takes it
    last_written = num_written - 1
    chosen = jnp.minimum(jnp.searchsorted(block_ends, targets, side="right"), last_written // block)
    residual = targets - jnp.where(chosen > 0, block_ends[chosen - 1], 0.0)
    within = jax.vmap(lambda ends, r: jnp.searchsorted(ends, r, side="right"))(jnp.cumsum(blocks[chosen], axis=1),
                                                                               residual)
    cells = jnp.minimum(chosen * block + jnp.minimum(within, block - 1), last_written).astype(jnp.int32)
    return cells, flat[cells] / total


def importance_weights(probabilities: jax.Array, num_written: jax.Array, exponent: jax.Array) -> jax.Array:
    """w = (N P)^-beta / max over the batch; `[N]` in (0, 1], the largest 1 (beta = 0: all 1)."""
    weights = (num_written.astype(jnp.float32) * probabilities) ** -exponent
    return weights / jnp.max(weights)


def annealed_exponent(initial: float, progress: jax.Array) -> jax.Array:
    """beta at `progress` in [0, 1] of the run: linear from `initial` to 1."""
    progress = jnp.clip(progress.astype(jnp.float32), 0.0, 1.0)
    return jnp.float32(initial) + (1.0 - jnp.float32(initial)) * progress
