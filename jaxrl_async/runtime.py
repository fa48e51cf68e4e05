"""Process-wide JAX settings for the CPU, applied by the commands (and the test suite) before
JAX starts its backends — never at library import.

- Every CPU core becomes a JAX device (`jax_num_cpu_devices`), so seeds can be sharded
  over the cores (`sharding.py`).
- XLA's Eigen ops run single-threaded (`--xla_cpu_multi_thread_eigen=false`) and CPU
  dispatch is synchronous (`jax_cpu_enable_async_dispatch=False`): the two settings others
  report against XLA CPU thread-pool hangs. They cost nothing measurable here (the same
  steps/s either way). They did *not* cure the hang this project met — LAPACK's batched
  QR (the orthogonal initialiser under vmap) waiting on its own thread pool — which
  `components.initial_states` avoids by initialising seeds with `lax.map`.

Library users who start JAX themselves can call `configure_cpu_runtime()` first.
"""

from __future__ import annotations

import os
import warnings

import jax

SINGLE_THREADED_EIGEN = "--xla_cpu_multi_thread_eigen=false"


def configure_cpu_runtime(expose_cores: bool = True) -> None:
    """Apply the settings above; a no-op for what JAX has already fixed at startup."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {SINGLE_THREADED_EIGEN}".strip()
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    if expose_cores:
        cores = os.cpu_count() or 1
        try:
            jax.config.update("jax_num_cpu_devices", cores)
        except RuntimeError:  # the backends have started: their device count is fixed for this process
            devices = len(jax.devices("cpu"))
            if devices != cores:
                warnings.warn(f"configure_cpu_runtime: JAX had already started with {devices} CPU device(s), "
                              f"so seeds cannot be spread over all {cores} cores in this process; call it "
                              "before anything uses JAX", RuntimeWarning, stacklevel=2)
