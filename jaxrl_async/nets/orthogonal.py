"""The orthogonal initialiser every network here uses: jax's, with its QR decomposition taken one
matrix at a time under vmap, so that no initialisation can hang XLA:CPU's thread pool.

jax's `nn.initializers.orthogonal` draws a normal matrix and keeps the Q of its QR decomposition.
Under vmap (the twin critics' `nn.vmap`, any vmap over seeds) the QR becomes one batched LAPACK
call, and jaxlib's CPU kernel splits a large enough batch over XLA's intra-op thread pool, blocking
the pool worker that runs it until the pieces are done. When XLA runs two such calls side by side
(two layers' kernels are independent), each holds one worker; on a 2-core host that is every
worker, nothing is left to run the pieces, and the process waits forever at 0% CPU (seen at the
start of `brax:walker2d`'s SAC preset, about 1 start in 6). A single matrix's QR runs inline on
the calling worker, so with `sequential_vmap` nothing waits on the pool. The normal draws stay
batched and every operation is jax's own, so the values are jax's to the bit (tested).
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp


@jax.custom_batching.sequential_vmap  # under vmap: a loop of one-matrix QRs (`lax.map`), not one batched call
def _qr_one_matrix_at_a_time(matrix: jax.Array) -> tuple[jax.Array, jax.Array]:
    q, r = jnp.linalg.qr(matrix)
    return q, r


def orthogonal(scale: float = 1.0) -> Callable:
    """`jax.nn.initializers.orthogonal(scale)` (columns on the last axis), safe to vmap on the CPU.

    `init(key, shape [..., n_cols], dtype)`: the kernel flattened to `[prod(shape[:-1]), n_cols]`
    has orthonormal rows or columns (whichever are fewer), times `scale`.
    """

    def init(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
        if len(shape) < 2:
            raise ValueError(f"the orthogonal initialiser needs a kernel of 2 or more axes, got shape {shape}")
        n_rows, n_cols = math.prod(shape) // shape[-1], shape[-1]
        normal = jax.random.normal(key, (max(n_rows, n_cols), min(n_rows, n_cols)), dtype)
        q, r = _qr_one_matrix_at_a_time(normal)
        # the signs of R's diagonal make Q uniform over the orthogonal group (Mezzadri 2007)
        q = q * jnp.expand_dims(jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1)), -2)
        if n_rows < n_cols:
            q = q.mT
        return jnp.array(scale, dtype) * jnp.reshape(q, shape)

    return init
