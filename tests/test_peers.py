"""`benchmarks/peers.py`'s smoke run: our side of a peer comparison, a tiny budget, in a fresh
process as in a real comparison (the peers' own virtualenvs are not part of the test setup)."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

# `benchmarks` is a top-level folder, not part of the installed package
ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import peers  # noqa: E402


def test_quick_run_reports_our_side(tmp_path, capsys):
    out = tmp_path / "peers.json"
    assert peers.main(["--quick", "--cases", "ppo", "--out", str(out)]) == 0
    report = json.loads(out.read_text())["report"]["ppo"]
    (run,) = report["runs"]["ours"]
    assert run["env_steps"] == 1024 and run["compile_s"] > 0 and run["steps_per_second"] > 0
    # wall - compile holds the training loop and the final evaluation: a lower rate than the loop's
    assert 0 < run["e2e_steps_per_second"] < run["steps_per_second"]
    assert report["rows"]["ours"]["steps_per_second"] == run["steps_per_second"]
    assert f"{'ppo':<12} ours" in capsys.readouterr().out


def test_every_case_is_a_valid_config_of_ours():
    for name, case in peers.CASES.items():
        cfg = peers.ours_config(name, None, False, "unused")
        assert cfg.eval_interval == 0 and cfg.checkpoint_interval == 0 and cfg.total_timesteps == case.ours.total_timesteps
        assert case.rejax[0] == cfg.algo and (case.sb3 is None or case.sb3[0] == cfg.algo)


def test_paired_ratio_is_the_median_of_each_rounds_ratio():
    def run(sps):
        return {"steps_per_second": sps, "e2e_steps_per_second": sps / 2, "compile_s": 1.0, "final_return": 0.0}

    # rounds' ratios 1.0, 0.5, 100/110: their median differs from the ratio of the medians (100 / 100)
    runs = {"ours": [run(100.0), run(25.0), run(100.0)], "rejax": [run(100.0), run(50.0), run(110.0)]}
    rows = peers.summarize(runs)
    assert rows["ours"]["steps_per_second"] == 100.0 and "ours_ratio" not in rows["ours"]
    assert rows["rejax"]["ours_ratio"] == rows["rejax"]["ours_e2e_ratio"] == 1.0
    assert rows["rejax"]["ours_paired_ratio"] == pytest.approx(100.0 / 110.0)


def test_a_case_without_an_sb3_twin_refuses_sb3_before_running_anything():
    with pytest.raises(ValueError, match="'dqn-breakout' has no SB3 / sbx twin"):
        peers.compare(peers.PeersConfig(cases=("dqn-breakout",), sb3_python="/nonexistent/python"))


@pytest.mark.parametrize("env_id", ["Breakout-MinAtar", "Pendulum-v1"])  # a Discrete and a Box action space
def test_gymnax_step_times_any_env(env_id):
    from benchmarks import gymnax_step

    result = gymnax_step.main(env_id, 4, 3)
    assert result["env"] == env_id and result["steps_per_second"] > 0
