"""Shared fixtures: small training configs that compile in seconds on a CPU."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib.util
import itertools
import os
import shutil
import tempfile

import jax
import pytest

import compilation  # tests/compilation.py

from jaxrl_async.config import LearnerConfig, NetworkConfig
from jaxrl_async import TrainConfig
from jaxrl_async.trainer.runtime import configure_cpu_runtime

# LLVM's optimisation level 1 for the session and the subprocesses it starts (they read the
# environment), where the commands keep XLA's default 2: a probe's training program compiles in
# 2.3 s rather than 3.4 s, and the MLPs the tests train run as fast (CartPole 4x128, DQN, SAC,
# Pendulum: within 2%; Breakout-MinAtar's 64x128 MLP 7% slower). The level changes the machine
# code, not the HLO program (XLA compiles without fast-math either way). Below, most tests
# compile faster still (compilation.py), the subprocesses too where the caller set no level.
_TEST_OPTIMIZATION_LEVEL = "--xla_backend_optimization_level=1"
_LEVEL_GIVEN = "xla_backend_optimization_level" in os.environ.get("XLA_FLAGS", "")
if not _LEVEL_GIVEN:
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_TEST_OPTIMIZATION_LEVEL}".strip()

# MuJoCo's renderer (the videos' Brax and Playground frames) without a display: MuJoCo picks its OpenGL
# backend when it is imported, which a test module importing a suite does at collection
os.environ.setdefault("MUJOCO_GL", "egl")

# the commands' CPU settings (see runtime.py), but one device: tests choose their devices
configure_cpu_runtime(expose_cores=False)

# One persistent compilation cache for the session and the subprocesses it starts (they read
# the environment): many tests compile the same small programs (a run and its resumed twin,
# determinism pairs, the same tiny config in several modules), and a hit loads the executable
# instead of compiling it again. A fresh directory each session, removed at exit, so no
# executable outlives the code that produced it.
# Under pytest-xdist the controller makes the directory and its workers (started after this
# module ran in the controller, with its environment) share it; only its maker removes it.
_SHARED_CACHE_VARIABLE = "JAXRL_ASYNC_TESTS_XLA_CACHE"
_COMPILATION_CACHE = os.environ.get(_SHARED_CACHE_VARIABLE)
if not _COMPILATION_CACHE:
    _COMPILATION_CACHE = tempfile.mkdtemp(prefix="jaxrl-async-tests-xla-cache-")
    os.environ[_SHARED_CACHE_VARIABLE] = _COMPILATION_CACHE
    atexit.register(shutil.rmtree, _COMPILATION_CACHE, ignore_errors=True)
os.environ["JAX_COMPILATION_CACHE_DIR"] = _COMPILATION_CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
jax.config.update("jax_compilation_cache_dir", _COMPILATION_CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

# Fast compilation for most tests, optimised for those that run compiled code a long time or
# compare two programs' bits (compilation.py). The subprocesses the tests start get the fast
# settings in XLA_FLAGS (so do the xdist workers, started after this ran in the controller: each
# worker's own compilations take the setting `compilation` gives them, whatever XLA_FLAGS say).
if compilation.install() and not _LEVEL_GIVEN:
    os.environ["XLA_FLAGS"] = " ".join(
        [flag for flag in os.environ["XLA_FLAGS"].split() if flag != _TEST_OPTIMIZATION_LEVEL]
        + compilation.FAST_XLA_FLAGS.split())


# Python's cyclic garbage collector, tuned for a process that traces thousands of programs: the
# objects alive after the imports (JAX's, flax's, the package's) are frozen out of its scans, and
# it runs 20x less often. Tracing makes millions of short-lived objects, and every collection they
# set off scanned every object alive: about a tenth of the tests' CPU time (the runs themselves
# pause the collector while they compile: `runtime.collector_paused`).
gc.collect()
gc.freeze()
gc.set_threshold(20_000, 20, 20)


# The optional packages the tests use, each with the extra that installs it: a test that needs one
# that is not installed is skipped with its pip line (so `pip install -e '.[test]'` runs the rest),
# whether its file imports the package, a test imports it or reaches our own "pip install" error.
OPTIONAL_MODULES = {"brax": "brax", "mujoco_playground": "playground", "craftax": "craftax", "jumanji": "jumanji",
                    "navix": "navix", "xminigrid": "xminigrid", "envpool": "envpool", "mujoco": "mujoco",
                    "tensorboardX": "tensorboard", "matplotlib": "plot", "importlinter": "dev", "psutil": "dev",
                    "wandb": "wandb", "mlflow": "mlflow", "sqlalchemy": "mlflow", "alembic": "mlflow"}
OPTIONAL_MODULES.update({"imageio": "video", "imageio_ffmpeg": "video", "pygame": "video"})  # test_video.py's
# Test files that need one without importing it first (they reach it through the CLI or the suites)
FILES_NEEDING = {"test_mujoco.py": ("mujoco",), "test_envpool.py": ("envpool",), "test_layers.py": ("importlinter",),
                 "test_suite_brax.py": ("brax",), "test_suite_playground.py": ("mujoco_playground",),
                 "test_suite_craftax.py": ("craftax",), "test_suite_jumanji.py": ("jumanji",),
                 "test_suite_navix.py": ("navix",), "test_suite_xminigrid.py": ("xminigrid",)}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _needs(module: str) -> str:
    name = {"importlinter": "import-linter", "mujoco_playground": "playground"}.get(module, module)
    return f"needs {name}: pip install -e '.[{OPTIONAL_MODULES[module]}]'"


def missing_extra(error: BaseException | None) -> str | None:
    """The skip reason for an error that says an optional package is missing (None for any other):
    an import of one that is not installed, or our own error that names the pip line for it."""
    missing = [module for module in OPTIONAL_MODULES if not _installed(module)]
    while error is not None:
        if isinstance(error, ImportError) and (error.name or "").split(".")[0] in missing:
            return _needs(error.name.split(".")[0])
        if isinstance(error, ValueError) and "pip install" in str(error) and any(
                module in str(error) or f"[{OPTIONAL_MODULES[module]}]" in str(error) for module in missing):
            return f"needs an optional package: {error}"
        error = error.__cause__
    return None


class _ModuleNeedingExtras(pytest.Module):
    """A test module skipped, with the pip line, where an optional package it needs is missing."""

    def _getobj(self):
        absent = [module for module in FILES_NEEDING.get(self.path.name, ()) if not _installed(module)]
        if absent:
            pytest.skip(_needs(absent[0]), allow_module_level=True)
        try:
            return super()._getobj()
        except self.CollectError as error:
            reason = missing_extra(error.__cause__)
            if reason is None:
                raise
            pytest.skip(reason, allow_module_level=True)


def pytest_pycollect_makemodule(module_path, parent):
    if module_path.name == "conftest.py":
        return None
    return _ModuleNeedingExtras.from_parent(parent, path=module_path)


def _skip_where_an_extra_is_missing():
    """A hook wrapper: the wrapped call's error, where a missing optional package caused it, as a
    skip naming its pip line. It takes none of the hook's arguments (pluggy passes those named)."""
    try:
        return (yield)
    except (ImportError, ValueError) as error:
        reason = missing_extra(error)
        if reason is None:
            raise
        pytest.skip(reason)


# a test's call and a fixture's setup alike
pytest_pyfunc_call = pytest.hookimpl(wrapper=True)(_skip_where_an_extra_is_missing)
pytest_fixture_setup = pytest.hookimpl(wrapper=True)(_skip_where_an_extra_is_missing)


def pytest_configure(config):
    config.addinivalue_line("markers", "optimized_compile: compile optimised, not fast (compilation.py), as `slow` "
                                       "tests do: a test that runs compiled code long or compares two programs' bits")
    config.addinivalue_line("markers", "fast_compile: compile fast even where `slow` (compilation.py): a long test "
                                       "whose time is compiling big programs, not running them")


@pytest.fixture(scope="session")
def tiny_config(tmp_path_factory):
    """`tiny_config(**overrides) -> TrainConfig`: 4 envs x 8 steps, one 16-unit layer.

    Each call gets its own fresh run directory unless `run_dir` is given; `learner`
    and `network` overrides are dicts of those configs' fields.
    """
    runs = tmp_path_factory.mktemp("runs")
    counter = itertools.count()

    def make(**overrides) -> TrainConfig:
        learner = dict(update_epochs=1, num_minibatches=2)
        learner.update(overrides.pop("learner", {}))
        network = dict(hidden_sizes=(16,))
        network.update(overrides.pop("network", {}))
        fields = dict(env="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 32,
                      eval_episodes=2, run_dir=str(runs / f"run{next(counter)}"))
        fields.update(overrides)
        return TrainConfig(**fields, network=NetworkConfig(**network), learner=LearnerConfig(**learner))

    return make


@pytest.fixture(autouse=True)
def _fresh_trace_counts():
    """chex.assert_max_traces counts traces per function's code, across tests: start each test at zero."""
    import chex

    chex.clear_trace_counter()
    yield


def _pinned_precision(node):
    """Full float32 matmuls where the node (a module or a test) is marked `float32_matmuls`."""
    if node.get_closest_marker("float32_matmuls") is None:
        return contextlib.nullcontext()
    return jax.default_matmul_precision("float32")


# Tests that compare two computations of the same quantity (a jitted scan against a Python
# loop, a replay against the acting steps) pin the matmul precision: on a GPU float32 matmuls
# default to TF32, whose rounding (up to ~0.4% relative) differs between two programs. On the
# CPU both settings give the same float32 arithmetic. The module-scoped fixture covers a marked
# module's own module-scoped fixtures (autouse fixtures are set up first in their scope); the
# precision is thread-local, so only computations in the test's thread are pinned.
@pytest.fixture(scope="module", autouse=True)
def _float32_matmuls_for_module(request):
    with _pinned_precision(request.node):
        yield


@pytest.fixture(autouse=True)
def _float32_matmuls_for_test(request):
    with _pinned_precision(request.node):
        yield


def _compilation_for(node):
    """Optimised compilation for a `slow` or `optimized_compile` node, fast otherwise or where it is
    also marked `fast_compile` (compilation.py)."""
    if node.get_closest_marker("fast_compile") is not None:
        return compilation.compiled(fast=True)
    return compilation.compiled(fast=not any(node.get_closest_marker(name)
                                             for name in ("slow", "optimized_compile")))


# as the precision above: a marked module's setting covers its module-scoped fixtures
@pytest.fixture(scope="module", autouse=True)
def _compilation_for_module(request):
    with _compilation_for(request.node):
        yield


@pytest.fixture(autouse=True)
def _compilation_for_test(request):
    with _compilation_for(request.node):
        yield


# pytest-xdist hands each worker whole files (`--dist loadfile`) in collection order, the next
# file to whichever worker is free first: the longest files go first, so that no worker spends the
# end of the suite alone on a long one (longest processing time first). The order comes from a
# full run's durations on the 2-core AMD EPYC, longest first; the other files follow in their
# usual order. A stale order costs time, never a result.
LONGEST_FILES = ("test_suite_craftax.py", "test_distributed.py", "test_algorithms.py", "test_experiments.py",
                 "test_bench.py", "test_td3.py", "test_dqn.py", "test_suite_brax.py", "test_sac.py",
                 "test_suite_playground.py", "test_suite_jumanji.py", "test_action_masks.py", "test_lifecycle.py",
                 "test_pqn.py", "test_recurrent.py", "test_async_train.py", "test_suite_xminigrid.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order
