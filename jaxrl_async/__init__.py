"""jaxrl_async: a JAX-native RL trainer with fused and async (double-buffered) modes.

The public names load on first use, so that importing the package (as the
`jaxrl-async` command does) starts no JAX backend: process-wide settings such as
the number of CPU devices (`runtime.configure_cpu_runtime`) must come first.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "LearnerConfig": "jaxrl_async.config",
    "NetworkConfig": "jaxrl_async.config",
    "TrainConfig": "jaxrl_async.algorithms",
    "TrainResult": "jaxrl_async.trainer.training",
    "train": "jaxrl_async.trainer.training",
    "sweep_hparams": "jaxrl_async.algorithms",
    "make_env": "jaxrl_async.envs",
    "MultiDiscrete": "jaxrl_async.envs.spaces",
    "registered_env_ids": "jaxrl_async.envs",
    "register_env": "jaxrl_async.envs",
    "configure_cpu_runtime": "jaxrl_async.trainer.runtime",
    "configure_compilation_cache": "jaxrl_async.trainer.runtime",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'jaxrl_async' has no attribute {name!r}")
