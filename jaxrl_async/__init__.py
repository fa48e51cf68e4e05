"""jaxrl_async: a JAX-native RL trainer with fused and async (double-buffered) modes."""

from jaxrl_async.config import NetworkConfig, PPOConfig, TrainConfig
from jaxrl_async.envs import make_env, registered_env_ids
from jaxrl_async.train import TrainResult, train

__all__ = ["NetworkConfig", "PPOConfig", "TrainConfig", "TrainResult", "make_env",
           "registered_env_ids", "train"]
__version__ = "0.1.0"
