"""An XLand-MiniGrid named benchmark that is not on disk, offline: the error names the file it wanted
and the variable that points xminigrid to its data, not the bare URLError of its download."""

from __future__ import annotations

import urllib.error

import pytest

xminigrid_benchmarks = pytest.importorskip("xminigrid.benchmarks",
                                           reason="needs xminigrid: pip install -e '.[xminigrid]'")


def test_a_named_benchmark_not_on_disk_names_the_file_and_the_variable(monkeypatch, tmp_path):
    from jaxrl_async.envs import make_env

    def offline(repo_id, filename):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(xminigrid_benchmarks, "DATA_PATH", str(tmp_path))
    monkeypatch.setattr(xminigrid_benchmarks, "_download_from_hf", offline)
    with pytest.raises(ValueError) as excinfo:
        make_env("xminigrid:XLand-MiniGrid-R1-9x9", benchmark="trivial-21k", ruleset=0)
    message = str(excinfo.value)
    assert str(tmp_path / "trivial_21k") in message and "$XLAND_MINIGRID_DATA" in message, message
    assert "Name or service not known" in message and "benchmark=PATH" in message, message
    assert "huggingface.co/datasets/" in message, message  # where to fetch it by hand
