"""How a jitted program runs over seeds: the seeds' keys, the vmap over the leading seed axis,
the first execution paid before the timing starts, and a program kept for the next run.

    keys = seed_keys(cfg.seed, cfg.num_seeds)                   # [S] keys, one per seed
    program = jax.jit(over_seeds(run_one_seed, cfg.num_seeds))  # every argument and output gains S
    compiled = program.lower(*args).compile()
    warm_up(compiled, *args)                                    # its first execution, with the compile
    program = keep_program(hook, name, make)                    # made once per name, where kept

The seed axis `S` leads every state and trajectory the loops hold, also for one seed. The
rollouts and the trainer's loops both build their programs this way, so it lives below both.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

# `program(name, make) -> make()'s jitted function`, kept by the caller (the one who builds the run's
# pieces) for its next run of the same pieces; None: made anew
ProgramHook = Callable[[Any, Callable[[], Callable]], Callable] | None


def keep_program(program: ProgramHook, name: Any, make: Callable[[], Callable]) -> Callable:
    return make() if program is None else program(name, make)


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """[S] keys; seed index i gets fold_in(PRNGKey(seed), i) whatever num_seeds is."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_seeds))


def over_seeds(fn: Callable, num_seeds: int) -> Callable:
    """vmap `fn` over the leading seed axis of every argument and output.

    With one seed the axis is squeezed and re-added instead, so the single-seed
    program is exactly the unbatched one.
    """
    if num_seeds > 1:
        return jax.vmap(fn)

    def single(*args):
        out = fn(*jax.tree.map(lambda x: x[0], args))
        return jax.tree.map(lambda x: x[None], out)

    return single


def warm_up(compiled: Callable, *args) -> Any:
    """Run a compiled program once on copies of `args` (donated buffers stay untouched); return
    its outputs, which are not part of the run.

    XLA:CPU does one-time work at a program's first execution, many times an iteration's cost.
    Callers time this with the compilation, so `compile_s` holds all of it and the first
    host-sync window's steps/s is steady state like the others.

    On the CPU the copies are `jax.device_put(x, may_alias=False)`, which compiles nothing, where
    `x.copy()` is a jitted copy, a program of its own for every leaf shape. Elsewhere they stay
    `x.copy()`: after a warm-up on `device_put`'s copies a GPU's fused loop was measured slower,
    for reasons not found (docs/benchmarks.md, "The warm-up's copies"). An
    array over several processes, which `device_put` does not copy, takes `x.copy()` too.
    """
    return jax.block_until_ready(compiled(*jax.tree.map(_copy, args)))


def _copy(x):
    if isinstance(x, jax.Array) and (not x.is_fully_addressable or any(d.platform != "cpu" for d in x.devices())):
        return x.copy()
    return jax.device_put(x, may_alias=False)


def put_empty_leaves(tree: Any, shardings: Any) -> Any:
    """`tree` with each empty leaf (a dimension of size 0: MJX's `Data` has some) put on its
    sharding in `shardings` (a matching tree). A program's empty outputs come back without the
    sharding it was asked to give them, and the next call of a program compiled for that sharding
    refuses them; an empty array costs nothing to move."""
    return jax.tree.map(lambda x, sharding: jax.device_put(x, sharding) if x.size == 0 else x, tree, shardings)
