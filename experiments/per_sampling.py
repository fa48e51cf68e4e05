"""The cost of prioritised replay's draw at capacity 1e5: our two-level prefix sum
(`priority.sample_proportional`) against the uniform draw, one prefix sum over all cells,
`jax.random.categorical`, and a sum tree (a prototype here, for the comparison).

    python -m experiments.per_sampling [--capacity 100000] [--num-envs 8] [--batch-size 64] [--draws 128]

Each case is one jitted call of `--draws` scanned draws of `--batch-size` cells (one iteration
of the tuned CartPole config: 128 gradient steps of 64), with the priority update after each
draw where the case has one; the cases alternate (A B C ... A B C ...), and the table gives the
median microseconds per draw over the repeats. The `replay.sample` rows are the whole sample
(with its n-step window and gathers; the prioritised one carries the priorities through the
scan as DQN's gradient steps do), the rest the index draw alone.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import tyro

from experiments.common import print_table, run_script


@dataclasses.dataclass(frozen=True)
class Args:
    capacity: int = 100_000
    """Transitions in the ring (capacity / num_envs rows, all written)."""
    num_envs: int = 8
    """Envs per row (B)."""
    batch_size: int = 64
    """Cells per draw."""
    draws: int = 128
    """Draws per jitted call (gradient steps per iteration; the categorical case: 2)."""
    repeats: int = 7
    """Timed calls per case, alternated."""


def sum_tree_cases(num_cells: int, batch_size: int):
    """A sum tree over `num_cells` leaves (`[2P]`, leaves at P..2P-1): draw and update, each a
    log2(P)-level loop of gathers or scatters (what the docstring of `priority.py` weighs)."""
    import jax
    import jax.numpy as jnp

    levels = max(1, math.ceil(math.log2(num_cells)))
    size = 2 ** levels

    def build(leaves):
        tree = jnp.zeros(2 * size, jnp.float32).at[size:size + num_cells].set(leaves)
        for level in range(levels - 1, -1, -1):
            first = 2 ** level
            nodes = jnp.arange(first, 2 * first)
            tree = tree.at[nodes].set(tree[2 * nodes] + tree[2 * nodes + 1])
        return tree

    def draw(tree, key):
        targets = jax.random.uniform(key, (batch_size,), jnp.float32, 0.0, tree[1])
        node = jnp.ones((batch_size,), jnp.int32)
        for _ in range(levels):
            left = tree[2 * node]
            go_right = targets >= left
            targets = jnp.where(go_right, targets - left, targets)
            node = 2 * node + go_right.astype(jnp.int32)
        return node - size

    def update(tree, cells, values):
        node = cells + size
        tree = tree.at[node].set(values)
        for _ in range(levels):
            node = node // 2
            tree = tree.at[node].set(tree[2 * node] + tree[2 * node + 1])
        return tree

    return build, draw, update


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = tyro.cli(Args, args=argv, description=__doc__)
    import jax
    import jax.numpy as jnp

    from jaxrl_async.algorithms.replay import priority
    from jaxrl_async.algorithms.replay import buffer as replay

    rows = args.capacity // args.num_envs
    num_cells = rows * args.num_envs
    example = dict(obs=jnp.zeros((args.num_envs, 4)), action=jnp.zeros((args.num_envs,), jnp.int32),
                   reward=jnp.zeros((args.num_envs,)), terminated=jnp.zeros((args.num_envs,), bool),
                   truncated=jnp.zeros((args.num_envs,), bool), next_obs=jnp.zeros((args.num_envs, 4)))
    full = jax.tree.map(lambda x: jnp.broadcast_to(x, (rows,) + x.shape), example)
    uniform = replay.add(replay.init(example, rows), full)
    prioritised = replay.add(replay.init(example, rows, prioritised=True), full)
    key = jax.random.PRNGKey(0)
    n = args.batch_size
    written = jnp.int32(num_cells)
    build, tree_draw, tree_update = sum_tree_cases(num_cells, n)
    tree = build(jnp.ones(num_cells))

    def scanned(step, draws):
        return jax.jit(lambda c, k: jax.lax.scan(step, c, jax.random.split(k, draws)))

    def td_of(k):
        return jax.random.uniform(jax.random.fold_in(k, 1), (n,))

    def flat_draw(p, k):  # one prefix sum over all cells (what `priority.sample_proportional` refines)
        cumulative = jnp.cumsum(p.reshape(-1))
        targets = jax.random.uniform(k, (n,), jnp.float32, 0.0, cumulative[-1])
        return jnp.minimum(jnp.searchsorted(cumulative, targets, side="right"), written - 1)

    def set_cells(p, cells, k):  # the priority update: one scatter of the batch's values
        return p.reshape(-1).at[cells].set(td_of(k)).reshape(p.shape)

    def prioritised_step(state, k):  # what a DQN gradient step does with the ring (priorities carried)
        view = prioritised.replace(priorities=state[0], max_priority=state[1])
        batch = replay.sample(view, k, batch_size=n, n_step=1, gamma=0.99, weight_exponent=0.4)
        view = replay.update_priorities(view, batch["row"], batch["env"], td_of(k), exponent=0.6, epsilon=1e-6)
        return (view.priorities, view.max_priority), batch["row"]

    start = prioritised.priorities
    cases = {
        "uniform draw (randint)": (lambda c, k: (c, replay.sample_indices(uniform, k, n)[0]), uniform.size),
        "two-level prefix-sum draw + update (ours)": (
            lambda p, k: (lambda cells: (set_cells(p, cells, k), cells))(
                priority.sample_proportional(p, written, k, n)[0]), start),
        "one prefix-sum draw + update": (lambda p, k: (lambda cells: (set_cells(p, cells, k), cells))(
            flat_draw(p, k)), start),
        "sum-tree draw + update": (lambda t, k: (lambda cells: (tree_update(t, cells, td_of(k)), cells))(
            tree_draw(t, k)), tree),
        "categorical (Gumbel) draw": (lambda p, k: (p, jax.random.categorical(k, jnp.log(p.reshape(-1)), shape=(n,))),
                                      start),
        "uniform replay.sample": (lambda c, k: (c, replay.sample(uniform, k, batch_size=n, n_step=1,
                                                                 gamma=0.99)["row"]), uniform.size),
        "prioritised replay.sample + update_priorities": (prioritised_step,
                                                          (prioritised.priorities, prioritised.max_priority)),
    }
    # Gumbel-max draws batch x cells random numbers: a few draws per call are enough to time it
    draws = {name: 2 if name.startswith("categorical") else args.draws for name in cases}
    compiled = {}
    for name, (step, carry) in cases.items():
        fn = scanned(step, draws[name])
        jax.block_until_ready(fn(carry, key))  # compile
        compiled[name] = (fn, carry)
    times = {name: [] for name in cases}
    for repeat in range(args.repeats):
        repeat_key = jax.block_until_ready(jax.random.fold_in(key, repeat))  # outside the timing: its first call compiles
        for name, (fn, carry) in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(carry, repeat_key))
            times[name].append((time.perf_counter() - start) / draws[name] * 1e6)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    base = medians["uniform draw (randint)"]
    print(f"capacity {num_cells:,} ({rows} rows x {args.num_envs} envs), {n} cells per draw, "
          f"{args.draws} draws per call, {args.repeats} alternated repeats, backend {jax.default_backend()}")
    print_table(["case", "us per draw (median)", "x uniform draw"],
                [[name, f"{t:,.1f}", f"{t / base:,.1f}"] for name, t in medians.items()])
    return medians


if __name__ == "__main__":
    run_script(main)
