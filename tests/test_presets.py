"""Presets (jaxrl_async/trainer/presets.py) and the static env-id list they are shown with."""

import dataclasses
import json

import pytest

from jaxrl_async.trainer import presets
from jaxrl_async.cli.main import main, parse_train
from jaxrl_async import TrainConfig
from jaxrl_async.envs.ids import BUILTIN_ENV_IDS
from jaxrl_async.envs import builtin_env_ids, make_env
from jaxrl_async.envs.suites import split_suite_id, suite_env_ids


def test_the_static_env_ids_are_the_registrys():
    # `jaxrl-async envs` prints the static list without importing gymnax: it must not drift
    assert sorted(BUILTIN_ENV_IDS) == builtin_env_ids()
    assert len(set(BUILTIN_ENV_IDS)) == len(BUILTIN_ENV_IDS)


def test_every_classic_control_and_minatar_id_has_a_preset():
    families = [env_id for env_id in BUILTIN_ENV_IDS
                if env_id.endswith("-MinAtar") or env_id in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0",
                                                            "MountainCarContinuous-v0", "Pendulum-v1")]
    assert len(families) == 10
    assert [env_id for env_id in families if env_id not in presets.PRESETS] == []


@pytest.mark.parametrize("name", sorted(presets.PRESETS) + sorted(presets.ENV_LEARNER_PRESETS))
def test_each_preset_is_a_valid_config_for_its_env(name):
    preset = {**presets.PRESETS, **presets.ENV_LEARNER_PRESETS}[name]
    env = name if name in presets.PRESETS else name.rsplit(":", 1)[0]  # "<env>:<algo>": another learner's
    assert env in BUILTIN_ENV_IDS or split_suite_id(env) is not None  # a gymnax / probe id, or SUITE:ID
    cfg = presets.config_for(env, algo=preset.algo)  # TrainConfig validates itself: minibatches divide the batch, ...
    assert cfg.env == env and cfg.preset == name and cfg.algo == preset.algo and cfg.total_timesteps == preset.budget
    assert cfg.num_updates >= 1
    assert preset.source  # every setting and figure says where it comes from
    suite = split_suite_id(env)
    if suite is None:
        make_env(env)  # the id is one make_env accepts
    else:  # a suite's id is in its own registry (making the env, seconds each, is its suite's tests' job)
        assert env in suite_env_ids(suite[0].name), f"{env} is not in the {suite[0].name} suite's registry"


def test_an_env_without_a_preset_is_told_the_closest():
    note = presets.missing_preset_note("brax:reacher")
    assert note.startswith("note: brax:reacher has no preset for ppo: training with the plain defaults")
    # brax:hopper is the closer name, but its preset is SAC's: the closest for PPO is named
    assert note.endswith("the closest preset is brax:halfcheetah (--preset brax:halfcheetah applies it)")
    assert "closest preset is playground:CartpoleBalance" in presets.missing_preset_note("playground:CartpoleSwingup")
    assert presets.missing_preset_note("brax:ant") is None and presets.missing_preset_note("Pendulum-v1", "dqn") is None
    # a host env: the same task's gymnax preset for the same learner (Pendulum-v1's own is SAC's),
    # never a suite's sized for thousands of device envs
    assert presets.missing_preset_note("gymnasium:Pendulum-v1").endswith("closest preset is Pendulum-v1:ppo "
                                                                         "(--preset Pendulum-v1:ppo applies it)")
    for far, algo in (("gymnasium:HalfCheetah-v5", None), ("envpool:Pong-v5", None), ("Pong-misc", None),
                      ("CartPole-v1", "a2c")):  # CartPole-v1's own preset is PPO's
        assert "closest" not in presets.missing_preset_note(far, algo), far


@pytest.mark.parametrize("flags, says", [
    (["--env", "brax:reacher"], True), (["--env", "brax:reacher", "--preset", "none"], False),
    (["--env", "brax:ant"], False), (["--env", "CartPole-v1", "--algo", "dqn"], False),
])
def test_train_says_in_one_line_when_an_env_has_no_preset(flags, says):
    from jaxrl_async.cli.main import _given_train_flags, _missing_preset_note

    note = _missing_preset_note(_given_train_flags(flags)[0])
    assert (note == presets.missing_preset_note("brax:reacher")) if says else note is None


@pytest.mark.parametrize("flags, says", [
    (["--lag", "latest"], "--lag is"), (["--buffer-size", "2", "--lag", "0"], "--lag and --buffer-size are"),
    (["--mode", "async", "--lag", "latest"], None), ([], None),
    (["--env", "gymnasium:CartPole-v1", "--lag", "latest"], None),  # a host env: the async mode
])
def test_a_fused_run_given_the_async_modes_flags_says_it_ignores_them(flags, says):
    from jaxrl_async.cli.main import _async_only_note, _given_train_flags, _train_command_from

    given = _given_train_flags(["--env", "CartPole-v1", *flags])[0]
    note = _async_only_note(given, _train_command_from(given, wants_help=False).config)
    if says is None:
        assert note is None
    else:
        assert note.startswith(f"note: {says} for the async mode's actor; this run is --mode fused")


@pytest.mark.parametrize("flags, says", [
    (["--layer-norm", "--replay-capacity", "64"], "--algo ppo does not read --replay-capacity, --layer-norm, "),
    (["--algo", "dqn", "--clip-eps", "0.1", "--ent-coef", "0"], "--algo dqn does not read --clip-eps, --ent-coef, "),
    (["--algo", "a2c", "--clip-eps", "0.1", "--ent-coef", "0"], "--algo a2c does not read --clip-eps, "),
    (["--algo", "pqn", "--epsilon-end", "0.1", "--double-q"], "--algo pqn does not read --double-q, "),  # epsilon: read
    (["--algo", "a2c", "--clip-value-loss", "--update-epochs", "2"], "--algo a2c does not read --clip-value-loss, "),
    (["--algo", "dqn", "--update-epochs", "2"], "--algo dqn does not read --update-epochs, "),
    (["--algo", "impala", "--no-normalize-advantages"], "--algo impala does not read --no-normalize-advantages, "),
    (["--algo", "dqn", "--replay-capacity", "50000", "--double-q", "--learning-rate", "1e-3"], None),
])
def test_train_says_which_flags_given_its_learner_ignores(flags, says):
    from jaxrl_async.cli.main import _given_train_flags, _train_command_from

    given = _given_train_flags(["--env", "CartPole-v1", *flags])[0]
    note = _train_command_from(given, wants_help=False).config.unread_note(given["config"])
    assert note is None if says is None else note.startswith(f"note: {says}which other learners do: this run ignores")


@pytest.mark.parametrize("flags, backend, says", [
    (["--env", "brax:ant"], "cpu", True), (["--env", "brax:ant"], "gpu", False),
    (["--env", "brax:ant", "--num-envs", "128"], "cpu", False),
    (["--env", "playground:CheetahRun", "--total-timesteps", "1966080"], "cpu", False),
    (["--env", "CartPole-v1"], "cpu", False), (["--env", "playground:CartpoleBalance"], "cpu", False),
])
def test_train_on_a_cpu_says_when_a_preset_is_sized_for_an_accelerator(flags, backend, says):
    from jaxrl_async.cli.main import _cpu_note, _given_train_flags, _train_command_from

    given = _given_train_flags(flags)[0]
    note = _cpu_note(given, _train_command_from(given, wants_help=False).config, backend)
    if not says:
        assert note is None
        return
    assert note == ("note: brax:ant's preset is its suite's published setting, sized for an accelerator (4096 envs, "
                    "50,000,000 steps: hours on a CPU); sized for a CPU: --num-envs 128 --num-steps 80 "
                    "--total-timesteps 655360 (greedy 662 -> 2156 over 3 seeds, 14 min) (docs/suites.md)")


@pytest.mark.parametrize("name", sorted(name for name, preset in presets.PRESETS.items() if preset.cpu_run))
def test_a_cpu_sized_run_of_an_accelerator_preset_is_flags_train_takes(name):
    from jaxrl_async.cli.main import _cpu_note, _given_train_flags, _train_command_from

    flags = presets.PRESETS[name].cpu_run[0].split()
    given = _given_train_flags(["--env", name, *flags])[0]
    config = _train_command_from(given, wants_help=False).config
    assert config.preset == name and config.total_timesteps <= presets.PRESETS[name].budget / 10
    assert _cpu_note(given, config, "cpu") is None


def test_the_flagship_presets_take_the_published_settings():
    ant = presets.config_for("brax:ant")
    assert ant.env_kwargs == ("backend=positional",) and ant.num_envs * ant.num_steps == 2048 * 32 * 5
    assert ant.network.action_dist == "tanh_gaussian" and ant.network.policy_sizes == (32,) * 4
    assert ant.network.value_sizes == (256,) * 5 and ant.learner.reward_scale == 10.0
    cheetah = presets.config_for("playground:CheetahRun")
    assert cheetah.batch_size == 1024 * 32 * 30 and cheetah.learner.update_epochs == 16
    assert presets.config_for("playground:FingerSpin").learner.gamma == 0.95
    hopper = presets.config_for("brax:hopper")
    assert hopper.algo == "sac" and hopper.replay.replay_ratio == 64 and hopper.sac.target_entropy == -1.5
    assert hopper.normalize_obs  # Brax's SAC normalises, its buffer raw (docs/learners.md)


def test_a_preset_sets_exactly_its_settings():
    preset = presets.ENV_LEARNER_PRESETS["Pendulum-v1:ppo"]
    base = TrainConfig(env="Pendulum-v1", seed=7, eval_episodes=5)
    cfg = preset.apply(base)
    assert cfg.learner.learning_rate == 1e-3 and cfg.learner.gamma == 0.995 and cfg.num_envs == 100
    assert cfg.network.activation == "swish" and cfg.normalize_obs
    # what the preset does not mention stays the base's
    assert cfg.seed == 7 and cfg.eval_episodes == 5 and cfg.learner.clip_eps == base.learner.clip_eps
    assert cfg.network.hidden_sizes == base.network.hidden_sizes


def test_config_for_none_is_the_plain_defaults():
    assert presets.config_for("Breakout-MinAtar", "none") == TrainConfig(env="Breakout-MinAtar")
    assert presets.config_for("Pong-misc") == TrainConfig(env="Pong-misc")  # auto, and no preset exists


@pytest.mark.parametrize("env, preset, algo", [
    ("CartPole-v1", "auto", "a2c"),  # CartPole has no A2C preset: the plain defaults, for A2C
    ("Acrobot-v1", "auto", "impala"),
    ("CartPole-v1", "none", "reinforce"),
    ("Breakout-MinAtar", "Breakout-MinAtar", "a2c"),  # a PPO preset asked for by name, for A2C
])
def test_config_for_trains_the_learner_asked_for(env, preset, algo):
    cfg = presets.config_for(env, preset, algo=algo)
    assert cfg.algo == algo and cfg.env == env
    assert cfg == parse_train(["--env", env, "--preset", preset, "--algo", algo]).config  # as the CLI's


def test_an_unknown_preset_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"preset='Breakout' is unknown: choose 'auto' .*'none' .*Breakout-MinAtar"):
        presets.resolve("Breakout", "Breakout-MinAtar")


# -- the train command: the preset under the flags -------------------------------------------------------------

def test_env_alone_applies_its_preset():
    cfg = parse_train(["--env", "Breakout-MinAtar"]).config
    assert cfg == presets.config_for("Breakout-MinAtar")
    assert cfg.preset == "Breakout-MinAtar" and cfg.network.torso == "mlp" and cfg.num_envs != TrainConfig.num_envs


def test_flags_given_override_the_preset():
    cfg = parse_train(["--env=Breakout-MinAtar", "--num-envs", "16", "--learning-rate", "1e-3",
                       "--activation", "tanh"]).config
    expected = presets.config_for("Breakout-MinAtar")
    assert cfg.num_envs == 16 and cfg.learner.learning_rate == 1e-3 and cfg.network.activation == "tanh"
    # the rest is the preset's
    assert cfg.num_steps == expected.num_steps and cfg.learner.num_minibatches == expected.learner.num_minibatches
    assert cfg.total_timesteps == expected.total_timesteps and cfg.preset == "Breakout-MinAtar"


@pytest.mark.parametrize("flags, preset", [
    (["--preset", "none"], "none"),
    (["--preset", "auto"], "Breakout-MinAtar"),  # recorded as the preset it resolved to
    (["--preset=CartPole-v1"], "CartPole-v1"),
], ids=["none", "auto", "another-envs"])
def test_the_preset_flag(flags, preset):
    cfg = parse_train(["--env", "Breakout-MinAtar", *flags]).config
    base = TrainConfig(env="Breakout-MinAtar")
    assert cfg.env == "Breakout-MinAtar" and cfg.preset == preset
    if preset == "none":
        assert cfg == base
    else:
        assert cfg == presets.PRESETS[preset].apply(base)


def test_the_flags_are_parsed_once_as_tyro_parses_them():
    # the flags that pick the defaults are tyro's like any other: the last one given wins, in
    # either form, and the defaults come from that value
    assert parse_train(["--env", "CartPole-v1", "--env=Breakout-MinAtar"]).config == presets.config_for("Breakout-MinAtar")
    assert parse_train(["--env=Pendulum-v1", "--algo", "sac", "--algo=ppo"]).config.preset == "Pendulum-v1:ppo"
    cfg = parse_train(["--env", "Breakout-MinAtar", "--preset=CartPole-v1", "--preset", "none", "--num_envs", "8"]).config
    assert cfg == dataclasses.replace(TrainConfig(env="Breakout-MinAtar"), num_envs=8)
    # `--resume None` is tyro's None (`--resume {None}|STR`): a new run, from the env's preset
    command = parse_train(["--resume", "None", "--env", "Breakout-MinAtar"])
    assert command.resume is None and command.config == presets.config_for("Breakout-MinAtar")


def test_a_flag_given_with_the_plain_default_still_beats_the_preset():
    # Breakout-MinAtar's preset: 256 envs, learning rate 5e-3; Acrobot-v1's normalises observations
    plain, breakout = TrainConfig(), presets.config_for("Breakout-MinAtar")
    assert breakout.num_envs != plain.num_envs and breakout.learner.learning_rate != plain.learner.learning_rate
    cfg = parse_train(["--env", "Breakout-MinAtar", "--num-envs", str(plain.num_envs),
                       f"--learning-rate={plain.learner.learning_rate}"]).config
    assert cfg.num_envs == plain.num_envs and cfg.learner.learning_rate == plain.learner.learning_rate
    assert cfg.num_steps == breakout.num_steps and cfg.preset == "Breakout-MinAtar"  # the rest is the preset's
    assert presets.config_for("Acrobot-v1").normalize_obs and not plain.normalize_obs
    assert not parse_train(["--env", "Acrobot-v1", "--no-normalize-obs"]).config.normalize_obs


def test_an_env_without_a_preset_gets_the_defaults():
    assert parse_train(["--env", "Pong-misc"]).config == TrainConfig(env="Pong-misc")


def test_an_unknown_preset_exits_2_with_one_line(capsys):
    assert main(["train", "--env", "Breakout-MinAtar", "--preset", "fast"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("jaxrl-async train: error: preset='fast' is unknown")
    assert "'auto'" in lines[0] and "'none'" in lines[0] and "Breakout-MinAtar" in lines[0]


def test_a_learner_that_another_envs_preset_picked_is_named_as_the_presets(tmp_path, capsys):
    """--preset Pendulum-v1 on CartPole trains SAC, which the user never named: the error says where it came from."""
    assert main(["train", "--env", "CartPole-v1", "--preset", "Pendulum-v1", "--run-dir", str(tmp_path / "a")]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "use --algo ppo or a2c or reinforce or impala or dqn or pqn (preset 'Pendulum-v1' trains algo='sac': --algo "
        "picks another learner over it, --preset none the plain defaults)  (--debug shows the traceback)")
    assert main(["train", "--env", "CartPole-v1", "--algo", "sac", "--run-dir", str(tmp_path / "b")]) == 2
    assert "preset" not in capsys.readouterr().err  # SAC asked for: its own preset says nothing


def _saved_run(tmp_path, cfg: TrainConfig) -> str:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    return str(run_dir)


def test_resume_keeps_the_saved_config_and_applies_no_preset(tmp_path):
    saved = dataclasses.replace(presets.config_for("Breakout-MinAtar", "none"), num_envs=8, num_steps=16,
                                learner=dataclasses.replace(TrainConfig().learner, learning_rate=1e-3))
    run_dir = _saved_run(tmp_path, saved)
    cfg = parse_train(["--resume", run_dir, "--total-timesteps", "9000"]).config
    assert cfg == dataclasses.replace(saved, total_timesteps=9000, run_dir=run_dir)
    assert cfg.preset == "none" and cfg.num_envs == 8 and cfg.learner.learning_rate == 1e-3


def test_resume_takes_flags_over_the_saved_config_even_at_their_plain_default(tmp_path):
    saved = dataclasses.replace(presets.config_for("Breakout-MinAtar", "none"), num_envs=8, num_steps=16)
    run_dir = _saved_run(tmp_path, saved)
    cfg = parse_train([f"--resume={run_dir}", "--num-envs", str(TrainConfig.num_envs)]).config
    assert cfg == dataclasses.replace(saved, num_envs=TrainConfig.num_envs, run_dir=run_dir)


def test_resume_refuses_a_preset(tmp_path, capsys):
    run_dir = _saved_run(tmp_path, TrainConfig(env="Breakout-MinAtar"))
    assert main(["train", "--resume", run_dir, "--preset", "Breakout-MinAtar"]) == 2
    err = capsys.readouterr().err
    assert "--preset cannot be given with --resume" in err and len(err.strip().splitlines()) == 1


def test_a_config_saved_before_presets_loads_as_none():
    data = TrainConfig(env="Acrobot-v1").to_dict()
    del data["preset"]
    assert TrainConfig.from_dict(data).preset == "none"


def test_the_ppo_presets_apply_to_ppo_only():
    # `--algo a2c --env CartPole-v1` must not start from PPO's CartPole settings
    assert parse_train(["--env", "CartPole-v1", "--algo", "a2c"]).config.preset == "none"
    assert parse_train(["--env", "CartPole-v1", "--algo", "ppo"]).config.preset == "CartPole-v1"
    # asked for by name, a preset still applies
    assert parse_train(["--env", "CartPole-v1", "--algo", "a2c", "--preset", "CartPole-v1"]).config.preset == "CartPole-v1"


def test_an_env_preset_may_name_its_learner():
    # MountainCarContinuous-v0's preset is SAC's, with correlated exploration noise
    cfg = parse_train(["--env", "MountainCarContinuous-v0"]).config
    assert cfg.algo == "sac" and cfg.action_noise_correlation == 0.99
    assert cfg.preset == "MountainCarContinuous-v0" and cfg == presets.config_for("MountainCarContinuous-v0")
    assert parse_train(["--env", "MountainCarContinuous-v0", "--algo", "sac"]).config == cfg
    # another learner asked for gets its own start: PPO the plain defaults
    ppo = parse_train(["--env", "MountainCarContinuous-v0", "--algo", "ppo"]).config
    assert ppo == TrainConfig(env="MountainCarContinuous-v0")
    # and SAC on an env whose preset is PPO's starts from SAC's own preset
    assert parse_train(["--env", "Probe-ContinuousAction", "--algo", "sac"]).config.preset == "sac"


def test_an_env_may_keep_a_preset_per_learner():
    # Pendulum-v1's own preset is SAC's; PPO asked for gets rejax's tuned PPO config
    assert parse_train(["--env", "Pendulum-v1"]).config.algo == "sac"
    ppo = parse_train(["--env", "Pendulum-v1", "--algo", "ppo"]).config
    assert ppo.preset == "Pendulum-v1:ppo" and ppo.algo == "ppo" and ppo.num_envs == 100 and ppo.normalize_obs
    # and by name, on any env
    named = parse_train(["--env", "MountainCarContinuous-v0", "--preset", "Pendulum-v1:ppo"]).config
    assert named.algo == "ppo" and named.learner.gamma == 0.995


@pytest.mark.parametrize("algo", ["dqn", "pqn"])
def test_the_value_based_learners_start_from_their_own_presets(algo):
    # on CartPole-v1 the env's preset for the learner (measured there), elsewhere the learner's own
    cfg = parse_train(["--env", "CartPole-v1", "--algo", algo]).config
    assert cfg.preset == f"CartPole-v1:{algo}" and cfg.algo == algo
    assert cfg == presets.ENV_LEARNER_PRESETS[f"CartPole-v1:{algo}"].apply(TrainConfig())
    other = parse_train(["--env", "Acrobot-v1", "--algo", algo]).config
    assert other.preset == algo and other == presets.ALGO_PRESETS[algo].apply(TrainConfig(env="Acrobot-v1"))


def test_the_dqn_preset_is_the_tuned_config():
    # experiments/dqn_cartpole.py's config, which test_dqn.py's CartPole test trains from the preset
    from experiments.dqn_cartpole import CONFIG

    cfg = presets.config_for("CartPole-v1", algo="dqn")
    assert dataclasses.replace(cfg, preset="none") == CONFIG
