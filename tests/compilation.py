"""How the suite compiles its programs: FAST, or OPTIMIZED for the tests that run them long.

Most tests' time is compilation: each trains a small config for a few iterations, and its
programs (the run's initialisation, training loop and evaluation) take seconds to compile and
milliseconds to run. Those compile FAST: without LLVM's optimisations and with XLA:CPU's loop
emitters instead of its fusion emitters. Measured on a 2-core AMD EPYC (jax 0.10.2): five probe
runs 14.6 s -> 6.5 s, a CartPole training program 4.8 s -> 2.3 s to compile, while the compiled
code runs 2-4x slower, which such runs do not notice. FAST also compiles each program's machine
code in one piece on the calling thread (`xla_cpu_parallel_codegen_split_count=1`) and skips
LLVM's expensive passes: the suite's workers already keep every core busy, so splitting a module
to compile its parts on other threads only adds the split's own cost (Craftax's tiny training
program pinned to one core: 30.6-32.9 s -> 28.7-32.1 s; five test files, alternated: 136.6 s ->
131.5 s).

The tests whose time is running compiled code compile OPTIMIZED (LLVM level 1, as conftest.py
sets it for the session, and the fusion emitters): the `slow` learning tests, those marked
`optimized_compile` (conftest.py) and the fixtures inside `with optimized():`. So do the tests
that compare the bits of two *different* programs, such as the async mode at lag 0 against the
fused mode: the two agree to the bit compiled optimised, not in every compilation (compiled
fast, the PPO and SAC lag-0 runs differ from the fused ones by about 1e-8). The probe learning
tests compile fast: their rules hold whatever float code the machine's XLA compiles
(learning_checks.py), and every probe passes so. A `slow` test whose time is compiling big
programs and running them for a few iterations (Craftax's full game, its pixels, every learner
on it) is marked `fast_compile` too: it stays among the long tests, and compiles FAST.

Both settings compile the same HLO without fast-math; only the machine code, hence possibly the
last bits of a result, differs. They are part of the persistent cache's key, so the two kinds of
executable never stand in for each other. Subprocesses read XLA_FLAGS: conftest.py gives them
the fast settings.
"""

from __future__ import annotations

import contextlib

import jax

# Both skip XLA's HLO verifier, which checks XLA's own invariants after each pass and changes no
# program: 9% of small programs' compilation (five training programs compiled FAST, four runs each:
# 3.07 s -> 2.80 s on average).
_NO_VERIFIER = {"xla_disable_hlo_passes": "hlo-verifier"}
FAST = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False,
        "xla_cpu_parallel_codegen_split_count": 1, "xla_llvm_disable_expensive_passes": True, **_NO_VERIFIER}
# OPTIMIZED names every key FAST sets, the split and LLVM's passes at XLA's defaults: the workers inherit FAST's
# settings in XLA_FLAGS (conftest.py), and an optimised compilation must not keep them
OPTIMIZED = {"xla_backend_optimization_level": 1, "xla_cpu_use_fusion_emitters": True,
             "xla_cpu_parallel_codegen_split_count": 32, "xla_llvm_disable_expensive_passes": False, **_NO_VERIFIER}


def as_xla_flags(settings: dict) -> str:
    """The settings as XLA_FLAGS for a subprocess (it reads them from its environment)."""
    return " ".join(f"--{name}={str(value).lower()}" for name, value in settings.items())


FAST_XLA_FLAGS = as_xla_flags(FAST)
OPTIMIZED_XLA_FLAGS = as_xla_flags(OPTIMIZED)

_settings = [None]  # the overrides every compilation in this process gets now (None: not installed)


def install() -> bool:
    """Give every compilation in this process (any thread) the current settings, FAST to begin
    with. Returns False, leaving JAX as it was, where this jaxlib does not take the flags."""
    try:
        from jax._src import compiler as jax_compiler  # where every jit compilation gets its options

        get_compile_options = jax_compiler.get_compile_options
        jax.jit(lambda x: x + 1).lower(1.0).compile(compiler_options=FAST)
    except Exception:  # a JAX without that function, or a jaxlib without one of the flags
        return False

    def with_settings(*args, **kwargs):
        options = get_compile_options(*args, **kwargs)
        if _settings[0] is not None:
            options.env_option_overrides = [*options.env_option_overrides, *_settings[0].items()]
        return options

    jax_compiler.get_compile_options = with_settings
    _settings[0] = FAST
    return True


@contextlib.contextmanager
def compiled(fast: bool):
    """Compile FAST or OPTIMIZED inside the block (no change where `install` found no flags)."""
    previous = _settings[0]
    if previous is not None:
        _switch(FAST if fast else OPTIMIZED)
    try:
        yield
    finally:
        _switch(previous)


def _switch(settings) -> None:
    """Take `settings` for the compilations to come. JAX keeps a jitted function's executable in
    memory whatever options it was compiled with (they are ours, not the function's), and `build`
    keeps a config's jitted programs for its next run (build.py): where the settings change, the
    kept builds go, so that a run under the new settings compiles its own programs (or loads them
    from the persistent cache, whose key holds the settings)."""
    if _settings[0] is not settings:
        from jaxrl_async.trainer.build import forget_builds  # here: importing the package starts no backend

        forget_builds()
        _settings[0] = settings


def optimized():
    """Compile OPTIMIZED inside the block: for a fixture whose runs are long, or whose bits a
    test compares with another program's."""
    return compiled(fast=False)
