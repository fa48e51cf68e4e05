"""`reset_where`: an auto-reset that, under `vmap`, resets only the envs whose episode ended.

gymnax's step (and `SuiteEnv`'s, before this) computes a reset every step and selects it where
the episode ended: `select(done, reset(key), stepped)`. Under `vmap` a `lax.cond` on `done`
becomes that same select, so every env pays for a reset on every step. That is free for
CartPole and ruinous for a suite whose reset builds a world: Craftax-Classic's reset generates a
map, many times the cost of its step, and a rollout that paid it every step ran at a small
fraction of the suite's own step rate (docs/benchmarks.md, "Figures behind the code's comments").

`reset_where(done, key, stepped, reset_fn)` returns what that select returns, element for
element. Unbatched it is a `lax.cond` (the reset runs only when `done`). Under `vmap` its batching
rule sees the whole batch of `done` flags and resets exactly the done envs, each from its own key:
`chunk` at a time while at least `chunk` are left (one batched reset amortises its fixed cost), then
the rest one at a time, so no reset runs on a step where no episode ended and none is computed only
to be thrown away. A `vmap` over that (seeds over envs) folds into one batch, so the loops still run
once per step. `chunk=0` resets the whole batch in one go where any episode ended.

`restart_where(done, restart, stepped)`: the auto-reset to a state at hand (`auto_reset="cached"`,
each env restarting from its first reset's state), a select.

`without_reset()`: a step traced under it leaves the envs whose episode ended where it ended, and
its program holds no reset and no restart. For a caller that counts each env's first episode only
(the evaluation, `rollout/evaluate.py`) the reset is dead code, and it is dear to compile: the batched
rule holds the suite's reset twice (the chunked trips and the single ones), and a physics engine's
reset compiles about as long as its step (docs/benchmarks.md, "Figures behind the code's comments").
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap


# per thread (a new thread starts without it): the evaluation is traced beside the training loop
_WITHOUT_RESET = contextvars.ContextVar("without_reset", default=False)


@contextlib.contextmanager
def without_reset() -> Iterator[None]:
    """While it is open, `reset_where` and `restart_where` return `stepped` as it is: a step traced
    here holds no reset (the caller takes over the envs whose episode ended). It acts where they are
    traced: JAX's trace cache does not know of it, so a jitted function around the step, traced
    once, keeps the first way it was traced; the evaluation traces a step of its own."""
    token = _WITHOUT_RESET.set(True)
    try:
        yield
    finally:
        _WITHOUT_RESET.reset(token)


def default_chunk() -> int:
    """Resets per batched trip: 16 on the CPU, where a reset's cost grows with the rows it resets
    but 16 at once cost well under 16 alone (`jaxrl-async bench --only suites`: Brax with a fifth
    of its envs ending each step); the whole batch elsewhere (0), where one batched reset costs
    about as much as one alone, so a step with any episode ended costs at most what the select did
    (not measured on a GPU here)."""
    return 16 if jax.default_backend() == "cpu" else 0


def restart_where(done: jax.Array, restart: Any, stepped: Any) -> Any:
    """`restart` where `done` (a scalar), else `stepped`, leaf by leaf; inside `without_reset()`,
    `stepped`."""
    if _WITHOUT_RESET.get():
        return stepped
    return jax.tree.map(lambda a, b: lax.select(done, a, b), restart, stepped)


def reset_where(done: jax.Array, key: jax.Array, stepped: Any, reset_fn: Callable[[jax.Array], Any],
                chunk: int | None = None) -> Any:
    """`reset_fn(key)` where `done`, else `stepped`; under `vmap`, only the done envs' resets run;
    inside `without_reset()`, `stepped`.

    Args:
      done: [] bool, the episode ended on this step.
      key: the key of this env's reset.
      stepped: the pytree the step produced (e.g. `(obs, state)`).
      reset_fn: `key -> pytree` of `stepped`'s structure, shapes and dtypes.
      chunk: resets per iteration of the batched loop (0: the whole batch); None: `default_chunk()`.
    """
    chunk = default_chunk() if chunk is None else int(chunk)
    if chunk < 0:
        raise ValueError(f"chunk={chunk} must be >= 0 (0: reset the whole batch in one go)")
    if _WITHOUT_RESET.get():
        return stepped
    reset_fn = _matching(reset_fn, stepped)

    @custom_vmap
    def one(done, key, stepped):
        return lax.cond(done, lambda: reset_fn(key), lambda: stepped)

    @one.def_vmap
    def batched_rule(axis_size, in_batched, done, key, stepped):
        args = _broadcast(axis_size, in_batched, (done, key, stepped))
        out = _batched(reset_fn, chunk)(*args)
        return out, jax.tree.map(lambda _: True, out)

    return one(done, key, stepped)


def _matching(reset_fn: Callable, stepped: Any) -> Callable:
    """`reset_fn` with its leaves cast to `stepped`'s dtypes (a Python `0` in a suite's reset state
    is weakly typed, its stepped twin is not); a ValueError, when it is traced, where they differ in
    more than that. (Checked as the reset is traced for the step, not by tracing it once more: a
    suite's reset may take a second to trace.)"""
    stepped_leaves, stepped_tree = jax.tree.flatten(stepped)

    def matching(key):
        fresh = reset_fn(key)
        fresh_leaves, fresh_tree = jax.tree_util.tree_flatten_with_path(fresh)
        if jax.tree.structure(fresh) != stepped_tree:
            raise ValueError(f"the reset returns {jax.tree.structure(fresh)} but the step {stepped_tree}: an env's "
                             "reset and step must return the same (obs, state) structure")
        wrong = [f"{jax.tree_util.keystr(path)}: reset {jnp.result_type(new)}{list(jnp.shape(new))}, step "
                 f"{jnp.result_type(old)}{list(jnp.shape(old))}"
                 for (path, new), old in zip(fresh_leaves, stepped_leaves)
                 if jnp.shape(new) != jnp.shape(old) or jnp.result_type(new) != jnp.result_type(old)]
        if wrong:
            raise ValueError(f"the reset's and the step's (obs, state) differ in {'; '.join(wrong)}: the env's "
                             "reset must give its state the shapes and dtypes its step does")
        return jax.tree.unflatten(stepped_tree, [jnp.asarray(new).astype(jnp.result_type(old)) for (_, new), old
                                                 in zip(fresh_leaves, stepped_leaves)])

    return matching


def _broadcast(axis_size: int, in_batched: Any, args: tuple) -> tuple:
    """Every argument with the batch axis leading (an unbatched one repeated along it)."""
    return jax.tree.map(lambda batched, x: x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))),
                        tuple(in_batched), tuple(args))


def _batched(reset_fn: Callable, chunk: int) -> Callable:
    """`(done [N], keys [N, ...], stepped [N, ...]) -> stepped` with the done rows reset; a further
    `vmap` over it folds its axis into N."""

    @custom_vmap
    def batched(done, keys, stepped):
        return _reset_rows(done, keys, stepped, reset_fn, chunk)

    @batched.def_vmap
    def fold_rule(axis_size, in_batched, done, keys, stepped):
        args = _broadcast(axis_size, in_batched, (done, keys, stepped))
        # explicit sizes, not -1: a leaf may have a zero-size axis (navix's empty render cache)
        out = batched(*jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1], *x.shape[2:])), args))
        out = jax.tree.map(lambda x: x.reshape((axis_size, x.shape[0] // axis_size, *x.shape[1:])), out)
        return out, jax.tree.map(lambda _: True, out)

    return batched


def _reset_rows(done: jax.Array, keys: jax.Array, stepped: Any, reset_fn: Callable, chunk: int) -> Any:
    n = done.shape[0]
    whole_batch = chunk == 0 or chunk >= n
    chunk = n if whole_batch else chunk
    # the done rows first, then n (out of range: a write there is dropped), padded so that every
    # chunk's slice is in range
    rows = jnp.nonzero(done, size=n, fill_value=n)[0]
    rows = jnp.concatenate([rows, jnp.full((chunk,), n, rows.dtype)])
    num_done = jnp.sum(done, dtype=jnp.int32)

    def reset(size):
        def reset_rows(carry):
            start, stepped = carry
            index = lax.dynamic_slice(rows, (start,), (size,))
            fresh = jax.vmap(reset_fn)(keys[jnp.minimum(index, n - 1)])
            stepped = jax.tree.map(lambda old, new: old.at[index].set(new, mode="drop"), stepped, fresh)
            return start + size, stepped
        return reset_rows

    if whole_batch:  # one trip where any episode ended
        return lax.while_loop(lambda carry: carry[0] < num_done, reset(n), (jnp.int32(0), stepped))[1]
    carry = (jnp.int32(0), stepped)
    if chunk > 1:  # whole chunks while a chunk's worth is left ...
        carry = lax.while_loop(lambda carry: carry[0] + chunk <= num_done, reset(chunk), carry)
    # ... then the rest one at a time
    return lax.while_loop(lambda carry: carry[0] < num_done, reset(1), carry)[1]
