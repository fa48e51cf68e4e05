"""A training run's config: the settings every learner shares (`TrainConfigBase`, holding the
sections of `config.py`), and the `TrainConfig` class assembled from the learner registry
(`LearnerSpec`, `train_config_class`), so that a learner's own flags join it as a section without
an edit here.

Like the sections, every field is a flag (`cli/main.py`) whose comment is its help text, and an
invalid value raises `ValueError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from jaxrl_async.config import (MATMUL_PRECISIONS, REPLAY_FIELDS, LearnerConfig, NetworkConfig, ReplayConfig,
                                check_minibatches, host_env_kind, parse_env_kwargs, require, require_field_types)


@dataclasses.dataclass(frozen=True)
class LearnerSpec:
    """What the config knows of a learner: its line in the registry (`algorithms/registry.py`).

    Attributes:
      name: its `--algo` name; its code is the module `algorithms/<name>.py` (`LEARNER` there).
      section: the dataclass of its own flags, the config's field `name` (None: it has none).
      actions: the action spaces it learns, by class name (`Discrete`, `MultiDiscrete`, `Box`).
      replay: it learns from the replay buffer (`ReplayConfig`'s flags), not from the rollout.
        With `--normalize-obs` its rollout records the env's own observations beside the
        statistics (`Trajectory.obs_stats`), so its update must normalise what it samples
        (`replay.learner.normalized_batch`, as `sample_batch` and DQN's update do).
      own_networks: what it builds from `hidden_sizes` instead of the actor-critic (the actor-critic's
        own options are refused); "" where it acts with the actor-critic.
      whole_sequences: its minibatches are whole env sequences, not transitions.
      resume_fixed: fields of its section that shape its checkpointed state.
      hparams_read: the per-seed hyperparameters (`LearnerHyperparams`' fields) its update reads:
        what a sweep (`sweep_hparams`) may vary for it.
      reads: the flags it reads, as "section.field", that not every learner does: another
        learner's (PQN's epsilon schedule is DQN's flags) and those of the shared learner section
        that some learners alone read (PPO's `learner.clip_value_loss`); `unread_flags` tells a
        run given a flag that its learner does not read.
    """

    name: str
    section: type | None = None
    actions: tuple[str, ...] = ("Discrete", "MultiDiscrete", "Box")
    replay: bool = False
    own_networks: str = ""
    whole_sequences: bool = False
    resume_fixed: tuple[str, ...] = ()
    hparams_read: tuple[str, ...] = ("learning_rate",)
    reads: tuple[str, ...] = ()


# What a resumed run must keep: these fields shape the checkpointed state or give it its meaning (and
# each learner's `LearnerSpec.resume_fixed`).
RESUME_FIXED_FIELDS = ("env", "env_kwargs", "algo", "num_envs", "num_steps", "num_seeds", "seed", "normalize_obs",
                       "action_noise_correlation",
                       "network.hidden_sizes", "network.policy_hidden_sizes", "network.value_hidden_sizes",
                       "network.policy_obs_key", "network.value_obs_key", "network.action_dist", "network.activation",
                       "network.torso", "network.core", "network.core_size", "replay.replay_capacity")


def _lookup(data: dict, dotted: str):
    for part in dotted.split("."):
        data = data[part]
    return tuple(data) if isinstance(data, list) else data


@dataclasses.dataclass(frozen=True)
class TrainConfigBase:
    """A training run's settings that every learner shares: environment, budget, seeds, mode, the
    network, the learner's and the replay's hyperparameters. `TrainConfig` (made from it by
    `train_config_class`, with each registered learner's own section) is the one to use."""

    learners: ClassVar[dict[str, LearnerSpec]] = {}  # the registry's learners, by name (`TrainConfig`'s)

    env: str = "CartPole-v1"
    """Environment id: any gymnax or Probe-* id (`jaxrl-async envs` lists them), a JAX suite's SUITE:ID (`jaxrl-async envs --suite NAME` lists a suite's), or a host env: gymnasium:<id> for any registered gymnasium 1.x id, envpool:<id> for an EnvPool id (pip install -e '.[envpool]') (trained in the async mode, one seed; host env states are not checkpointed, so a resumed run restarts its episodes)."""
    env_kwargs: tuple[str, ...] = ()
    """Keyword arguments of the env's constructor, as KEY=VALUE (VALUE read as JSON where it is, else a string): e.g. --env brax:ant --env-kwargs backend=positional episode_length=500 (the suites' adapters list theirs: docs/suites.md)."""
    preset: str = "none"
    """Preset the settings start from: 'auto' (the CLI's default: the env's own preset for the learner --algo names, where it has one), 'none' (the plain defaults), or a preset's name; flags given beside it override its values; `jaxrl-async envs` lists the presets (jaxrl_async/trainer/presets.py). Recorded in config.json by the name 'auto' resolved to. From Python this field only records the preset: jaxrl_async.trainer.presets.config_for(env, preset) applies one."""
    algo: str = "ppo"
    """Learning algorithm (docs/learners.md compares them); all share the rollout and the learner hyperparameters below; those that learn from a replay buffer also take the replay flags (--replay-capacity ...), and a learner with flags of its own has its group of them below."""
    total_timesteps: int = 500_000
    """Environment steps per seed, rounded down to whole rollouts of num_envs*num_steps (summary.json's env_steps: what ran)."""
    num_envs: int = 4
    """Parallel environments per seed."""
    num_steps: int = 128
    """Rollout length: steps per environment per iteration."""
    seed: int = 0
    """Base seed, in [0, 2**32); seed index i uses fold_in(PRNGKey(seed), i), independent of num_seeds."""
    num_seeds: int = 1
    """Independent seeds trained side by side (vmapped in one jit)."""
    mode: Literal["fused", "async"] = "fused"
    """'fused': K iterations per jit call; 'async': a rollout thread overlaps acting with learning (a replay learner: the actor hands each fragment to the learner, which adds it to the replay buffer and takes replay_ratio gradient steps)."""
    lag: Literal["0", "1", "latest"] = "1"
    """Async mode: params the actor uses for rollout k: '0' version k (lock step, identical to fused), '1' version k-1 (overlapped, deterministic), 'latest' (free-running)."""
    buffer_size: int = 1
    """Async mode: rollouts the actor may hold ready for the learner (1 = double buffering)."""
    sync_interval: int = 1
    """Async mode: updates between the learner's publications of its params to the actor (1 = after every update); the lag policies round the version they wait for down to a published one, so with N > 1 the actor acts with params up to N - 1 (lag 0) or N (lag 1) updates old, and only N = 1 with lag 0 matches the fused mode."""
    actor_device: Literal["default", "cpu"] = "default"
    """Async mode: where the actor runs the policy: 'default' the learner's device; 'cpu' a host CPU device of its own (on a GPU machine the CPU acts while the GPU learns; on a CPU-only machine a core of its own)."""
    num_actors: int = 1
    """Async mode, host envs (gymnasium:<id>, envpool:<id>): actor threads, each stepping an equal share of num_envs (their fragments joined along the env axis)."""
    env_groups: int | Literal["auto"] = "auto"
    """Async mode, host envs: vector envs each actor's envs are split into, stepped in turn so that one group's envs step while the actor acts for another (double-buffered sampling); 'auto': 2 where the envs' steps are dear and off the actor's thread (EnvPool's MuJoCo and Atari envs: docs/host_envs.md) and each actor's envs split evenly, else 1."""
    devices: int | Literal["all"] = "all"
    """Devices to spread seeds (or, with fewer seeds than devices, envs) over; the CLI makes each CPU core a device."""
    iterations_per_call: int | Literal["auto", "all"] = "auto"
    """Iterations per host sync (fused: per jit call; async: per log line); 'auto' (about 20, the first after one iteration) or 'all' (fused: one XLA program)."""
    normalize_obs: bool = False
    """Running observation normalisation (statistics live in the rollout state); the replay learners (dqn, sac, td3) store the env's own observations and normalise each sampled batch by the newest statistics."""
    action_noise_correlation: float = 0.0
    """Gaussian policies (Box actions): correlation of the exploration noise between consecutive steps, eps_t = c eps_t-1 + sqrt(1 - c^2) z_t per env, redrawn at each episode's start; 0 is white noise, 0.99 keeps a push going for ~100 steps (MountainCarContinuous-v0's preset). Each step's noise stays standard normal, so the learners' log-probabilities are unchanged (jaxrl_async/core/exploration.py)."""
    eval_episodes: int = 32
    """Complete episodes of the greedy policy per evaluation (per seed)."""
    eval_interval: int | Literal["auto"] = "auto"
    """Updates between evaluations (0: only the final one); 'auto': about 10 per run, at host syncs."""
    eval_stochastic: bool = False
    """Also evaluate the sampling (stochastic) policy at each evaluation."""
    checkpoint_interval: int | Literal["auto"] = "auto"
    """Updates between checkpoints of the whole training state (0: only the final one); 'auto': at each evaluation."""
    keep_checkpoints: int = 3
    """Numbered checkpoints kept (the newest); checkpoints/best.ckpt is kept apart."""
    tensorboard: bool = False
    """Also write TensorBoard event files to the run directory (needs tensorboardX)."""
    video_interval: int = 0
    """Record a video every Nth evaluation (and at the final one): the greedy evaluation episode of the first seed, drawn by the env's own renderer into videos/update-<the update, six digits>.mp4 in the run directory (and TensorBoard or the tracker when on); 0: no videos. pip install 'jaxrl_async[video]'; docs/runs.md, "Videos"."""
    video_max_frames: int = 1000
    """The most frames (env steps) a video holds: a longer episode's video stops there."""
    tracker: Literal["none", "wandb", "mlflow"] = "none"
    """Also log the run (config, metrics against env steps, videos, summary, best checkpoint) to an experiment tracker: 'wandb' (Weights & Biases, files in RUN_DIR/wandb; offline unless you are logged in; WANDB_MODE wins) or 'mlflow' (MLFLOW_TRACKING_URI, else a local store beside the run directory: <parent>/mlruns); a resumed run continues the same tracker run. pip install 'jaxrl_async[wandb]' or '[mlflow]'; docs/runs.md, "Trackers"."""
    run_dir: str | None = None
    """Run directory; default runs/<env>-<algo>-<timestamp> (a ':' or '/' of the env id written '-')."""
    # Speed settings: how the programs are laid out, not what they compute (results agree to float
    # rounding). 'auto' takes the backend's measured default (`speed.BACKEND_DEFAULTS`).
    scan_unroll: int | Literal["auto"] = "auto"
    """Unroll factor of the rollout's scan over time; 'auto': by backend (speed only)."""
    gae_scan: Literal["auto", "sequential", "matrix"] = "auto"
    """The reverse recursions (GAE; REINFORCE's, PQN's and IMPALA's returns) as a sequential scan or one [T, T] matrix product per env; 'auto': by backend."""
    update_unroll: int | Literal["auto"] = "auto"
    """Unroll factor of the learner's loop over minibatches; 'auto': by backend (speed only)."""
    eval_unroll: int | Literal["auto"] = "auto"
    """Env steps per trip of the evaluation loop; 'auto': by backend (speed only)."""
    matmul_precision: Literal["default", "float32", "tensorfloat32", "bfloat16"] = "default"
    """Precision of the network's matmuls; 'default': JAX's setting (TF32 on recent NVIDIA GPUs, faster with the same learning: docs/benchmarks.md; float32 on the CPU); 'float32' computes alike on every backend."""
    network: NetworkConfig = NetworkConfig()
    learner: LearnerConfig = LearnerConfig()
    replay: ReplayConfig = ReplayConfig()

    def __post_init__(self):
        require(self.algo in self.learners, "algo", self.algo,
                f"choose one of {', '.join(self.learners)}" if self.learners else
                "TrainConfigBase knows no learner: use jaxrl_async.TrainConfig, which has the registry's")
        require(isinstance(self.env, str) and bool(self.env), "env", self.env,
                "must be an env id (a string); an env of your own trains by its id once registered: "
                "jaxrl_async.register_env('MyEnv-v0', factory), then env='MyEnv-v0'")
        # 'auto' is resolved by the CLI and `presets.config_for`, before a config exists: a config
        # holding it would train with whatever its other fields say, not with the preset
        require(self.preset != "auto", "preset", self.preset,
                "'auto' is resolved where a config is made: from Python, "
                "jaxrl_async.trainer.presets.config_for(env) applies the env's preset")
        require_field_types(self)
        require(self.run_dir != "", "run_dir", self.run_dir,
                "give a directory, or leave it unset for runs/<env>-<algo>-<time>")
        require(self.mode in ("fused", "async"), "mode", self.mode, "choose fused or async")
        require(self.total_timesteps >= 1, "total_timesteps", self.total_timesteps, "must be >= 1")
        require(self.num_envs >= 1, "num_envs", self.num_envs, "must be >= 1")
        require(self.num_steps >= 1, "num_steps", self.num_steps, "must be >= 1")
        require(self.num_seeds >= 1, "num_seeds", self.num_seeds, "must be >= 1")
        # PRNGKey keeps a seed's low 32 bits (without jax_enable_x64): a larger or negative one
        # would train as another, smaller seed does, or overflow
        require(0 <= self.seed < 2**32, "seed", self.seed, "must be in [0, 2**32) (JAX's PRNGKey keeps 32 bits)")
        require(self.iterations_per_call in ("auto", "all")
                or (isinstance(self.iterations_per_call, int) and self.iterations_per_call >= 1),
                "iterations_per_call", self.iterations_per_call, "use a positive count, 'auto' or 'all'")
        require(self.devices == "all" or (isinstance(self.devices, int) and self.devices >= 1), "devices",
                self.devices, "use a count >= 1 or 'all'")
        require(self.lag in ("0", "1", "latest"), "lag", self.lag, "choose 0, 1 or latest")
        require(self.buffer_size >= 1, "buffer_size", self.buffer_size, "must be >= 1")
        require(isinstance(self.sync_interval, int) and self.sync_interval >= 1, "sync_interval", self.sync_interval,
                "must be a count of updates >= 1 (1: publish the params after every update)")
        require(self.actor_device in ("default", "cpu"), "actor_device", self.actor_device, "choose default or cpu")
        require(self.num_actors >= 1, "num_actors", self.num_actors, "must be >= 1")
        require(self.num_envs % self.num_actors == 0, "num_actors", self.num_actors,
                f"must divide num_envs={self.num_envs}: each actor steps an equal share of the envs")
        if self.mode != "async":
            require(self.actor_device == "default", "actor_device", self.actor_device,
                    "the fused mode acts and learns in one program on one device: use --mode async")
            require(self.num_actors == 1, "num_actors", self.num_actors,
                    "the fused mode has no actor threads: use --mode async")
            require(self.sync_interval == 1, "sync_interval", self.sync_interval,
                    "the fused mode acts with the newest params, publishing nothing: use --mode async")
        require(self.eval_episodes >= 1, "eval_episodes", self.eval_episodes, "must be >= 1")
        for name in ("eval_interval", "checkpoint_interval"):
            value = getattr(self, name)
            require(value == "auto" or (isinstance(value, int) and value >= 0), name, value,
                    "use a count of updates >= 0 (0 = only at the end) or 'auto'")
        require(self.keep_checkpoints >= 1, "keep_checkpoints", self.keep_checkpoints, "must be >= 1")
        require(self.video_interval >= 0, "video_interval", self.video_interval,
                "must be a count of evaluations >= 0 (0: no videos; 1: a video at every evaluation)")
        require(self.video_max_frames >= 1, "video_max_frames", self.video_max_frames,
                "must be a count of frames >= 1 (the most env steps a video holds)")
        for name in ("scan_unroll", "update_unroll", "eval_unroll"):
            value = getattr(self, name)
            require(value == "auto" or (isinstance(value, int) and value >= 1), name, value,
                    "use an unroll factor >= 1 or 'auto'")
        require(self.gae_scan in ("auto", "sequential", "matrix"), "gae_scan", self.gae_scan,
                "choose auto, sequential or matrix")
        require(self.matmul_precision in MATMUL_PRECISIONS, "matmul_precision", self.matmul_precision,
                f"choose one of {', '.join(MATMUL_PRECISIONS)}")
        require(self.total_timesteps >= self.batch_size, "total_timesteps", self.total_timesteps,
                f"must be at least one rollout, num_envs*num_steps={self.batch_size}")
        # the programs count updates in int32 (JAX's integers without x64)
        require(self.num_updates < 2**31, "total_timesteps", self.total_timesteps,
                f"must be under 2**31 rollouts of num_envs*num_steps={self.batch_size} env steps (the update "
                "count is an int32)")
        require(0.0 <= self.action_noise_correlation < 1.0, "action_noise_correlation", self.action_noise_correlation,
                "must be in [0, 1): 0 is white noise, 0.99 correlates actions over ~100 steps")
        parse_env_kwargs(self.env_kwargs)
        if host_env_kind(self.env):
            self._check_host_env()
        else:
            require(self.num_actors == 1, "num_actors", self.num_actors,
                    "several actor threads step host envs (gymnasium:<id>, envpool:<id>); a gymnax env's rollout is one jitted "
                    "program: use --num-actors 1")
            require(self.env_groups in ("auto", 1), "env_groups", self.env_groups,
                    "env groups split a host env actor's envs (gymnasium:<id>, envpool:<id>); a gymnax env's rollout is one "
                    "jitted program: use --env-groups auto")
        self._check_network_options()
        if self.learner_spec.replay:
            self._check_replay()
            return
        # IMPALA's minibatches (and a recurrent policy's) are whole env sequences (`algorithms.sgd.replay_batch`)
        whole_sequences = self.learner_spec.whole_sequences or self.network.core != "none"
        check_minibatches(self.learner.num_minibatches, self.num_envs if whole_sequences else self.batch_size,
                          whole_sequences=whole_sequences)

    def _check_host_env(self) -> None:
        """A host env's rules (`envs/host/`): its envs are stepped by the async mode's actor thread."""
        require(self.mode == "async", "mode", self.mode,
                f"env={self.env!r} is a host env, stepped on the host by the async mode's actor thread, not inside "
                "one jitted program: use --mode async (the CLI picks it for a host env by itself)")
        require(self.num_seeds == 1, "num_seeds", self.num_seeds,
                "host envs train one seed per process: run one process per seed")
        # the actor hands its trajectories over on one device; the learner's one seed takes one
        require(self.devices in (1, "all"), "devices", self.devices,
                "host envs train their one seed on one device: use --devices 1 (or leave the default)")
        # (the actors' trajectories are joined along the env axis; their statistics would need merging)
        require(not (self.normalize_obs and self.num_actors > 1), "normalize_obs", self.normalize_obs,
                f"with num_actors={self.num_actors} each actor would keep statistics of its own share of the envs: "
                "use --num-actors 1 or --no-normalize-obs")
        require(self.env_groups == "auto" or (isinstance(self.env_groups, int) and self.env_groups >= 1), "env_groups",
                self.env_groups, "use a count of groups >= 1 or 'auto'")
        if self.env_groups != "auto" and self.env_groups > 1:
            per_actor = self.num_envs // self.num_actors
            require(per_actor % self.env_groups == 0, "env_groups", self.env_groups,
                    f"must divide each actor's {per_actor} envs (num_envs={self.num_envs} / num_actors={self.num_actors})")
            require(not self.normalize_obs, "normalize_obs", self.normalize_obs,
                    f"with env_groups={self.env_groups} the statistics would take in each group's observations apart, "
                    "not as the one batch they are: use --env-groups 1 or --no-normalize-obs")

    def _check_network_options(self) -> None:
        """The actor-critic's options, where the learner has that actor-critic (the value-based
        learners' Q-network and SAC's / TD3's actors are their own)."""
        network, own_networks = self.network, self.learner_spec.own_networks
        if own_networks:
            for name, default in (("policy_hidden_sizes", None), ("value_hidden_sizes", None),
                                  ("policy_obs_key", None), ("value_obs_key", None), ("action_dist", "gaussian")):
                require(getattr(network, name) == default, name, getattr(network, name),
                        f"algo={self.algo!r} builds {own_networks} from hidden_sizes: leave {name} at {default!r}")
        if network.action_dist == "tanh_gaussian":
            require(not host_env_kind(self.env), "action_dist", network.action_dist,
                    f"host envs ({self.env!r}) take the Gaussian clipped to their Box: use --action-dist gaussian")

    def _check_replay(self) -> None:
        """A replay learner's own rules (its minibatches are sampled from the buffer, so the
        on-policy minibatch rule does not apply)."""
        require(self.replay.replay_capacity >= self.batch_size, "replay_capacity", self.replay.replay_capacity,
                f"must hold at least one rollout, num_envs*num_steps={self.batch_size}")
        held = self.replay.replay_capacity // self.num_envs * self.num_envs  # whole rows of num_envs
        require(self.replay.learning_starts <= held, "learning_starts", self.replay.learning_starts,
                f"must be at most the {held} transitions the buffer holds (replay_capacity="
                f"{self.replay.replay_capacity} in rows of num_envs={self.num_envs}), or no gradient step is ever "
                "taken: lower --learning-starts or raise --replay-capacity")

    def replay_note(self) -> str | None:
        """The line that says a replay learner's run ends before its first gradient step (its
        learning_starts past the run's env steps), None where it learns or has no replay."""
        if not self.learner_spec.replay:
            return None
        steps = self.env_steps
        if self.replay.learning_starts <= steps:
            return None
        return (f"note: learning_starts={self.replay.learning_starts} is more than the run's {steps} env steps per "
                "seed: it fills the replay buffer and takes no gradient step; lower --learning-starts or raise "
                "--total-timesteps")

    def unread_flags(self, given: dict) -> list[str]:
        """The flags among `given` (the fields set, nested by section as the CLI parses them) that
        this run's learner ignores, by what the registry says of the learners: another learner's
        own section's (but those it `reads`), the replay's for a learner without replay, the
        per-seed hyperparameters outside its `hparams_read` (`--clip-eps` for A2C, `--ent-coef` for
        DQN), and the flags that some learners declare they read (`reads`) where it does not
        (`--clip-value-loss` for A2C, `--update-epochs` for DQN). A flag no learner declares is
        every learner's (`--gae-lambda`, which DQN's rollout still computes GAE with, is told for none)."""
        spec = self.learner_spec
        declared = {entry for other in self.learners.values() for entry in other.reads}
        hparams = {f"learner.{field}" for other in self.learners.values() for field in other.hparams_read}

        def read(section: str, field: str) -> bool:
            dotted = f"{section}.{field}"
            if section == spec.name or dotted in spec.reads:
                return True
            if section in self.learners:  # another learner's own flags
                return False
            if section == "replay":
                return spec.replay
            if dotted in hparams:
                return field in spec.hparams_read
            return dotted not in declared

        # as given: a switch turned off is its --no- flag
        return [f"--{'no-' * (value is False)}{field.replace('_', '-')}" for section, fields in given.items()
                if isinstance(fields, dict) for field, value in fields.items() if not read(section, field)]

    def unread_note(self, given: dict) -> str | None:
        """The line that says the flags given that this run's learner ignores (`unread_flags`)."""
        flags = self.unread_flags(given)
        if not flags:
            return None
        return (f"note: --algo {self.algo} does not read {', '.join(flags)}, which other learners do: this run "
                f"ignores {'it' if len(flags) == 1 else 'them'}")

    @property
    def learner_spec(self) -> LearnerSpec:
        """The registry's line for `algo`."""
        return self.learners[self.algo]

    @property
    def batch_size(self) -> int:
        """Transitions per rollout, per seed."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.learner.num_minibatches

    @property
    def num_updates(self) -> int:
        """Iterations (rollout + update) per seed; the budget is rounded down to whole rollouts."""
        return self.total_timesteps // self.batch_size

    @property
    def env_steps(self) -> int:
        """Environment steps actually taken per seed."""
        return self.num_updates * self.batch_size

    def with_fields(self, **fields) -> "TrainConfigBase":
        """This config with each field replaced where it lives, at the top or in a section, named
        as its flag is (the flags are flat, so a name is unique): `cfg.with_fields(num_envs=8,
        learning_rate=1e-3, replay_capacity=50_000)`."""
        sections = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                    if dataclasses.is_dataclass(getattr(self, f.name))}
        top, nested = {}, {name: {} for name in sections}
        for name, value in fields.items():
            holder = next((section for section, config in sections.items()
                           if name in {f.name for f in dataclasses.fields(config)}), None)
            if holder is not None:
                nested[holder][name] = value
            elif name in {f.name for f in dataclasses.fields(self)} and name not in sections:
                top[name] = value
            else:
                raise ValueError(f"{name}={value!r}: no config field has that name (`jaxrl-async train --help` "
                                 "lists them, as flags with - for _)")
        return dataclasses.replace(self, **top, **{section: dataclasses.replace(sections[section], **changed)
                                                   for section, changed in nested.items() if changed})

    def state_shaping_difference(self, new: "TrainConfigBase") -> tuple[str, object, object] | None:
        """The first field that shapes the saved state (`RESUME_FIXED_FIELDS`, each learner's
        `resume_fixed`) where `new` differs, as (dotted name, this config's value, new's); None
        where a state saved under this config fits `new`."""
        old, changed = self.to_dict(), new.to_dict()
        own = tuple(f"{spec.name}.{name}" for spec in self.learners.values() for name in spec.resume_fixed)
        for field in RESUME_FIXED_FIELDS + own:
            before, after = _lookup(old, field), _lookup(changed, field)
            if before != after:
                return field, before, after
        return None

    def check_resumable_as(self, new: "TrainConfigBase") -> None:
        """Raise ValueError if a run saved with this config cannot continue under `new`.

        Fields that shape the saved state (env, seeds, network, ...) must stay; the budget,
        the schedule, the mode and the shape-free hyperparameters may change.
        """
        difference = self.state_shaping_difference(new)
        if difference is not None:
            field, before, after = difference
            raise ValueError(f"cannot resume with {field}={after!r}: the run was trained with "
                             f"{field}={before!r}, and its checkpoint only fits that; drop the flag "
                             "or start a new run")
        if self.learner_spec.replay and self.replay.checkpoint_replay and self.replay.prioritised != new.replay.prioritised:
            kind, fits = ("prioritised", "> 0") if self.replay.prioritised else ("uniform", "0")
            raise ValueError(f"cannot resume with replay.priority_exponent={new.replay.priority_exponent!r}: the run's "
                             f"checkpoints hold its {kind} replay buffer (--checkpoint-replay), which only fits a "
                             f"priority_exponent of {fits}; drop the flag or start a new run")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfigBase":
        data = dict(data)
        # values runs saved before they were refused: a Python run's unresolved 'auto' trained with
        # the plain defaults, and an empty run_dir meant the default one
        if data.get("preset") == "auto":
            data["preset"] = "none"
        if data.get("run_dir") == "":
            data["run_dir"] = None
        if "env_kwargs" in data:  # JSON turns tuples into lists
            data["env_kwargs"] = tuple(data["env_kwargs"])
        network = dict(data.pop("network", {}))
        for name in ("hidden_sizes", "policy_hidden_sizes", "value_hidden_sizes"):
            if network.get(name) is not None:  # JSON turns tuples into lists
                network[name] = tuple(network[name])
        network = NetworkConfig(**network)
        # runs saved before the rename of `ppo` to `learner` hold the same fields under "ppo"
        learner = LearnerConfig(**data.pop("learner", data.pop("ppo", {})))
        own = {spec.name: dict(data.pop(spec.name, {})) for spec in cls.learners.values() if spec.section}
        # runs saved before the replay flags had a section of their own hold them in a learner's (dqn's)
        replay = {name: section.pop(name) for section in own.values() for name in REPLAY_FIELDS if name in section}
        replay.update(data.pop("replay", {}))
        sections = {name: cls.learners[name].section(**fields) for name, fields in own.items()}
        return cls(**data, network=network, learner=learner, replay=ReplayConfig(**replay), **sections)


def train_config_class(learners, module: str) -> type:
    """The `TrainConfig` dataclass of these learners (`LearnerSpec`s, the registry's in `module`):
    `TrainConfigBase`'s fields, `algo` choosing among the learners, and each learner's own section
    as a field of its name (`cfg.td3.target_tau`), so that each is a group of flags."""
    learners = {spec.name: spec for spec in learners}
    default_algo = TrainConfigBase.__dataclass_fields__["algo"].default
    fields = [("algo", Literal[tuple(learners)], dataclasses.field(default=default_algo))]
    fields += [(spec.name, spec.section, dataclasses.field(default=spec.section()))
               for spec in learners.values() if spec.section is not None]
    cls = dataclasses.make_dataclass("TrainConfig", fields, bases=(TrainConfigBase,), frozen=True,
                                     namespace={"learners": learners})
    cls.__module__ = module
    cls.__doc__ = "A training run: environment, budget, seeds, mode, and the algorithm's settings."
    return cls
