"""The `jaxrl-async` command: train, eval, envs, bench."""

from jaxrl_async.cli.main import entry_point, main

__all__ = ["entry_point", "main"]
