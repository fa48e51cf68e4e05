"""A check the replay learners' flag tests share: bad input to `jaxrl-async train` is refused."""

from __future__ import annotations


def assert_train_refuses(argv: list[str], must_mention: list[str], capsys, run_dir) -> None:
    """`jaxrl-async train *argv --run-dir run_dir` exits 2 with one line on stderr that names each
    of `must_mention` (the field, its value, the fix), and creates no run directory."""
    from jaxrl_async.cli.main import main

    assert main(["train", *argv, "--run-dir", str(run_dir)]) == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1, line
    for text in must_mention:
        assert text in line, line
    assert not run_dir.exists()
