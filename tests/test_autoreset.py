"""`reset_where` (envs/suites/autoreset.py): the select gymnax's auto-reset computes, element for
element, with only the done envs' resets run under `vmap`.

The reference is that select written out: `where(done, reset(key), stepped)` on every leaf. The
resets that run are counted with a host callback inside the reset: it fires once per loop trip."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.envs.suites.autoreset import reset_where, without_reset

CALLS = []


def counted_reset(key):
    """A reset whose state has a float vector, an int and a Python int (weakly typed when traced)."""
    jax.debug.callback(lambda: CALLS.append(1))
    return jax.random.normal(key, (3,)), {"count": jax.random.randint(key, (), 0, 100), "steps": 0}


def select_reference(done, key, stepped):
    fresh = (jax.random.normal(key, (3,)), {"count": jax.random.randint(key, (), 0, 100), "steps": 0})
    return jax.tree.map(lambda new, old: jnp.where(done, new, old), fresh, stepped)


def batch(shape, seed=0, p=0.3):
    size = int(np.prod(shape))
    done = jax.random.bernoulli(jax.random.PRNGKey(seed), p, shape)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), size).reshape(*shape, 2)
    stepped = (jnp.full((*shape, 3), -1.0), {"count": jnp.arange(size).reshape(shape),
                                             "steps": jnp.full(shape, 7, jnp.int32)})
    return done, keys, stepped


def assert_same(actual, expected):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(a, e)


def run(fn, *args):
    CALLS.clear()
    out = jax.jit(fn)(*args)
    jax.effects_barrier()
    return out, len(CALLS)


@pytest.mark.parametrize("chunk", [1, 3])
def test_vmapped_it_is_the_select_and_resets_only_the_done_envs(chunk):
    done, keys, stepped = batch((16,), seed=4)
    num_done = int(done.sum())
    assert num_done == 5  # with chunk 3: one chunk, then two alone (no padded reset computed)
    out, calls = run(jax.vmap(lambda d, k, s: reset_where(d, k, s, counted_reset, chunk)), done, keys, stepped)
    assert_same(out, jax.vmap(select_reference)(done, keys, stepped))
    # one loop trip per whole chunk of done envs, then one per env left over
    assert calls == num_done // chunk + num_done % chunk


def test_no_reset_runs_on_a_step_where_no_episode_ended():
    done, keys, stepped = batch((16,), p=0.0)
    out, calls = run(jax.vmap(lambda d, k, s: reset_where(d, k, s, counted_reset, 1)), done, keys, stepped)
    assert calls == 0
    assert_same(out, stepped)


def test_chunk_zero_resets_the_whole_batch_in_one_trip():
    done, keys, stepped = batch((16,))
    out, calls = run(jax.vmap(lambda d, k, s: reset_where(d, k, s, counted_reset, 0)), done, keys, stepped)
    assert calls == 1
    assert_same(out, jax.vmap(select_reference)(done, keys, stepped))


def test_seeds_over_envs_fold_into_one_loop():
    done, keys, stepped = batch((3, 8), seed=4)
    step = jax.vmap(jax.vmap(lambda d, k, s: reset_where(d, k, s, counted_reset, 1)))
    out, calls = run(step, done, keys, stepped)
    assert calls == int(done.sum())
    assert_same(out, jax.vmap(jax.vmap(select_reference))(done, keys, stepped))


def test_an_unbatched_key_or_state_is_broadcast():
    done, keys, stepped = batch((8,), seed=2)
    one_key = keys[0]
    out, _ = run(jax.vmap(lambda d, s: reset_where(d, one_key, s, counted_reset, 1)), done, stepped)
    assert_same(out, jax.vmap(lambda d, s: select_reference(d, one_key, s))(done, stepped))
    first = jax.tree.map(lambda x: x[0], stepped)
    out, _ = run(jax.vmap(lambda d, k: reset_where(d, k, first, counted_reset, 1)), done, keys)
    assert_same(out, jax.vmap(lambda d, k: select_reference(d, k, first))(done, keys))


@pytest.mark.parametrize("done", [True, False])
def test_unbatched_it_is_a_cond(done):
    _, keys, stepped = batch((1,))
    key, one = keys[0], jax.tree.map(lambda x: x[0], stepped)
    out, calls = run(lambda: reset_where(jnp.bool_(done), key, one, counted_reset, 1))
    assert calls == int(done)
    assert_same(out, select_reference(jnp.bool_(done), key, one))


def test_a_reset_of_another_dtype_or_shape_is_named():
    done, keys, stepped = batch((4,))
    wrong = lambda key: (jnp.zeros(3, jnp.int32), {"count": jnp.int32(0), "steps": 0})  # noqa: E731
    with pytest.raises(ValueError, match=r"differ in \[0\]: reset int32\[3\], step float32\[3\]"):
        jax.vmap(lambda d, k, s: reset_where(d, k, s, wrong, 1))(done, keys, stepped)
    with pytest.raises(ValueError, match="must return the same"):
        reset_where(done[0], keys[0], jax.tree.map(lambda x: x[0], stepped), lambda key: (jnp.zeros(3),), 1)
    with pytest.raises(ValueError, match="chunk=-1 must be >= 0"):
        reset_where(done[0], keys[0], jax.tree.map(lambda x: x[0], stepped), counted_reset, -1)


def test_without_reset_leaves_the_step_as_it_is_and_only_in_its_own_thread():
    done, keys, stepped = batch((16,), seed=4)

    def step():  # a new function each time: JAX caches a function's trace, whichever way it was traced
        return jax.vmap(lambda d, k, s: reset_where(d, k, s, counted_reset, 1))

    with without_reset():
        out, calls = run(step(), done, keys, stepped)
        # another thread traces with the reset: the evaluation is traced beside the training loop
        beside = []
        thread = threading.Thread(target=lambda: beside.append(str(jax.make_jaxpr(step())(done, keys, stepped))))
        thread.start()
        thread.join()
    assert calls == 0 and int(done.sum()) > 0
    assert_same(out, stepped)
    assert "while" in beside[0]
    # and once it is closed, the reset is back
    assert_same(run(step(), done, keys, stepped)[0], jax.vmap(select_reference)(done, keys, stepped))
