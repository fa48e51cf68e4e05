"""The config dataclasses' one validation rule: an invalid value raises `ValueError` naming the
field, the value and what is allowed (shared by `config.py` and `replay_config.py`)."""

from __future__ import annotations


def check(condition: bool, field: str, value, allowed: str) -> None:
    if not condition:
        raise ValueError(f"{field}={value!r} is invalid: {allowed}")
