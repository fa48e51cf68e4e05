"""Tests for jaxrl_async.cli.main: exit codes and one-line errors that name the problem."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_async.cli.main import main


def _error_line(capsys):
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("jaxrl-async train: error:")
    return lines[0]


@pytest.mark.parametrize("flags, must_mention", [
    (["--num-envs", "abc"], ["--num-envs", "abc"]),
    (["--learning-rate", "-1"], ["learning_rate", "-1"]),
    (["--num-minibatches", "3"], ["num_minibatches=3", "512"]),
    (["--env", "CartPole-v2"], ["CartPole-v2", "CartPole-v1"]),
    (["--env", "MNISTBandit-bsuite"], ["MNISTBandit-bsuite", "offline"]),
    (["--action-dist", "tanh_gaussian"], ["action_dist='tanh_gaussian'", "Discrete(2", "--action-dist gaussian"]),
    (["--env", "gymnasium:CartPole-v1", "--preset", "none", "--env-kwargs", "foo=1"],
     ["'gymnasium:CartPole-v1' does not take env_kwargs {'foo': 1}", "--env-kwargs"]),
], ids=["not-an-int", "negative-lr", "minibatches-not-dividing", "env-typo", "refused-env", "squash-a-discrete-action",
        "host-env-kwargs"])
def test_bad_input_exits_2_with_one_line(flags, must_mention, capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", *flags, "--run-dir", str(run_dir)]) == 2
    line = _error_line(capsys)
    for text in must_mention:
        assert text in line, line
    assert "Traceback" not in line
    assert not run_dir.exists()  # nothing written for a run that never started


def test_a_run_dir_in_the_way_of_a_file_is_a_clear_error(capsys, tmp_path):
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    for run_dir in (in_the_way, in_the_way / "run"):
        assert main(["train", "--total-timesteps", "512", "--run-dir", str(run_dir)]) == 2
        line = _error_line(capsys)
        assert f"cannot make the run directory {str(run_dir)!r}" in line and "choose another --run-dir" in line, line


def test_resume_refuses_another_run_dir(capsys, tmp_path):
    """A resumed run goes on in its own directory: a --run-dir beside it would be ignored."""
    assert main(["train", "--resume", str(tmp_path / "run"), "--run-dir", str(tmp_path / "other")]) == 2
    line = _error_line(capsys)
    assert "cannot be given with --resume" in line and f"cp -r {tmp_path / 'run'}" in line, line
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("flags, message", [
    (["--num-env", "4"], "Unrecognized options: --num-env, 4; did you mean --num-envs?"),
    (["--total-timestep", "1000"], "Unrecognized options: --total-timestep, 1000; did you mean --total-timesteps?"),
    (["--no-anneal-l"], "did you mean --no-anneal-lr?"),
    (["--eval-stochastic", "x"], "Unrecognized options: x"),
    (["--algo", "foo"], "invalid choice 'foo' for argument '--algo'"),
    (["--env"], "Missing value for argument"),
    (["--hidden-sizes"], "Error parsing config.network: hidden_sizes=() is invalid"),
], ids=["unknown-flag", "typo", "bool-typo", "stray-value", "bad-choice", "no-value", "refused-by-the-config"])
def test_flag_errors_name_the_flag(flags, message, capsys):
    assert main(["train", *flags]) == 2
    assert message in _error_line(capsys)


def test_a_value_the_config_refuses_shows_its_traceback_with_debug(capsys):
    assert main(["train", "--num-envs", "0"]) == 2
    line = _error_line(capsys)
    assert "Error parsing config: num_envs=0 is invalid" in line and "(--debug shows the traceback)" in line, line
    assert main(["train", "--num-envs", "0", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "__post_init__" in err, err  # the config's own check, where it raised
    assert err.strip().splitlines()[-1] == "jaxrl-async train: error: Error parsing config: num_envs=0 is invalid: " \
        "must be >= 1", err


def test_a_flag_far_from_every_flag_gets_no_guess(capsys):
    assert main(["train", "--xyzzy"]) == 2
    line = _error_line(capsys)
    assert "Unrecognized options: --xyzzy" in line and "did you mean" not in line


def test_eval_flag_typo_gets_a_suggestion(capsys):
    assert main(["eval", "some-run", "--episode", "3"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == "jaxrl-async eval: error: Unrecognized options: --episode, 3; did you mean --episodes?", line


def test_eval_of_no_episode_names_the_flag(capsys):
    assert main(["eval", "some-run", "--episodes", "0"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == "jaxrl-async eval: error: --episodes 0 is invalid: evaluate at least 1 episode", line


@pytest.mark.parametrize("env, must_mention", [
    ("bax:ant", ["unknown env_id 'bax:ant'", "did you mean 'brax:ant'?", "brax, playground, craftax",
                 "`jaxrl-async envs --suite NAME`", "`jaxrl-async envs` lists"]),
    ("CartPole-v2", ["did you mean 'CartPole-v1'", "jaxrl-async envs --suite NAME"]),
    ("kinetix:Kinetix-v0", ["the kinetix suite is not supported"]),
], ids=["suite-typo", "id-typo", "refused-suite"])
def test_bad_env_names_the_suites_and_how_to_list_ids(env, must_mention, capsys, tmp_path):
    assert main(["train", "--env", env, "--run-dir", str(tmp_path / "run")]) == 2
    line = _error_line(capsys)
    for text in must_mention:
        assert text in line, line
    assert not (tmp_path / "run").exists()


def test_a_missing_suite_names_its_pip_line_before_jax_starts(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "brax" else find_spec(name, *a))
    assert main(["train", "--env", "brax:ant"]) == 2
    line = _error_line(capsys)
    assert "the brax suite is not installed" in line and "pip install 'jaxrl_async[brax]'" in line, line


def test_an_action_space_mismatch_names_every_learner_that_fits(capsys, tmp_path):
    # Pendulum's own preset is SAC: the Box-action learners are among the ones named
    assert main(["train", "--env", "Pendulum-v1", "--algo", "dqn", "--run-dir", str(tmp_path / "run")]) == 2
    line = _error_line(capsys)
    assert "needs a Discrete action space" in line, line
    for algo in ("ppo", "a2c", "reinforce", "impala", "sac", "td3"):
        assert algo in line.split("use --algo")[1], line


@pytest.mark.parametrize("space", ["box", "discrete"])
def test_each_learner_refusing_a_space_names_all_that_take_it(space):
    """Every learner's networks on a Box and a Discrete action space: the registry's `actions` say
    which take it, and the error of each that refuses it names every learner that takes it."""
    from gymnax.environments import spaces

    from jaxrl_async import TrainConfig, algorithms

    action_space = spaces.Box(-1.0, 1.0, (2,)) if space == "box" else spaces.Discrete(3)
    fits = []
    for algo in algorithms.LEARNERS:
        try:
            algorithms.learner(algo).networks(TrainConfig(algo=algo), (4,), action_space)
            fits.append(algo)
        except ValueError:
            pass
    assert fits == list(algorithms.learners_for(action_space)) and 0 < len(fits) < len(algorithms.LEARNERS)
    for algo in set(algorithms.LEARNERS) - set(fits):
        with pytest.raises(ValueError) as error:
            algorithms.check_action_space(algo, action_space)
        assert str(error.value).endswith(f"use --algo {' or '.join(fits)}"), str(error.value)


def test_bad_flags_and_env_ids_fail_fast():
    """A typo fails before JAX or a suite is imported (`NO_JAX_COMMANDS` checks the modules); here,
    loosely, the wall time of the command as a user runs it."""
    import time

    for argv in (["--total-timestep", "1000"], ["--env", "bax:ant"]):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "jaxrl_async.cli", "train", *argv], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2 and "error:" in done.stderr, done.stderr
        assert time.perf_counter() - start < 10, argv


def _flag_lines(out: str) -> list[int]:
    """The indices of a help text's flag lines: `  --name ...` with the help below, indented further
    (tyro's one-column layout, the one it takes for this many flags: a group's description that wraps
    to a `--flag` is no flag)."""
    lines = out.splitlines()
    return [i for i, line in enumerate(lines[:-1]) if line.startswith("  -") and lines[i + 1].startswith("      ")]


def _help_blocks(out: str) -> dict[str, str]:
    """Each flag of a help text (its first name, `-h` aside) to its whole entry, lines joined."""
    blocks: dict[str, str] = {}
    name = None
    starts = set(_flag_lines(out))
    for i, line in enumerate(out.splitlines()):
        if i in starts and line.startswith("  --"):
            name = line.split()[0].rstrip(",")
            blocks[name] = ""
        elif not line.startswith("    "):
            name = None  # a group's title or description
        if name is not None:
            blocks[name] += " " + line.strip()
    return {name: " ".join(text.split()) for name, text in blocks.items()}


@pytest.fixture(autouse=True)
def _columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # the help's layout, whatever the terminal


def _train_help(capsys, *flags) -> str:
    assert main(["train", *flags, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: jaxrl-async train")
    return out


def test_train_help_shows_the_defaults_the_flags_given_pick(capsys):
    # the preset of the env given, wherever --help stands; the other flags given do not change it
    for argv in (["--env", "Breakout-MinAtar", "--help"], ["-h", "--num-envs", "8", "--env=Breakout-MinAtar"]):
        assert main(["train", *argv]) == 0
        blocks = _help_blocks(capsys.readouterr().out)
        assert blocks["--num-envs"].endswith("(default: 256)"), blocks["--num-envs"]
        assert blocks["--preset"].endswith("(default: auto)"), blocks["--preset"]
    blocks = _help_blocks(_train_help(capsys, "--env", "Pendulum-v1"))
    assert blocks["--algo"].endswith("(default: sac)"), blocks["--algo"]  # Pendulum's preset's learner
    blocks = _help_blocks(_train_help(capsys, "--env", "Breakout-MinAtar", "--preset", "none"))
    assert blocks["--preset"].endswith("(default: none)") and blocks["--num-envs"].endswith("(default: 4)")


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_every_default_the_train_help_shows_is_the_value_the_run_takes(env, capsys):
    from jaxrl_async.cli.main import parse_train

    blocks = _help_blocks(_train_help(capsys, "--env", env))
    command = parse_train(["--env", env])
    values = {"resume": command.resume, **{name: value for name, value in vars(command).items()}}
    sections = [command.config, *(value for value in vars(command.config).values() if hasattr(value, "__dataclass_fields__"))]
    for section in sections:
        values.update(vars(section))
    values["preset"] = "auto"  # what --preset is when not given (config.json records what it chose)
    checked = 0
    for name, value in values.items():
        if hasattr(value, "__dataclass_fields__"):
            continue
        shown = " ".join(map(str, value)) if isinstance(value, tuple) else str(value)
        block = blocks[f"--{name.replace('_', '-')}"]
        assert block.endswith(f"(default: {shown})"), (name, value, block)
        checked += 1
    assert checked == len(blocks)


def test_train_help_lists_every_flag_the_parser_takes_the_first_needed_first(capsys):
    from jaxrl_async.cli.flags import flag_names, parse
    from jaxrl_async.cli.main import TRAIN, TrainCommand

    out = _train_help(capsys)
    with pytest.raises(SystemExit):
        parse(TrainCommand, ["--help"], TRAIN)  # tyro's own help of the parser, ungrouped

    def flags(text):
        lines = text.splitlines()
        return {name.rstrip(",") for i in _flag_lines(text) for name in lines[i].split()
                if name.startswith("-") and name.rstrip(",").lstrip("-")[:1].isalpha()}

    assert flags(out) == flags(capsys.readouterr().out) == {"-h", "--help", *flag_names(TrainCommand)}
    # the flags a first run needs, before any group's title: on the first screen
    first_group = next(i for i, line in enumerate(out.splitlines()) if line.strip().endswith("options")
                       and i > 0 and not line.strip().startswith("options"))
    first = "\n".join(out.splitlines()[:first_group])
    for flag in ("--env", "--algo", "--total-timesteps", "--num-envs", "--num-steps", "--seed", "--num-seeds",
                 "--mode", "--preset", "--run-dir", "--learning-rate"):
        assert f"\n  {flag} " in first, flag
    assert first_group < 70, first_group


def test_unknown_command_exits_2(capsys):
    assert main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_envs_lists_gymnax_and_probe_ids(capsys):
    assert main(["envs"]) == 0
    ids = capsys.readouterr().out.split()
    assert "CartPole-v1" in ids and "Probe-Truncation" in ids
    assert "MNISTBandit-bsuite" not in ids


def test_envs_shows_each_preset_budget_and_expected_return(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line.strip()}
    assert rows["Pendulum-v1"][1:4] == ["sac", "50,000", "-146.4"]
    assert rows["CartPole-v1"][1:4] == ["ppo", "500,000", "500"]
    assert rows["Pendulum-v1:ppo"][1:4] == ["ppo", "1,000,000", "-179.4"]  # another learner's, after it
    assert rows["MountainCarContinuous-v0"][1:4] == ["sac", "50,000", "94.4"]  # a preset names its learner
    assert rows["Seaquest-MinAtar"][1:4] == ["ppo", "10,000,000", "32.9"]
    assert rows["Probe-Memory"][1:4] == ["ppo", "100,000", "1"]
    assert rows["Probe-ObsReward"][3:5] == ["not", "measured"]  # its return is a coin flip by design
    assert rows["Pong-misc"] == ["Pong-misc", "-"]  # no preset
    assert rows["CartPole-v1:dqn"][1:4] == ["dqn", "300,000", "500"]  # `--algo dqn` alone
    assert rows["CartPole-v1:pqn"][1:4] == ["pqn", "500,000", "500"]
    learners = next(line for line in out.splitlines() if line.startswith("learners' own presets"))
    assert "sac (50,000 steps)" in learners and "dqn (300,000 steps)" in learners and "pqn (500,000 steps)" in learners


HEAVY = {"jax", "jaxlib", "gymnax", "flax", "optax", "chex", "numpy"}
# the commands that ask nothing of JAX, each run as the `jaxrl-async` command runs it (cpu_runtime=True)
NO_JAX_COMMANDS = {"help": ["--help"], "envs": ["envs"], "train-help": ["train", "--help"],
                   "preset-help": ["train", "--env", "Breakout-MinAtar", "--help"],
                   "bad-preset": ["train", "--preset", "fast"], "bad-flag": ["train", "--num-envs", "abc"],
                   "flag-typo": ["train", "--total-timestep", "1000"], "bad-env": ["train", "--env", "bax:ant"],
                   "bad-suite-id": ["train", "--env", "kinetix:x"],
                   "eval-help": ["eval", "--help"]}


@pytest.fixture(scope="module")
def modules_imported():
    """The top-level modules a fresh interpreter has imported after `import jaxrl_async.cli.main`
    ("import"), then after each of NO_JAX_COMMANDS in turn, output silenced: one interpreter
    for them all (each costs a Python start). The sets only grow, so each command's is a
    superset of what that command alone imports: none may hold a heavy module."""
    probe = ("import contextlib, io, json, sys\n"
             "def modules():\n    return sorted({m.split('.')[0] for m in sys.modules})\n"
             "import jaxrl_async.cli.main\nfrom jaxrl_async.cli.main import main\n"
             "seen = {'import': modules()}\n"
             f"for name, argv in {NO_JAX_COMMANDS!r}.items():\n"
             "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
             "        main(argv, cpu_runtime=True)\n"
             "    seen[name] = modules()\n"
             "print(json.dumps(seen))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {name: set(found) for name, found in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def test_importing_the_cli_imports_no_jax(modules_imported):
    # the `jaxrl-async` command imports this module first: JAX's import alone takes about a second
    assert modules_imported["import"] & (HEAVY | {"tyro"}) == set()


@pytest.mark.parametrize("name", list(NO_JAX_COMMANDS))
def test_commands_that_ask_nothing_of_jax_do_not_import_it(name, modules_imported):
    assert modules_imported[name] & HEAVY == set()


def test_tiny_train_writes_the_run_directory(capsys, tmp_path):
    run_dir = tmp_path / "cli-run"
    code = main(["train", "--env", "Probe-ConstantReward", "--num-envs", "2", "--num-steps", "4",
                 "--total-timesteps", "16", "--num-minibatches", "2", "--update-epochs", "1",
                 "--hidden-sizes", "8", "--eval-episodes", "2", "--eval-stochastic", "--run-dir", str(run_dir)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert sorted(os.listdir(run_dir)) == ["checkpoints", "config.json", "metrics.jsonl", "summary.json"]
    with open(run_dir / "summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["env_id"] == "Probe-ConstantReward"
    assert summary["env_steps"] == 16
    # one step, reward +1, whatever the policy: greedy and sampling alike
    assert summary["final_eval_return"] == [1.0] and summary["final_eval_return_stochastic"] == [1.0]
    assert summary["final_eval_return_stochastic_mean"] == 1.0
    with open(run_dir / "config.json", encoding="utf-8") as f:
        config = json.load(f)
    assert config["network"]["hidden_sizes"] == [8] and config["learner"]["update_epochs"] == 1
    # the env's preset under the flags, recorded: its learning rate, since no flag set one
    assert config["preset"] == "Probe-ConstantReward" and config["learner"]["learning_rate"] == 1e-2
    assert "final greedy return 1.00" in captured.out and "stochastic 1.00" in captured.out

    # the same directory again is refused, with the way out in the message
    assert main(["train", "--env", "Probe-ConstantReward", "--num-envs", "2", "--num-steps", "4",
                 "--total-timesteps", "16", "--num-minibatches", "2", "--run-dir", str(run_dir)]) == 2
    assert "already holds a run" in _error_line(capsys)

    # a run directory named as they were before the names became portable, with a ':', still resumes
    old_name = tmp_path / "brax:inverted_pendulum-ppo-20260101-000000-000000"
    os.rename(run_dir, old_name)
    assert main(["train", "--resume", str(old_name), "--total-timesteps", "32"]) == 0, capsys.readouterr().err
    with open(old_name / "summary.json", encoding="utf-8") as f:
        assert json.load(f)["env_steps"] == 32


@pytest.mark.parametrize("env_id, name", [
    ("brax:inverted_pendulum", "brax-inverted_pendulum-ppo-"), ("gymnasium:ALE/Pong-v5", "gymnasium-ALE-Pong-v5-ppo-"),
    ("CartPole-v1", "CartPole-v1-ppo-"),
])
def test_default_run_directory_names_are_portable(env_id, name):
    from jaxrl_async.trainer.run_dir import default_run_dir

    parent, base = os.path.split(default_run_dir(env_id, "ppo"))
    assert parent == "runs" and base.startswith(name), base
    assert set(base) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"), base


TINY_RUN = ["--env", "Probe-ConstantReward", "--num-envs", "2", "--num-steps", "4", "--total-timesteps", "16",
            "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "8", "--eval-episodes", "2"]


def _train_in_a_new_process(run_dir, cache_home, *flags):
    """`jaxrl-async train` as a user starts it: a fresh process whose user cache is `cache_home`
    (the suite's own JAX_COMPILATION_CACHE_DIR removed from its environment)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(cache_home)
    done = subprocess.run([sys.executable, "-m", "jaxrl_async.cli", "train", *TINY_RUN, "--run-dir", str(run_dir),
                           *flags], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


def test_compilation_is_cached_in_the_user_cache_dir_and_paid_once(tmp_path):
    cache = tmp_path / "home-cache" / "jaxrl_async" / "xla"
    _train_in_a_new_process(tmp_path / "first", tmp_path / "home-cache")
    first = sorted(os.listdir(cache))
    assert first, "the first start should write its executables to the cache"
    # a second start of the same config loads every program: nothing new is compiled
    _train_in_a_new_process(tmp_path / "second", tmp_path / "home-cache")
    assert sorted(os.listdir(cache)) == first
    _train_in_a_new_process(tmp_path / "off", tmp_path / "other-cache", "--compilation-cache", "off")
    assert not (tmp_path / "other-cache" / "jaxrl_async").exists()


def _read_only_dir(tmp_path) -> str:
    """A directory that exists but takes no file: a chmod'ed one, or, for root (whom no mode
    stops), sysfs's; the test is skipped where neither is at hand."""
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    for candidate in (str(path), "/sys/kernel"):
        try:
            open(os.path.join(candidate, "probe"), "w").close()
        except OSError:
            return candidate
        os.remove(os.path.join(candidate, "probe"))
    pytest.skip("no read-only directory here (root, no sysfs)")


def test_an_existing_read_only_compilation_cache_dir_is_a_clear_error(tmp_path, capsys):
    # before: accepted, then a warning per program that could not be cached
    assert main(["train", *TINY_RUN, "--run-dir", str(tmp_path / "run"),
                 "--compilation-cache", _read_only_dir(tmp_path)]) == 2
    line = _error_line(capsys)
    assert "--compilation-cache" in line and "writable directory" in line
    assert not (tmp_path / "run").exists()


def test_an_unusable_compilation_cache_dir_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert main(["train", *TINY_RUN, "--run-dir", str(tmp_path / "run"),
                 "--compilation-cache", str(blocker / "cache")]) == 2
    line = _error_line(capsys)
    assert "--compilation-cache" in line and "writable directory" in line
    assert not (tmp_path / "run").exists()
