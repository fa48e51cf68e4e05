"""Stable-Baselines3 (PyTorch CPU) and sbx (JAX) PPO, DQN, SAC and TD3 on gymnasium envs, timed on
this machine: run by the SB3 virtualenv's python, driven by `benchmarks/peers.py`. A copy of
`../shared/peers/bench_sb3.py` (same PPO presets, same timing) with DQN and SAC added; this
file imports nothing of ours.

usage: python benchmarks/peers_sb3.py {sb3|sbx} ENV TOTAL_TIMESTEPS SEED [PRESET] [ALGO]
ALGO ppo (default) | dqn | sac | td3.
PPO presets: "pjrl" (CartPole default), "default", "zoo_pendulum" (see ../shared/peers/bench_sb3.py).
DQN preset "ours": our DQN CartPole-v1 config (experiments/dqn_cartpole.py): 8 envs (DummyVecEnv),
  train_freq 32 steps per env (256 transitions), then 128 gradient steps of batch 64, lr 2.3e-3
  linearly annealed, buffer 100k, learning_starts 1000, target copied every 256 env steps (tau 1),
  epsilon 1 -> 0.04 over 16% of the run, max_grad_norm 10, relu 64x64. Differences: SB3 / sbx
  DQN is not Double DQN; SB3's loss is the smooth-L1 (Huber 1.0) where ours is Huber 10; sbx
  clips no gradients.
SAC preset "ours": our SAC preset (presets.ALGO_PRESETS["sac"]): 1 env, 1 gradient step per env
  step, batch 256, lr 3e-4, buffer 100k, learning_starts 1000, tau 0.005, gamma 0.99, relu 64x64,
  temperature learned from 1.0 towards -|A|. Difference: ours clips gradients at norm 1000.
TD3 preset "ours": our TD3 preset (presets.ALGO_PRESETS["td3"]): 4 envs (DummyVecEnv), train_freq 1
  step per env (4 transitions), then 2 gradient steps of batch 256, the actor and the targets every
  2nd (policy_delay 2), lr 3e-4, buffer 100k, learning_starts 1000, tau 0.005, gamma 0.99, relu 64x64,
  Gaussian exploration noise 0.1 and target smoothing 0.2 clipped at 0.5, all in the action box
  rescaled to [-1, 1] as ours. Difference: ours clips gradients at norm 1000.

Timing: wall time of model.learn() (env stepping in Python, acting and updates). sbx compiles
inside learn(), so with WARMUP=1 (default) a throw-away model of the same shapes runs a short
learn() first (its time: "sbx_warmup_learn_s"), taking the compiles out of the timed one.
Final return: a 20-episode deterministic evaluation on a fresh env (and the mean of the last
20 training episodes). With CURVE=path, every training episode's (env steps, return) is written
there as JSON lines, for a learning curve beside ours.
"""
import json
import os
import sys
import time

import gymnasium as gym
import numpy as np

lib, ENV, TOTAL, SEED = sys.argv[1], sys.argv[2], int(float(sys.argv[3])), int(sys.argv[4])
preset = sys.argv[5] if len(sys.argv) > 5 else ("pjrl" if ENV.startswith("CartPole") else "zoo_pendulum")
algo = sys.argv[6] if len(sys.argv) > 6 else "ppo"

if lib == "sb3":
    import torch
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
    import stable_baselines3 as libmod
    from stable_baselines3 import DQN, PPO, SAC, TD3
    import torch.nn as nn
    ACT = {"tanh": nn.Tanh, "relu": nn.ReLU}
else:
    import flax.linen as fnn
    import sbx as libmod
    from sbx import DQN, PPO, SAC, TD3
    ACT = {"tanh": fnn.tanh, "relu": fnn.relu}
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402


def lin(v):
    return lambda frac: frac * v


CLS = {"ppo": PPO, "dqn": DQN, "sac": SAC, "td3": TD3}[algo]
warm_steps = None  # env steps of sbx's warm-up learn(): enough for every compiled function to run
if algo == "ppo" and preset == "pjrl":
    n_envs = 4
    kw = dict(n_steps=128, batch_size=128, n_epochs=4, learning_rate=lin(2.5e-4), gamma=0.99,
              gae_lambda=0.95, clip_range=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
              policy_kwargs=dict(activation_fn=ACT["tanh"], net_arch=dict(pi=[64, 64], vf=[64, 64])))
elif algo == "ppo" and preset == "zoo_pendulum":
    n_envs = 4
    kw = dict(n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
              learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4)
elif algo == "dqn" and preset == "ours":
    n_envs = 8
    kw = dict(learning_rate=lin(2.3e-3), buffer_size=100_000, learning_starts=1_000, batch_size=64, tau=1.0,
              gamma=0.99, train_freq=(32, "step"), gradient_steps=128, target_update_interval=256,
              exploration_fraction=0.16, exploration_initial_eps=1.0, exploration_final_eps=0.04,
              policy_kwargs=dict(net_arch=[64, 64], activation_fn=ACT["relu"]))
    if lib == "sb3":
        kw["max_grad_norm"] = 10.0
    warm_steps = 1_000 + 2 * 256
elif algo == "sac" and preset == "ours":
    n_envs = 1
    kw = dict(learning_rate=3e-4, buffer_size=100_000, learning_starts=1_000, batch_size=256, tau=0.005,
              gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto_1.0", target_entropy="auto",
              policy_kwargs=dict(net_arch=[64, 64], activation_fn=ACT["relu"]))
    warm_steps = 1_000 + 10
elif algo == "td3" and preset == "ours":
    from stable_baselines3.common.noise import NormalActionNoise

    n_envs = 4
    dim = int(np.prod(gym.make(ENV).action_space.shape))
    kw = dict(learning_rate=3e-4, buffer_size=100_000, learning_starts=1_000, batch_size=256, tau=0.005,
              gamma=0.99, train_freq=1, gradient_steps=2, policy_delay=2, target_policy_noise=0.2,
              target_noise_clip=0.5, action_noise=NormalActionNoise(np.zeros(dim), 0.1 * np.ones(dim)),
              policy_kwargs=dict(net_arch=[64, 64], activation_fn=ACT["relu"]))
    warm_steps = 1_000 + 4 * 10
elif preset == "default":
    n_envs = 1
    kw = {}
else:
    raise SystemExit(f"no preset {preset!r} for {algo}")


def make(seed):
    env = make_vec_env(ENV, n_envs=n_envs, seed=seed)
    extra = dict(device="cpu") if lib == "sb3" else {}
    return CLS("MlpPolicy", env, seed=seed, verbose=0, **extra, **kw)


t0 = time.perf_counter()
model = make(SEED)
setup_s = time.perf_counter() - t0

warm_s = None
if lib == "sbx" and os.environ.get("WARMUP", "1") == "1":
    m2 = make(SEED + 1000)
    t0 = time.perf_counter()
    m2.learn(total_timesteps=warm_steps or m2.n_steps * n_envs)
    warm_s = time.perf_counter() - t0
    del m2

callback = None
if os.environ.get("CURVE"):
    from stable_baselines3.common.callbacks import BaseCallback

    class EpisodeCurve(BaseCallback):
        """Each finished training episode (the Monitor wrapper's info) as one JSON line."""

        def __init__(self, path):
            super().__init__()
            self.file = open(path, "w")

        def _on_step(self):
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.file.write(json.dumps({"env_steps": int(self.num_timesteps),
                                                "episode_return": float(info["episode"]["r"])}) + "\n")
            return True

        def _on_training_end(self):
            self.file.close()

    callback = EpisodeCurve(os.environ["CURVE"])

t0 = time.perf_counter()
model.learn(total_timesteps=TOTAL, callback=callback)
learn_s = time.perf_counter() - t0
steps = model.num_timesteps

ep_rets = [ep["r"] for ep in model.ep_info_buffer]
last20 = float(np.mean(ep_rets[-20:])) if ep_rets else float("nan")
mean_det, std_det = evaluate_policy(model, gym.make(ENV), n_eval_episodes=20, deterministic=True)

print("SUMMARY", json.dumps({
    "anchor": lib, "algo": algo, "version": libmod.__version__, "env": ENV, "preset": preset, "seed": SEED,
    "n_envs": n_envs, "steps": int(steps), "setup_s": round(setup_s, 2),
    "sbx_warmup_learn_s": None if warm_s is None else round(warm_s, 2),
    "learn_s": round(learn_s, 2), "sps": round(steps / learn_s),
    "final_ret_last20_train_eps": round(last20, 2),
    "eval20_det_mean": round(float(mean_det), 2), "eval20_det_std": round(float(std_det), 2),
}), flush=True)
