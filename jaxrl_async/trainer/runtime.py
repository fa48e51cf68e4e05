"""Process-wide JAX settings, applied by the commands (and the test suite) before JAX starts
its backends or compiles anything — never at library import.

- Every CPU core becomes a JAX device (`jax_num_cpu_devices`), so seeds can be sharded
  over the cores (`sharding.py`); `JAX_NUM_CPU_DEVICES`, where set, wins.
- XLA's Eigen ops run single-threaded (`--xla_cpu_multi_thread_eigen=false`) and CPU
  dispatch is synchronous (`jax_cpu_enable_async_dispatch=False`): the two settings others
  report against XLA CPU thread-pool hangs. They cost nothing measurable here (the same
  steps/s either way). They did *not* cure the hang this project met — LAPACK's batched
  QR (the orthogonal initialiser under vmap) waiting on its own thread pool — which
  `nets/orthogonal.py` avoids by taking the QR one matrix at a time.


The compilation is paid once: `configure_compilation_cache` turns on JAX's persistent
compilation cache, so a second start of the same config loads its executables instead of
compiling them (`jaxrl-async train` and `eval`, and the experiment scripts, do it by default).

Library users who start JAX themselves can call `configure_cpu_runtime()` and
`configure_compilation_cache()` first.

While a run traces and compiles its programs, Python's cyclic garbage collector is paused
(`collector_paused`): tracing makes millions of short-lived objects, and the collections they
set off scan every object alive, JAX's and the user's.
"""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import warnings

import jax

SINGLE_THREADED_EIGEN = "--xla_cpu_multi_thread_eigen=false"


def configure_cpu_runtime(expose_cores: bool = True) -> None:
    """Apply the settings above; a no-op for what JAX has already fixed at startup."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {SINGLE_THREADED_EIGEN}".strip()
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    # JAX_NUM_CPU_DEVICES, where set, is the caller's choice (the launcher's --devices-per-process)
    if expose_cores and "JAX_NUM_CPU_DEVICES" not in os.environ:
        cores = os.cpu_count() or 1
        try:
            jax.config.update("jax_num_cpu_devices", cores)
        except RuntimeError:  # the backends have started: their device count is fixed for this process
            devices = len(jax.devices("cpu"))
            if devices != cores:
                warnings.warn(f"configure_cpu_runtime: JAX had already started with {devices} CPU device(s), "
                              f"so seeds cannot be spread over all {cores} cores in this process; call it "
                              "before anything uses JAX", RuntimeWarning, stacklevel=2)


COMPILATION_CACHE_OFF = "off"


def default_compilation_cache_dir() -> str:
    """`$XDG_CACHE_HOME/jaxrl_async/xla`, `~/.cache/jaxrl_async/xla` where XDG_CACHE_HOME is unset."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxrl_async", "xla")


def configure_compilation_cache(setting: str | None = None) -> str | None:
    """Use JAX's persistent compilation cache for this process; return its directory (None: off).

    Args:
      setting: a directory; 'off'; or None for the default: `$JAX_COMPILATION_CACHE_DIR` where
        set (JAX's own variable: the caller chose), else `default_compilation_cache_dir()`.
    """
    if setting == COMPILATION_CACHE_OFF:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    path = setting or os.environ.get("JAX_COMPILATION_CACHE_DIR") or default_compilation_cache_dir()
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()  # an existing directory may still be read-only
    except OSError as error:
        if setting:
            raise ValueError(f"--compilation-cache {setting!r} cannot be used ({error.strerror}): give a "
                             "writable directory, or 'off'") from None
        # the default place only: training goes on, compiling every program as before
        warnings.warn(f"no persistent compilation cache: cannot create {path} ({error.strerror}); set "
                      "--compilation-cache DIR or XDG_CACHE_HOME", RuntimeWarning, stacklevel=2)
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", path)
    # every program, also those compiling in under JAX's default second (evaluation, initialisation):
    # together they are a large part of a small run's start
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path


# XLA's compile of one of the loop's programs keeps about 1.3 cores busy (its LLVM work is split over
# a pool): on 2 cores the evaluation's compile beside it made the loop's XLA compile 41-49% longer,
# and with it the wait for the first metrics line (docs/benchmarks.md, "The loop compiles first on a
# small host")
CORES_FOR_COMPILES_BESIDE = 4


def cores_to_spare() -> bool:
    """Whether this process has the cores to compile the evaluation beside the training loop
    without slowing the loop's compile (else it compiles from the first metrics line on)."""
    return len(os.sched_getaffinity(0)) >= CORES_FOR_COMPILES_BESIDE


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off inside the block (a no-op where it already is).

    For the setup of a run: building, tracing and compiling its programs. Their garbage is
    freed by reference counting as usual; the cycles left (few) wait for the next collection
    after the block. Tracing alone triggers thousands of collections, most of them scanning
    the same long-lived objects (docs/benchmarks.md, "Compile time", has the measurement).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
