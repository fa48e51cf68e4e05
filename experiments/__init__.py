"""Experiment scripts: `python -m experiments.ppo_cartpole` (see README.md)."""
