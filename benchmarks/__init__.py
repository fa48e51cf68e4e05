"""`python -m benchmarks`: the benchmark suite (implemented in `jaxrl_async.cli.bench`, so that the
installed `jaxrl-async bench` command runs the same code)."""
