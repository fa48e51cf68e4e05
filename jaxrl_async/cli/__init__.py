"""The `jaxrl-async` command: train, eval, launch, bench, envs."""

from jaxrl_async.cli.main import entry_point, main

__all__ = ["entry_point", "main"]
