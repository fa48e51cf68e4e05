"""The console's progress line: its ETA follows training, not the compile before it."""

from __future__ import annotations

import io
import re

import pytest

from jaxrl_async.trainer import sinks


@pytest.fixture
def clock(monkeypatch):
    """The sink's clock, set by hand: `clock[0] = seconds`."""
    now = [0.0]
    monkeypatch.setattr(sinks.time, "perf_counter", lambda: now[0])
    return now


def _etas(stream: io.StringIO) -> list[int]:
    """Every printed line's ETA, in seconds."""
    return [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in re.findall(r"eta (\d+):(\d\d):(\d\d)", stream.getvalue())]


def test_the_first_lines_eta_is_its_windows_training_rate_not_the_compile(clock):
    stream = io.StringIO()
    sink = sinks.ConsoleSink(total_env_steps=1_000_000, stream=stream, min_interval_s=0.0)
    clock[0] = 130.0  # the sink opened before a 130 s compile; the first window then trained 10k steps
    # 4 seeds at 40k env steps/s together: 10k steps a second for one seed's `env_steps`
    sink.write({"env_steps": 10_000, "num_seeds": 4, "steps_per_second": 40_000.0})
    # later windows: the wall clock since the first line, evaluations included (here 20k steps in 4 s)
    clock[0] = 134.0
    sink.write({"env_steps": 30_000, "num_seeds": 4, "steps_per_second": 40_000.0})
    clock[0] = 200.0
    sink.write({"env_steps": 1_000_000, "num_seeds": 4, "steps_per_second": 40_000.0})
    # 990k steps at 10k/s; 970k at 5k/s; done. Counting from the sink's opening, the first would be
    # 990k / (10k / 130 s) = 3.6 hours.
    assert _etas(stream) == [99, 194, 0]


def test_a_first_line_without_a_rate_shows_no_eta(clock):
    stream = io.StringIO()
    sink = sinks.ConsoleSink(total_env_steps=100, stream=stream, min_interval_s=0.0)
    sink.write({"env_steps": 50})
    assert _etas(stream) == [0]
