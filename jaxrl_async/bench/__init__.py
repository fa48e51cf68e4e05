"""The benchmark suite behind `python -m benchmarks` and `jaxrl-async bench`."""
