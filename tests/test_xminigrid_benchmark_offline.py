"""An XLand-MiniGrid named benchmark that is not on disk: the error names the file it wanted and the
variable that points xminigrid to its data, and nothing is downloaded (xminigrid's own loader would)."""

from __future__ import annotations

import pytest

xminigrid_benchmarks = pytest.importorskip("xminigrid.benchmarks",
                                           reason="needs xminigrid: pip install -e '.[xminigrid]'")


def test_a_named_benchmark_not_on_disk_names_the_file_and_is_never_downloaded(monkeypatch, tmp_path):
    from jaxrl_async.envs import make_env

    def download(repo_id, filename):
        raise AssertionError(f"downloaded {filename} from {repo_id}")

    monkeypatch.setattr(xminigrid_benchmarks, "DATA_PATH", str(tmp_path))
    monkeypatch.setattr(xminigrid_benchmarks, "_download_from_hf", download)
    with pytest.raises(ValueError) as excinfo:
        make_env("xminigrid:XLand-MiniGrid-R1-9x9", benchmark="trivial-21k", ruleset=0)
    message = str(excinfo.value)
    assert str(tmp_path / "trivial_21k") in message and "$XLAND_MINIGRID_DATA" in message, message
    assert "downloads nothing" in message and "benchmark=PATH" in message, message
    assert "huggingface.co/datasets/" in message, message  # where to fetch it by hand
