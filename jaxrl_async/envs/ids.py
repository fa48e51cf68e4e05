"""The built-in environment ids, as a static list: `jaxrl-async envs` lists them without
importing gymnax (whose import takes seconds: it pulls in matplotlib and seaborn).

`envs.registry.builtin_env_ids()` computes the same list from gymnax's live registry, the
probes and the partially observable tasks; `tests/test_presets.py` keeps the two equal, so a
new gymnax version or a new probe that changes the ids fails the test until this list follows.
"""

from __future__ import annotations

BUILTIN_ENV_IDS: tuple[str, ...] = (
    # gymnax classic control
    "Acrobot-v1", "CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1",
    # gymnax MinAtar
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
    # gymnax bsuite (MNISTBandit-bsuite is refused: it downloads MNIST)
    "Catch-bsuite", "DeepSea-bsuite", "DiscountingChain-bsuite", "MemoryChain-bsuite", "SimpleBandit-bsuite",
    "UmbrellaChain-bsuite",
    # gymnax misc
    "BernoulliBandit-misc", "FourRooms-misc", "FrozenLake-misc", "GaussianBandit-misc", "MetaMaze-misc",
    "PointRobot-misc", "Pong-misc", "Reacher-misc", "Swimmer-misc",
    # probes (envs/probes.py)
    "Probe-ActionMask", "Probe-ActionReward", "Probe-ConstantReward", "Probe-ContinuousAction", "Probe-DictObs",
    "Probe-Memory", "Probe-MultiDiscrete", "Probe-ObsActionReward", "Probe-ObsReward", "Probe-Truncation",
    "Probe-TupleObs", "Probe-TwoStep",
    # partially observable (envs/partially_observable.py)
    "StatelessCartPole-v1", "StatelessPendulum-v1",
)

# gymnax ids that cannot work here, with the reason shown to the user (`registry.make_env` refuses
# them before constructing, and the CLI before JAX starts)
REFUSED_ENV_IDS: dict[str, str] = {
    "MNISTBandit-bsuite": (
        "env_id 'MNISTBandit-bsuite' is not supported: gymnax downloads MNIST when "
        "the env is constructed and this project runs offline; use another bandit, "
        "e.g. 'SimpleBandit-bsuite' or 'BernoulliBandit-misc'."
    ),
}
