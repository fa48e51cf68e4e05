"""Environments: `make_env` over gymnax, probe and partially observable ids; wrappers; obs normalisation."""

from jaxrl_async.envs.normalize import RunningMeanStd
from jaxrl_async.spaces import MultiDiscrete, from_gymnasium
from jaxrl_async.envs.partially_observable import PARTIALLY_OBSERVABLE_ENVS
from jaxrl_async.envs.probes import (
    PROBE_ENVS,
    ActionRewardProbe,
    ConstantRewardProbe,
    ContinuousActionProbe,
    DictObsProbe,
    MultiDiscreteProbe,
    TupleObsProbe,
    ObsActionRewardProbe,
    ObsRewardProbe,
    ProbeEnv,
    ProbeParams,
    ProbeState,
    MemoryProbe,
    TruncationProbe,
    TwoStepProbe,
)
from jaxrl_async.envs.registry import builtin_env_ids, make_env, register_env, registered_env_ids
from jaxrl_async.envs.wrappers import (
    ClipAction,
    EpisodeStatistics,
    EpisodeStatsState,
    ObservationSubset,
    Wrapper,
)

__all__ = [
    "PARTIALLY_OBSERVABLE_ENVS",
    "PROBE_ENVS",
    "ActionRewardProbe",
    "ClipAction",
    "ConstantRewardProbe",
    "ContinuousActionProbe",
    "DictObsProbe",
    "MultiDiscreteProbe",
    "TupleObsProbe",
    "EpisodeStatistics",
    "EpisodeStatsState",
    "MultiDiscrete",
    "ObsActionRewardProbe",
    "ObsRewardProbe",
    "ObservationSubset",
    "ProbeEnv",
    "ProbeParams",
    "ProbeState",
    "RunningMeanStd",
    "MemoryProbe",
    "TruncationProbe",
    "TwoStepProbe",
    "Wrapper",
    "builtin_env_ids",
    "from_gymnasium",
    "make_env",
    "register_env",
    "registered_env_ids",
]
