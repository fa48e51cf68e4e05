"""`python -m jaxrl_async.cli ...`, the same as `jaxrl-async ...`."""

from jaxrl_async.cli.main import entry_point

entry_point()
