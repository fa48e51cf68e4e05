"""The compile-time split (compile_phases.py): the union of JAX's event spans, per thread."""

import threading

import jax
import jax.numpy as jnp
import pytest

from jaxrl_async.trainer.compile_phases import CompilePhases, union_seconds


@pytest.mark.parametrize("spans,expected", [
    ([], 0.0),
    ([(0.0, 1.0)], 1.0),
    ([(0.0, 1.0), (2.0, 2.5)], 1.5),  # apart
    ([(0.0, 3.0), (1.0, 2.0)], 3.0),  # nested: a jit traced inside another's trace
    ([(1.0, 2.0), (0.0, 1.5), (1.8, 4.0)], 4.0),  # overlapping, out of order
])
def test_union_of_spans(spans, expected):
    assert union_seconds(spans) == pytest.approx(expected)


def test_only_the_recording_threads_compilations_count():
    def program(x):
        return jnp.sin(x) * 3.0 + jnp.cumsum(x)

    with CompilePhases() as here:
        other = threading.Thread(target=lambda: jax.jit(lambda x: jnp.cos(x) - 1.0).lower(jnp.ones(3)).compile())
        other.start()
        other.join()
        other_only = here.seconds()
        jax.jit(program).lower(jnp.ones(5)).compile()
    seconds = here.seconds()
    assert other_only == {"trace_s": 0.0, "lower_s": 0.0, "xla_s": 0.0}
    assert all(seconds[phase] > 0 for phase in ("trace_s", "lower_s", "xla_s")), seconds
    # stopped: later compilations are not counted
    jax.jit(lambda x: x * 7.0 + 2.0).lower(jnp.ones(4)).compile()
    assert here.seconds() == seconds
