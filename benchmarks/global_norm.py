"""The gradient clip's global norm two ways, on two MLPs' gradient trees of growing width:
`norm_laid_end_to_end` (the leaves reduced once) and `norm_leaf_by_leaf` (each leaf on its own,
the sums added). `core.optimizer.global_norm` takes the first up to `CONCATENATE_AT_MOST`
entries, the second above it; this is the measurement behind that bound (docs/benchmarks.md,
"The gradient norm's concatenation").

usage: python -m benchmarks.global_norm
prints one line a width: the entries, and the microseconds a norm takes each way (64 norms in a
scan, each on a freshly scaled tree as a learner's gradient steps take them; fastest of 30 calls)
"""
from jaxrl_async.trainer.runtime import configure_cpu_runtime

configure_cpu_runtime()  # as the CLI runs: before JAX starts

import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxrl_async.core.optimizer import CONCATENATE_AT_MOST, norm_laid_end_to_end, norm_leaf_by_leaf  # noqa: E402

WIDTHS = ((4, 64, 2), (17, 64, 6), (11, 128, 6), (11, 256, 6))  # (inputs, hidden width, outputs)


def mlp(inputs: int, width: int, outputs: int, key) -> dict:
    sizes = (inputs, width, width, outputs)
    keys = jax.random.split(key, len(sizes) - 1)
    return {f"dense_{i}": {"kernel": jax.random.normal(k, (a, b)), "bias": jnp.ones((b,))}
            for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:]))}


def microseconds(norm, tree, steps: int = 64, calls: int = 30) -> float:
    def scaled_norms(tree):
        def step(total, i):
            return total + norm(jax.tree.map(lambda x: x * (1 + i * 1e-3), tree)), None
        return jax.lax.scan(step, 0.0, jnp.arange(float(steps)))[0]

    run = jax.jit(scaled_norms)
    run(tree).block_until_ready()
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        run(tree).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return best / steps * 1e6


def main() -> None:
    print(f"CONCATENATE_AT_MOST = {CONCATENATE_AT_MOST}")
    for inputs, width, outputs in WIDTHS:  # a policy and a value network, as an actor-critic's gradients
        tree = (mlp(inputs, width, outputs, jax.random.PRNGKey(0)), mlp(inputs, width, 1, jax.random.PRNGKey(1)))
        entries = sum(leaf.size for leaf in jax.tree.leaves(tree))
        end_to_end, by_leaf = (microseconds(norm, tree) for norm in (norm_laid_end_to_end, norm_leaf_by_leaf))
        print(f"{entries:>8,} entries ({inputs} inputs, {width} x {width}): laid end to end {end_to_end:.1f} us, "
              f"leaf by leaf {by_leaf:.1f} us")


if __name__ == "__main__":
    main()
