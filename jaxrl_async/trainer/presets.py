"""Per-environment presets: the settings that reach a known return within a stated budget.

    cfg = config_for("Breakout-MinAtar")               # its preset applied, recorded in cfg.preset
    cfg = config_for("Breakout-MinAtar", "none")       # the plain defaults
    PRESETS["Pendulum-v1"].expected_return             # -146.4 (SAC's), and .source says where it comes from
    config_for("Pendulum-v1", algo="ppo")              # PPO's preset for it, "Pendulum-v1:ppo"

`jaxrl-async train --env X` applies X's preset (`--preset auto`, the default); flags given on the
command line override its values; `--preset none` gives the plain defaults; `jaxrl-async envs`
lists the presets. A preset is named by the env id it was made for, and may be applied to
another env (`--env Asterix-MinAtar --preset Breakout-MinAtar`).

Every expected return is the final greedy evaluation (mean over seeds of 32 episodes each), either
measured here with the command in its `source` or quoted with its origin; None where no figure
has been measured yet (the settings are then the peers' published ones, untested at that budget).
This module imports no JAX: the CLI reads it before anything is asked of JAX.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from jaxrl_async.algorithms import TrainConfig
from jaxrl_async.config import host_env_kind

AUTO, NONE = "auto", "none"


@dataclasses.dataclass(frozen=True)
class Preset:
    """Settings for one environment.

    Attributes:
      name: the env id it was made for.
      settings: `TrainConfig` fields to override (`total_timesteps` is the budget); "network"
        and "learner" hold dicts of those configs' fields.
      expected_return: final greedy return at the budget, mean over seeds; None: not measured.
      source: where the settings and the expected return come from (a command to reproduce it).
      cpu_run: for a preset sized for an accelerator (a suite's published settings), the flags
        of a run of it that a 2-core CPU ends in minutes and what that run reached; None: the
        preset fits a CPU as it is.
    """

    name: str
    settings: dict[str, Any]
    expected_return: float | None
    source: str
    cpu_run: tuple[str, str] | None = None

    @property
    def algo(self) -> str:
        """The learner the settings are for."""
        return self.settings.get("algo", "ppo")

    @property
    def budget(self) -> int:
        """Environment steps per seed."""
        return self.settings["total_timesteps"]

    def apply(self, config: TrainConfig) -> TrainConfig:
        """`config` with this preset's settings over it (its env kept), recorded in `preset`."""
        settings = dict(self.settings)
        nested = {field.name: dataclasses.replace(getattr(config, field.name), **settings.pop(field.name, {}))
                  for field in dataclasses.fields(config) if dataclasses.is_dataclass(getattr(config, field.name))}
        return dataclasses.replace(config, **settings, **nested, preset=self.name)


def _preset(name: str, settings: dict[str, Any], expected_return: float | None, source: str,
            cpu_run: tuple[str, str] | None = None) -> Preset:
    return Preset(name, settings, expected_return, source, cpu_run)


# PureJaxRL's MinAtar config (luchris429/purejaxrl, examples/brax_minatar.ipynb: "briefly tuned to do
# well on Gymnax's MinAtar environments"): an MLP on the flattened 10x10xC observation. The CNN torso
# that 'auto' picks for images runs tens of times slower on the CPU (experiments/README.md).
_MINATAR = dict(num_envs=64, num_steps=128,
                network=dict(hidden_sizes=(64, 64), activation="relu", torso="mlp"),
                learner=dict(update_epochs=4, num_minibatches=8, learning_rate=5e-3, gamma=0.99, gae_lambda=0.95,
                             clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5))
# The probes' learning tests (tests/learning_checks.py): a 16-unit net, a large step size.
_PROBE = dict(total_timesteps=64 * 60, num_envs=8, num_steps=8, eval_episodes=8,
              network=dict(hidden_sizes=(16,)),
              learner=dict(update_epochs=4, num_minibatches=2, learning_rate=1e-2))
_PROBE_TESTED = "tests/test_learning.py asserts it for every seed (4 seeds) at this budget"
_PROBE_ANY = "the env's only return, whatever the policy (envs/probes.py)"

# SAC's settings: the usual ones (Haarnoja et al. 2018; SB3, CleanRL: Adam 3e-4, batch 256,
# tau 0.005, gamma 0.99, one gradient step per env step, uniform random actions for the
# first steps) with 64x64 ReLU networks instead of 256x256 (many times cheaper per gradient
# step: docs/benchmarks.md, "Figures behind the code's comments"), on one env stepped once per
# iteration; made on Pendulum-v1.
_SAC = dict(
    algo="sac", total_timesteps=50_000, num_envs=1, num_steps=1,
    network=dict(hidden_sizes=(64, 64), activation="relu"),
    learner=dict(learning_rate=3e-4, anneal_lr=False, gamma=0.99, max_grad_norm=1000.0),
    replay=dict(replay_capacity=100_000, learning_starts=1_000, replay_ratio=1, replay_batch_size=256, n_step=1),
    sac=dict(tau=0.005, target_entropy="auto", init_temperature=1.0, learn_temperature=True))

# TD3's settings: the paper's (Fujimoto et al. 2018: Adam 3e-4, batch 256, tau 0.005, gamma 0.99,
# exploration noise 0.1, target smoothing 0.2 clipped at 0.5, policy delay 2, uniform random actions
# first) with 64x64 ReLU networks, on 4 envs stepped once per iteration and 2 gradient steps per
# iteration (half the paper's ratio: 25k gradient steps in 50k env steps; a quarter, 12.5k, left
# seeds at -176 and -182 of 8, an eighth failed); made on Pendulum-v1.
_TD3 = dict(
    algo="td3", total_timesteps=50_000, num_envs=4, num_steps=1,
    network=dict(hidden_sizes=(64, 64), activation="relu"),
    learner=dict(learning_rate=3e-4, anneal_lr=False, gamma=0.99, max_grad_norm=1000.0),
    replay=dict(replay_capacity=100_000, learning_starts=1_000, replay_ratio=2, replay_batch_size=256, n_step=1),
    td3=dict(exploration_noise=0.1, policy_delay=2, target_noise=0.2, target_noise_clip=0.5, target_tau=0.005))

# DQN's settings (experiments/dqn_cartpole.py, the README's tuned config): 8 envs x 32 steps, then 128
# gradient steps of batch 64 and a copy of the online network to the target, as Stable-Baselines3's
# tuned CartPole config (train_freq 256, gradient_steps 128); the learning rate annealed to zero, so
# the final policy is a settled one; made on CartPole-v1.
_DQN = dict(
    algo="dqn", total_timesteps=300_000, num_envs=8, num_steps=32,
    network=dict(hidden_sizes=(64, 64), activation="relu"),
    learner=dict(learning_rate=2.3e-3, anneal_lr=True, max_grad_norm=10.0, gamma=0.99),
    replay=dict(replay_capacity=100_000, learning_starts=1_000, replay_ratio=128, replay_batch_size=64, n_step=1),
    dqn=dict(target_update_period=128, target_update_tau=1.0, double_q=True, epsilon_start=1.0, epsilon_end=0.04,
             epsilon_decay_fraction=0.16))

# PQN's settings: rejax's PQN CartPole config (configs/gymnax/cartpole.yaml: 16 envs x 128 steps, 5 epochs
# of 16 minibatches, Adam 3e-4, lambda 0.9, epsilon 1 -> 0.05 over half the run, 64x64 ReLU with
# LayerNorm) with the learning rate annealed to zero as purejaxql's; made on CartPole-v1.
_PQN = dict(
    algo="pqn", total_timesteps=500_000, num_envs=16, num_steps=128,
    network=dict(hidden_sizes=(64, 64), activation="relu"),
    learner=dict(update_epochs=5, num_minibatches=16, learning_rate=3e-4, anneal_lr=True, max_grad_norm=10.0,
                 gamma=0.99, gae_lambda=0.9),
    dqn=dict(epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_fraction=0.5),
    pqn=dict(layer_norm=True))

# The grid worlds (Navix, XLand-MiniGrid; Jumanji's Snake): the package's PPO with a 1e-3 step size
# on 16 envs x 64 steps, and the MLP on the flattened grid, not the CNN that 'auto' picks for it:
# both solved XLand-MiniGrid's Empty-8x8 at 200k steps (3 seeds each), the CNN many times slower on
# the CPU (docs/suites.md, xminigrid). The step size: Navix-Empty-5x5's greedy policy was stuck on
# every seed of 3 at 2.5e-4 and 100k steps (its sampling policy solving it), optimal at 1e-3.
_GRID = dict(num_envs=16, num_steps=64, network=dict(torso="mlp"), learner=dict(learning_rate=1e-3))
# The suites' flagship tasks at their own published settings and budgets, made for an accelerator (a
# CPU takes days at these budgets: pass --total-timesteps and --num-envs to try them smaller). Brax's
# and Playground's PPO is Brax's trainer: a tanh-squashed Gaussian with a state-dependent std, policy
# and value MLPs of their own widths (swish), rewards scaled, observations normalised, no gradient
# clipping, a constant learning rate, the value loss unclipped and clip 0.3. A Brax update is
# batch_size x num_minibatches x unroll_length env steps; ours takes as many, num_envs x num_steps,
# with GAE over each env's num_steps (Brax's over each unroll). No figure is measured here yet at
# these budgets: expected_return is None (docs/suites.md, "Flagship tasks").
_BRAX_PPO = dict(normalize_obs=True,
                 network=dict(policy_hidden_sizes=(32,) * 4, value_hidden_sizes=(256,) * 5, activation="swish",
                              action_dist="tanh_gaussian"),
                 learner=dict(update_epochs=4, num_minibatches=32, learning_rate=3e-4, anneal_lr=False, gamma=0.97,
                              gae_lambda=0.95, clip_eps=0.3, clip_value_loss=False, ent_coef=1e-2, max_grad_norm=1e9))
# Brax's SAC (its notebook trains hopper and walker2d with SAC, not PPO): 128 envs, 256x256 ReLU networks,
# Adam 6e-4, discount 0.997, a replay of 2^20 from 8192 transitions, the temperature learned towards
# -|A|/2, observations normalised (the buffer stores them raw; each update normalises its samples).
_BRAX_SAC = dict(algo="sac", num_envs=128, num_steps=1, normalize_obs=True,
                 network=dict(hidden_sizes=(256, 256), activation="relu"),
                 learner=dict(learning_rate=6e-4, anneal_lr=False, gamma=0.997, max_grad_norm=1e9),
                 replay=dict(replay_capacity=1_048_576, learning_starts=8192, n_step=1),
                 sac=dict(tau=0.005, init_temperature=1.0, learn_temperature=True))
_BRAX_SOURCE = ("Brax's published {algo} settings for {env} (its training notebook, notebooks/training.ipynb), the "
                "positional pipeline as its notebook trains; not yet measured here at this budget")


def _with(base: dict, **changes) -> dict:
    """`base` with `changes` over it, a section's dict merged field by field."""
    return {**base, **{name: {**base[name], **value} if isinstance(value, dict) and name in base else value
                       for name, value in changes.items()}}


def _brax(env: str, algo: str, settings: dict, cpu_run: tuple[str, str]) -> Preset:
    return _preset(f"brax:{env}", dict(settings, env_kwargs=("backend=positional",)), None,
                   _BRAX_SOURCE.format(algo=algo, env=env), cpu_run)


# The CPU-sized runs of the flagship presets: their curves over 3 seeds, 2-core EPYC (docs/suites.md,
# "Three seeds each"), greedy return at the first evaluation -> the last, and the minutes they took
_PPO_128x80, _PPO_128x160 = ("--num-envs 128 --num-steps 80 --total-timesteps 655360",
                             "--num-envs 128 --num-steps 160 --total-timesteps 655360")
_DM_128 = "--num-envs 128 --num-steps 480 --total-timesteps 614400"


# Playground's DM Control Suite PPO (mujoco_playground/config/dm_control_suite_params.py, brax_ppo_config):
# 2048 envs, unroll 30 x batch 1024 x 32 minibatches = 983,040 env steps an update (480 an env), 16
# epochs, discount 0.995, Adam 1e-3, entropy 1e-2, reward x10, 60M steps; Brax's default networks
_PLAYGROUND_DM = _with(_BRAX_PPO, total_timesteps=60_000_000, num_envs=2048, num_steps=480,
                       learner=dict(update_epochs=16, learning_rate=1e-3, gamma=0.995, reward_scale=10.0))
_PLAYGROUND_SOURCE = ("Playground's DM Control Suite PPO settings (mujoco_playground/config/dm_control_suite_params.py, "
                      "brax_ppo_config{change}); not yet measured here at this budget")
_FLAGSHIP_PRESETS = (
    _brax("ant", "PPO", _with(_BRAX_PPO, total_timesteps=50_000_000, num_envs=4096, num_steps=80,
                              learner=dict(reward_scale=10.0)),
          (_PPO_128x80, "greedy 662 -> 2156 over 3 seeds, 14 min")),
    _brax("humanoid", "PPO", _with(_BRAX_PPO, total_timesteps=50_000_000, num_envs=2048, num_steps=160,
                                   learner=dict(update_epochs=8, ent_coef=1e-3, reward_scale=0.1)),
          (_PPO_128x160, "greedy 447 -> 786 over 3 seeds, 20 min")),
    _brax("halfcheetah", "PPO", _with(_BRAX_PPO, total_timesteps=50_000_000, num_envs=2048, num_steps=160,
                                      learner=dict(update_epochs=8, gamma=0.95, ent_coef=1e-3)),
          (_PPO_128x160, "greedy 16 -> 2061 over 3 seeds, 16 min")),
    _brax("hopper", "SAC", _with(_BRAX_SAC, total_timesteps=6_553_600, learner=dict(reward_scale=30.0),
                                 replay=dict(replay_ratio=64, replay_batch_size=512), sac=dict(target_entropy=-1.5)),
          ("--total-timesteps 262144", "greedy 839 -> 673 over 3 seeds (1026 at 164k), standing; 62 min")),
    _brax("walker2d", "SAC", _with(_BRAX_SAC, total_timesteps=7_864_320, learner=dict(reward_scale=5.0),
                                   replay=dict(replay_ratio=32, replay_batch_size=128), sac=dict(target_entropy=-3.0)),
          ("--total-timesteps 262144", "greedy 194 -> 710 over 3 seeds, standing, not yet walking; 11 min")),
    *(_preset(f"playground:{env}", settings, None, _PLAYGROUND_SOURCE.format(change=change),
              (_DM_128, f"greedy {curve} over 3 seeds, {minutes} min"))
      for env, settings, change, curve, minutes in (
          ("CheetahRun", _PLAYGROUND_DM, "", "21 -> 151", 11),
          ("WalkerWalk", _PLAYGROUND_DM, "", "27 -> 78", 16),
          ("FingerSpin", _with(_PLAYGROUND_DM, learner=dict(gamma=0.95)), ": discount 0.95 for FingerSpin",
           "0 -> 24", 16))),
    # Playground's locomotion PPO for Go1 (mujoco_playground/config/locomotion_params.py): 8192 envs, unroll 20 x
    # batch 256 x 32 minibatches (20 steps an env an update), 4 epochs, discount 0.97, Adam 3e-4, entropy 1e-2,
    # gradients clipped at 1, 200M steps, 512-256-128 policy and value networks, the policy fed the `state`
    # observation and the critic the `privileged_state`. Its robot comes from MuJoCo Menagerie, found on disk
    # (envs/suites/playground.py).
    _preset("playground:Go1JoystickFlatTerrain",
            _with(_BRAX_PPO, total_timesteps=200_000_000, num_envs=8192, num_steps=20,
                  network=dict(policy_hidden_sizes=(512, 256, 128), value_hidden_sizes=(512, 256, 128),
                               policy_obs_key="state", value_obs_key="privileged_state"),
                  learner=dict(max_grad_norm=1.0)),
            None, "Playground's locomotion PPO settings for Go1 (mujoco_playground/config/locomotion_params.py, "
                  "brax_ppo_config); not yet measured here at this budget",
            ("--num-envs 128 --num-steps 160 --total-timesteps 1310720",
             "greedy 16.1 -> 14.1 over 3 seeds, standing; their sampled episodes 42 -> 120 steps, rising from "
             "1M steps on; 19 min")),
)

_GRID_PRESETS = (
    _preset("navix:Navix-Empty-8x8-v0", dict(_GRID, total_timesteps=200_000), 1.0,
            "the grid settings; measured: 1.0 on every seed of 5 (the goal reached; navix pays 1 however late), "
            "in 11 steps, the shortest way (python -m experiments.presets --envs navix:Navix-Empty-8x8-v0)"),
    # at 500k steps one seed of 3 was still stuck (greedy 0.0, sampling 0.56)
    _preset("navix:Navix-DoorKey-5x5-v0", dict(_GRID, total_timesteps=1_000_000), 1.0,
            "the grid settings; measured: 1.0 on every seed of 5, in 9.7 steps on average "
            "(python -m experiments.presets --envs navix:Navix-DoorKey-5x5-v0)"),
    _preset("xminigrid:MiniGrid-Empty-8x8", dict(_GRID, total_timesteps=200_000), 0.960,
            "the grid settings; measured: 0.960 over 5 seeds (0.958 to 0.961, in 11.4 steps on average; the "
            "shortest way, 11 steps, pays 0.961) (python -m experiments.presets --envs xminigrid:MiniGrid-Empty-8x8)"),
    _preset("xminigrid:MiniGrid-DoorKey-5x5", dict(_GRID, total_timesteps=500_000), 0.963,
            "the grid settings; measured: 0.963 over 5 seeds (0.959 to 0.965, in 10.4 steps on average) "
            "(python -m experiments.presets --envs xminigrid:MiniGrid-DoorKey-5x5)"),
    # gamma 0.997 is jumanji's own A2C config's (jumanji/training/configs/env/snake.yaml, 256M steps there);
    # entropy 0.03: at 0.01 the sampling policy ate 9.5 (6.7 to 14.0) over 5 seeds. The greedy policy
    # learns to circle safely until the 4000-step limit, eating little: the preset evaluates both
    _preset("jumanji:Snake-v1", dict(_GRID, total_timesteps=1_000_000, eval_stochastic=True,
                                     learner=dict(learning_rate=1e-3, gamma=0.997, ent_coef=0.03)),
            0.51, "the grid settings, gamma 0.997, entropy 0.03; measured: 0.51 over 5 seeds (0.28 to 1.03) greedy, "
                  "15.7 (14.1 to 17.0) sampling, where a uniformly random policy eats 0.10 "
                  "(python -m experiments.presets --envs jumanji:Snake-v1)"),
)

_ALL = (
    # -- classic control ----------------------------------------------------------------------------
    _preset("CartPole-v1", dict(total_timesteps=500_000), 500.0,
            "the package defaults (PureJaxRL's CartPole config); measured: 500.0 every seed of 5 "
            "(python -m experiments.ppo_cartpole)"),
    # rejax's config (configs/gymnax/acrobot.yaml, ppo) at our budget; the package defaults gave
    # -85.8 ± 4.6 (-83.7 with normalised observations, seeds down to -89.4)
    _preset("Acrobot-v1",
            dict(total_timesteps=500_000, num_envs=5, num_steps=100, normalize_obs=True,
                 learner=dict(update_epochs=5, num_minibatches=5, learning_rate=7.5e-4, max_grad_norm=0.5,
                              ent_coef=0.01)),
            -80.0, "rejax's Acrobot config at 500k steps; measured: -80.4, -79.4, -79.8, -82.1, -78.2 over 5 seeds "
                   "(python -m experiments.ppo_acrobot)"),
    # SAC: every seed of 5 above -160 at 50k steps, where PPO's best (below) reaches -179 ± 32 at 1M
    _preset("Pendulum-v1", _SAC, -146.4,
            "SAC's settings; measured: -155.8, -131.4, -149.9, -144.9, -149.9 over 5 seeds at 50k steps "
            "(python -m experiments.sac_pendulum); rejax's PPO reports -180 at 1M"),
    # SAC, its exploration noise correlated over ~100 steps (exploration.py): with white noise
    # every learner tried here (PPO with rejax's and gymnax-blines' configs, SAC) learned to
    # stand still, the flag never found
    _preset("MountainCarContinuous-v0", dict(_SAC, action_noise_correlation=0.99),
            94.4, "SAC with temporally correlated exploration (Eberhard et al. 2023); measured: 94.4 ± 0.2 over "
                  "5 seeds, every seed >= 94.0 (python -m experiments.presets --envs MountainCarContinuous-v0)"),
    _preset("MountainCar-v0",
            dict(total_timesteps=100_000, num_envs=10, num_steps=20,
                 learner=dict(update_epochs=5, num_minibatches=5, learning_rate=2.5e-4, gae_lambda=0.98,
                              ent_coef=0.0)),
            -200.0, "settings: rejax configs/gymnax/mountaincar.yaml (ppo), which notes it is not fitted "
                    "(the sparse reward defeats PPO's exploration); measured: -200.0 on every seed of 5, the "
                    "car never reaches the flag (python -m experiments.presets --envs MountainCar-v0)"),
    # -- MinAtar ------------------------------------------------------------------------------------
    *(_preset(env_id, dict(total_timesteps=10_000_000, **_MINATAR), expected,
              f"PureJaxRL's MinAtar config (purejaxrl examples/brax_minatar.ipynb), budget 1e7 as there; measured: "
              f"{measured} over 5 seeds (python -m experiments.presets --envs {env_id})")
      for env_id, expected, measured in (
          ("Asterix-MinAtar", 10.4, "10.4 ± 2.4 (8.3 to 14.2)"), ("Freeway-MinAtar", 59.5, "59.5 ± 1.7 (57.5 to 61.9)"),
          ("Seaquest-MinAtar", 32.9, "32.9 ± 19.6 (5.7 to 63.1)"), ("SpaceInvaders-MinAtar", 181.0, "181.0 ± 12.2 (157 to 191)"))),
    # PureJaxRL's config with 8 epochs instead of 4 (every seed gained, +1.6 to +7.9) and its 8,192-step
    # batch as 256 envs x 32 steps instead of 64 x 128: over ten seeds 40.3 (median 32.4) against the
    # 8 epochs' 30.4 (median 29.0); 16 epochs, 32 or 128 envs, gamma 0.995, a lower learning rate, a
    # wider MLP gained less (experiments/README.md, "Breakout-MinAtar"). A seed's return is chaotic in
    # XLA's float code: the same command, the same code, gave 27.7 over 15 seeds on the evening's
    # machine (most likely another CPU model), so the expected return is the mean of all 25 runs.
    # That evening the 64 x 128 batch was ahead (33.3 against 28.6 over ten seeds): over the 20
    # runs of each, 31.9 against 34.5, within the spread between machines, at the same speed.
    _preset("Breakout-MinAtar",
            dict(_MINATAR, total_timesteps=1_000_000, num_envs=256, num_steps=32,
                 learner={**_MINATAR["learner"], "update_epochs": 8}), 32.7,
            "PureJaxRL's MinAtar config with 8 epochs, 256 envs x 32 steps; measured: 32.7 over 25 runs (21.4 to "
            "94.6, median 29.0): 40.3 over 10 seeds one morning, 27.7 over 15 that evening (python -m "
            "experiments.breakout_gap --variants pjrl-8epochs-256envs, --seed 0, 1, 2); with PureJaxRL's config "
            "25.3 ± 3.1 (5 seeds); PureJaxRL: 32 (one seed, training return)"),
    # -- bsuite ---------------------------------------------------------------------------------------
    _preset("Catch-bsuite", dict(total_timesteps=500_000), 1.0,
            "the package defaults; measured: 1.0 on every seed of 5, greedy and sampling (a catch every "
            "episode; python -m experiments.presets --envs Catch-bsuite)"),
    # -- partially observable -------------------------------------------------------------------------
    _preset("StatelessCartPole-v1",
            dict(total_timesteps=1_000_000, num_envs=16, num_steps=64,
                 network=dict(hidden_sizes=(64,), core="gru", core_size=64),
                 learner=dict(update_epochs=4, num_minibatches=4, learning_rate=1e-3)),
            474.1, "a GRU core; measured: 474.1 ± 42.6 over 5 seeds (python -m experiments.recurrent_pomdp)"),
    # -- JAX suites (envs/suites/) ---------------------------------------------------------------------
    # Brax's published settings (its training notebook: 2048 envs, unroll 5 x batch 1024 x 32 minibatches, 4
    # epochs, discount 0.97, Adam 3e-4, entropy 1e-2, reward x10) with its policy, on MJX, the fastest of
    # Brax's backends on the CPU; gradients clipped at 1, as measured (Brax's trainer clips none)
    _preset("brax:inverted_pendulum",
            _with(_BRAX_PPO, total_timesteps=1_310_720, num_envs=2048, num_steps=80, env_kwargs=("backend=mjx",),
                  learner=dict(reward_scale=10.0, max_grad_norm=1.0)),
            1000.0, "Brax's published settings and policy; measured: 1000 on every seed of 9 at 1.31M steps, as "
                    "Brax's own trainer beside it, at 0.99-1.08x its steps/s and 1.08-1.13x sooner end to end on "
                    "a quiet 2-core CPU (python -m benchmarks.brax_ppo --rounds 3)"),
    # Playground's DM Control Suite PPO settings (mujoco_playground/config/dm_control_suite_params.py:
    # 2048 envs, unroll 30, 32 minibatches x 1024, 16 epochs, discount 0.995, Adam 1e-3, entropy 0.01;
    # its trainer clips no value loss) scaled to this CPU: 256 envs x 30 steps, 8 minibatches, 4 epochs
    _preset("playground:CartpoleBalance",
            dict(total_timesteps=1_000_000, num_envs=256, num_steps=30, normalize_obs=True,
                 network=dict(hidden_sizes=(32, 32, 32, 32), activation="swish"),
                 learner=dict(update_epochs=4, num_minibatches=8, learning_rate=1e-3, gamma=0.995, gae_lambda=0.95,
                              clip_eps=0.3, clip_value_loss=False, ent_coef=0.01, max_grad_norm=1.0)),
            852.8, "Playground's DM Control Suite PPO settings, scaled down; measured: 997.2, 994.9, 999.6, 999.2, "
                   "575.3, 550.7 over 6 seeds at 998,400 steps (jaxrl-async train --env playground:CartpoleBalance "
                   "--num-seeds 3, with --seed 0 and --seed 1)"),
    # Craftax's PPO baseline (craftax_baselines ppo.py: 1024 envs x 64 steps, 4 epochs of 8 minibatches,
    # GAE lambda 0.8, entropy 0.01, 1e9 steps on a GPU) at a CPU's scale: 64 envs, a 256x256 ReLU MLP,
    # a 5e-4 step size for the 1e6 steps
    _preset("craftax:Craftax-Classic-Symbolic-v1",
            dict(total_timesteps=1_048_576, num_envs=64, num_steps=64,
                 network=dict(hidden_sizes=(256, 256), activation="relu"),
                 learner=dict(update_epochs=4, num_minibatches=8, learning_rate=5e-4, gae_lambda=0.8, ent_coef=0.01)),
            4.1, "Craftax's PPO baseline at a CPU's scale; measured: 3.98, 4.48, 3.85 greedy over 3 seeds at 1.05M "
                 "steps (sampling: 6.10, 5.85, 5.63), where a uniformly random policy scores 1.45 (python -m "
                 "experiments.presets --envs craftax:Craftax-Classic-Symbolic-v1 --num-seeds 3)"),
    *_FLAGSHIP_PRESETS,
    # -- JAX suites: grid worlds (docs/suites.md) ------------------------------------------------------
    *_GRID_PRESETS,
    # -- probes ---------------------------------------------------------------------------------------
    _preset("Probe-ConstantReward", _PROBE, 1.0, _PROBE_ANY),
    _preset("Probe-ActionReward", _PROBE, 1.0, _PROBE_TESTED),
    _preset("Probe-ObsActionReward", _PROBE, 1.0, _PROBE_TESTED),
    _preset("Probe-ContinuousAction", _PROBE, 0.0,
            "the optimum (reward -(a - 1)^2); " + _PROBE_TESTED + " to within 0.01"),
    _preset("Probe-ObsReward", _PROBE, None, "tests/test_learning.py (value fitting; the return is random ±1)"),
    _preset("Probe-TwoStep", _PROBE, 1.0, _PROBE_ANY),
    _preset("Probe-Truncation", _PROBE, 10.0, _PROBE_ANY + ": +1 a step for the 10-step limit"),
    _preset("Probe-Memory",
            dict(total_timesteps=100_000, num_envs=16, num_steps=32, eval_episodes=64,
                 network=dict(hidden_sizes=(32,), core="gru", core_size=32),
                 learner=dict(num_minibatches=4, learning_rate=3e-3, gamma=0.9)),
            1.0, "tests/test_recurrent.py's config (a GRU core; 1.0 is the cue remembered every time, "
                 "0.5 a memoryless guess); measured: 1.0 on every seed of 5, greedy and sampling "
                 "(python -m experiments.presets --envs Probe-Memory)"),
)

PRESETS: dict[str, Preset] = {preset.name: preset for preset in _ALL}

# Presets of another learner than the env's own, named "<env>:<algo>": `--algo ALGO` on the env
# starts from it (`resolve`), and `--preset NAME` names it.
_OTHER_LEARNERS = (
    _preset("Pendulum-v1:ppo",
            dict(algo="ppo", total_timesteps=1_000_000, num_envs=100, num_steps=100, normalize_obs=True,
                 network=dict(activation="swish"),
                 # a long horizon: swinging up pays off only after ~100 steps; the Gaussian's learned
                 # log-std explores enough, so no entropy bonus
                 learner=dict(update_epochs=10, num_minibatches=10, learning_rate=1e-3, max_grad_norm=10.0,
                              gamma=0.995, gae_lambda=0.95, ent_coef=0.0)),
            -179.4, "rejax's tuned Pendulum config; measured: -179.4 ± 32.1 over 5 seeds "
                    "(python -m experiments.ppo_pendulum); rejax reports -180"),
)
# PQN on Breakout-MinAtar: purejaxql's MinAtar config (config/alg/pqn_minatar.yaml: 128 envs x 32 steps, 32
# minibatches, lambda 0.65, epsilon 1 -> 0.05 over 10% of the run, LayerNorm) with 4 epochs instead of 2 and
# Adam 3e-3 instead of 5e-4, and a 128x128 MLP on the flattened image instead of its CNN (tens of times slower
# on the CPU). Screened over 3 seeds at 1e6 steps: 2 epochs 20.5 (5 seeds), 4 epochs 23.1, 8 epochs 30.9;
# 4 epochs at 1e-3 32.9, 2e-3 36.4 (5 seeds), 3e-3 71.6, 5e-3 32.7; 8 epochs at 1e-3 32.8; lambda 0.9 20.0.
_PQN_BREAKOUT = dict(
    algo="pqn", total_timesteps=1_000_000, num_envs=128, num_steps=32,
    network=dict(hidden_sizes=(128, 128), activation="relu", torso="mlp"),
    learner=dict(update_epochs=4, num_minibatches=32, learning_rate=3e-3, anneal_lr=True, max_grad_norm=10.0,
                 gamma=0.99, gae_lambda=0.65),
    dqn=dict(epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_fraction=0.1),
    pqn=dict(layer_norm=True))
# PQN on the other MinAtar games at PPO's budget there (1e7): purejaxql's MinAtar config itself (2 epochs,
# Adam 5e-4) with the 128x128 MLP, where Breakout's 4 epochs at 3e-3 fell apart over 1e7 steps on Asterix
# (2.7 against 35.9); Freeway keeps Breakout's settings (65.1, the only ones run there), SpaceInvaders
# takes 256x256, gamma 0.98, lambda 0.75 and epsilon decayed to 0.01 over a quarter of the run (178.7), the
# best of thirty configs, all below PPO's 181.0 (docs/learners.md's table). Measured over 3 seeds each
# (experiments/results/pqn-minatar-1e7/).
_PQN_MINATAR = dict(_PQN_BREAKOUT, total_timesteps=10_000_000,
                    learner={**_PQN_BREAKOUT["learner"], "update_epochs": 2, "learning_rate": 5e-4})
_PQN_MINATAR_SOURCE = ("purejaxql's PQN MinAtar config with a {net} MLP{change}, 1e7 steps; measured: {measured} "
                       "over 3 seeds (jaxrl-async train --env {env} --algo pqn --num-seeds 3); PPO's preset: {ppo}")

# the value-based learners on CartPole-v1 (`--algo dqn` / `--algo pqn` alone), PQN on Breakout-MinAtar
_OTHER_LEARNERS += (
    _preset("Pendulum-v1:td3", _TD3, -144.9,
            "TD3's settings; measured: -147.4, -134.5, -159.0, -134.8, -148.6 over 5 seeds at 50k steps "
            "(python -m experiments.td3_pendulum)"),
    _preset("CartPole-v1:dqn", dict(_DQN, learner={**_DQN["learner"], "gamma": 0.98}), 500.0,
            "DQN's settings with gamma 0.98 (experiments/dqn_cartpole.py); measured: 500.0 on 23 seeds of 24 and "
            "497.2 on the last (jaxrl-async train --env CartPole-v1 --algo dqn --num-seeds 8, --seed 0, 8 and 16); "
            "gamma 0.99 ended under 475 on 2 of 8 (322.9, 442.9)"),
    _preset("CartPole-v1:pqn", _PQN, 500.0,
            "PQN's settings (rejax's PQN CartPole config, its learning rate annealed); measured: 500.0 on every "
            "seed of 10 (jaxrl-async train --env CartPole-v1 --algo pqn --num-seeds 5, --seed 0 and --seed 5)"),
    _preset("Breakout-MinAtar:pqn", _PQN_BREAKOUT, 56.0,
            "purejaxql's PQN MinAtar config with 4 epochs, Adam 3e-3 and a 128x128 MLP; measured: 56.0 over 5 "
            "seeds (67.5, 50.5, 96.7, 38.5, 26.9: jaxrl-async train --env Breakout-MinAtar --algo pqn --num-seeds 5), "
            "42.7 over 5 more (--seed 5: 25.6 to 57.4); PPO's preset: 32.7"),
    _preset("Asterix-MinAtar:pqn", _PQN_MINATAR, 35.9, _PQN_MINATAR_SOURCE.format(
        net="128x128", change="", measured="35.9 (40.0, 28.6, 39.1)", env="Asterix-MinAtar", ppo=10.4)),
    _preset("Freeway-MinAtar:pqn", dict(_PQN_BREAKOUT, total_timesteps=10_000_000), 65.1, _PQN_MINATAR_SOURCE.format(
        net="128x128", change=" and Breakout-MinAtar:pqn's 4 epochs at Adam 3e-3",
        measured="65.1 (65.0, 65.4, 65.0)", env="Freeway-MinAtar", ppo=59.5)),
    _preset("Seaquest-MinAtar:pqn", _PQN_MINATAR, 70.5, _PQN_MINATAR_SOURCE.format(
        net="128x128", change="", measured="70.5 (62.1, 74.0, 75.3)", env="Seaquest-MinAtar", ppo=32.9)),
    _preset("SpaceInvaders-MinAtar:pqn",
            dict(_PQN_MINATAR, network={**_PQN_MINATAR["network"], "hidden_sizes": (256, 256)},
                 learner={**_PQN_MINATAR["learner"], "gamma": 0.98, "gae_lambda": 0.75},
                 dqn={**_PQN_MINATAR["dqn"], "epsilon_end": 0.01, "epsilon_decay_fraction": 0.25}), 178.7,
            _PQN_MINATAR_SOURCE.format(net="256x256", change=", gamma 0.98, lambda 0.75 and epsilon decayed to "
                                       "0.01 over a quarter of the run", measured="178.7 (183, 175, 178)",
                                       env="SpaceInvaders-MinAtar", ppo="181.0, ahead of PQN here")),
)
ENV_LEARNER_PRESETS: dict[str, Preset] = {preset.name: preset for preset in _OTHER_LEARNERS}

# A learner with a preset of its own starts from it under `--preset auto` on an env whose own
# preset is another learner's (`resolve`); the others start from the plain defaults.
ALGO_PRESETS: dict[str, Preset] = {
    "sac": _preset("sac", _SAC, None,
                   "SAC's usual settings, 64x64 networks; Pendulum-v1: python -m experiments.sac_pendulum"),
    "td3": _preset("td3", _TD3, None,
                   "TD3's usual settings, 64x64 networks, half a gradient step per env step; Pendulum-v1: "
                   "python -m experiments.td3_pendulum"),
    "dqn": _preset("dqn", _DQN, None, "DQN's settings made on CartPole-v1 (its preset CartPole-v1:dqn, whose "
                   "gamma 0.98 suits CartPole's horizon; this one keeps 0.99)"),
    "pqn": _preset("pqn", _PQN, None, "PQN's settings made on CartPole-v1 (its preset CartPole-v1:pqn)"),
}


def presets_of(env: str) -> list[Preset]:
    """`env`'s presets: its own first, then those of other learners (`ENV_LEARNER_PRESETS`)."""
    own = [PRESETS[env]] if env in PRESETS else []
    return own + [preset for name, preset in ENV_LEARNER_PRESETS.items() if name.rsplit(":", 1)[0] == env]


def resolve(preset: str, env: str, algo: str | None = None) -> Preset | None:
    """The preset that `--preset NAME` picks for `env` and `algo`: 'auto' -> the env's own where
    it is for `algo` (None: whichever learner the env's preset names, PPO unless it says), else
    the env's preset for that learner (`ENV_LEARNER_PRESETS`, "<env>:<algo>"), else the learner's
    own (`ALGO_PRESETS`; None where there is none); 'none' -> None; a preset name -> that preset.

    Raises:
      ValueError: an unknown name, naming the valid ones.
    """
    if preset == AUTO:
        own = PRESETS.get(env)
        if own is not None and algo in (None, own.algo):
            return own
        algo = algo or "ppo"
        return ENV_LEARNER_PRESETS.get(f"{env}:{algo}") or ALGO_PRESETS.get(algo)
    if preset == NONE:
        return None
    named = {**PRESETS, **ENV_LEARNER_PRESETS, **ALGO_PRESETS}
    if preset not in named:
        raise ValueError(f"preset={preset!r} is unknown: choose {AUTO!r} (the env's own, or the learner's), "
                         f"{NONE!r} (the plain defaults) or one of {', '.join(sorted(named))}")
    return named[preset]


def preset_learner_note(config: TrainConfig) -> str:
    """For an error about the config's learner: where another env's preset, asked for by name
    (`--preset Pendulum-v1` on CartPole), names that learner, a clause that says so (the user may
    never have asked for the learner), else ''. A learner's own preset is picked by its --algo."""
    chosen = {**PRESETS, **ENV_LEARNER_PRESETS}.get(config.preset)
    if chosen is None or chosen.algo != config.algo:
        return ""
    return (f" (preset {config.preset!r} trains algo={config.algo!r}: --algo picks another learner over it, "
            "--preset none the plain defaults)")


def missing_preset_note(env: str, algo: str | None = None) -> str | None:
    """One line for a user whose `env` has no preset under `--preset auto` (None where it has
    one): it trains with the plain defaults, and the closest env's preset for the same learner is
    named with the flag that applies it. For a suite's env, the closest of that suite's envs (its
    published settings); for a host env or a gymnax one, a gymnax env whose name is close (a host
    env's the same task: `gymnasium:Pendulum-v1` -> `Pendulum-v1:ppo`), never a suite's, whose
    presets are sized for thousands of envs on an accelerator; none where no name is close."""
    if resolve(AUTO, env, algo) is not None:
        return None
    algo = algo or TrainConfig.algo
    prefix, _, name = env.rpartition(":")
    if prefix and not host_env_kind(env):
        target, envs, cutoff = env, [e for e in PRESETS if e.startswith(prefix + ":")], 0.0
    else:
        target, envs, cutoff = name, [e for e in PRESETS if ":" not in e], 0.6
    ranked = difflib.get_close_matches(target, sorted(envs), n=len(envs), cutoff=cutoff) if envs else []
    close = next((preset for preset in (resolve(AUTO, e, algo) for e in ranked) if preset is not None), None)
    hint = f"; the closest preset is {close.name} (--preset {close.name} applies it)" if close else ""
    return (f"note: {env} has no preset for {algo}: training with the plain defaults (made for "
            f"CartPole-v1: {TrainConfig.num_envs} envs x {TrainConfig.num_steps} steps, a "
            f"{'x'.join(map(str, TrainConfig().network.hidden_sizes))} MLP){hint}")


def cpu_note(config: TrainConfig, given: set[str]) -> str | None:
    """One line for a run on a CPU of a preset sized for an accelerator (`Preset.cpu_run`), where
    none of the flags that size it (`given`: the config fields set by flags) was given; else None."""
    preset = PRESETS.get(config.preset)
    if preset is None or preset.cpu_run is None or given & {"num_envs", "num_steps", "total_timesteps"}:
        return None
    flags, reached = preset.cpu_run
    return (f"note: {preset.name}'s preset is its suite's published setting, sized for an accelerator "
            f"({preset.settings['num_envs']} envs, {preset.budget:,} steps: hours on a CPU); "
            f"sized for a CPU: {flags} ({reached}) (docs/suites.md)")


def config_for(env: str, preset: str = AUTO, base: TrainConfig | None = None, algo: str | None = None) -> TrainConfig:
    """A TrainConfig for `env` and `algo` (None: the learner the env's preset names): `base`
    (default: the plain defaults) with the preset over it, and `algo` over both, as the CLI's
    --algo is over the preset it picked."""
    config = dataclasses.replace(base or TrainConfig(), env=env, preset=NONE)
    chosen = resolve(preset, env, algo)
    config = config if chosen is None else chosen.apply(config)
    return config if algo is None else dataclasses.replace(config, algo=algo)
