"""Environments: `make_env` over gymnax, probe and partially observable ids; wrappers; observation
normalisation; spaces; the static id list (`ids`); host envs under `host/`.

The names below load on first use, so that reading the static ids (`envs.ids`, as the CLI does)
does not import gymnax, whose import takes seconds.
"""

from __future__ import annotations

import importlib

_NAMES = {
    "ActionMaskProbe": "jaxrl_async.envs.probes",
    "ActionRewardProbe": "jaxrl_async.envs.probes",
    "ClipAction": "jaxrl_async.envs.wrappers",
    "SquashAction": "jaxrl_async.envs.wrappers",
    "ConstantRewardProbe": "jaxrl_async.envs.probes",
    "ContinuousActionProbe": "jaxrl_async.envs.probes",
    "DictObsProbe": "jaxrl_async.envs.probes",
    "EpisodeStatistics": "jaxrl_async.envs.wrappers",
    "EpisodeStatsState": "jaxrl_async.envs.wrappers",
    "MemoryProbe": "jaxrl_async.envs.probes",
    "MultiDiscrete": "jaxrl_async.envs.spaces",
    "MultiDiscreteProbe": "jaxrl_async.envs.probes",
    "ObsActionRewardProbe": "jaxrl_async.envs.probes",
    "ObsRewardProbe": "jaxrl_async.envs.probes",
    "ObservationSubset": "jaxrl_async.envs.wrappers",
    "PARTIALLY_OBSERVABLE_ENVS": "jaxrl_async.envs.partially_observable",
    "PROBE_ENVS": "jaxrl_async.envs.probes",
    "ProbeEnv": "jaxrl_async.envs.probes",
    "ProbeParams": "jaxrl_async.envs.probes",
    "ProbeState": "jaxrl_async.envs.probes",
    "RunningMeanStd": "jaxrl_async.envs.normalize",
    "TruncationProbe": "jaxrl_async.envs.probes",
    "TupleObsProbe": "jaxrl_async.envs.probes",
    "TwoStepProbe": "jaxrl_async.envs.probes",
    "Wrapper": "jaxrl_async.envs.wrappers",
    "builtin_env_ids": "jaxrl_async.envs.registry",
    "from_gymnasium": "jaxrl_async.envs.spaces",
    "make_env": "jaxrl_async.envs.registry",
    "register_env": "jaxrl_async.envs.registry",
    "registered_env_ids": "jaxrl_async.envs.registry",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'jaxrl_async.envs' has no attribute {name!r}")
