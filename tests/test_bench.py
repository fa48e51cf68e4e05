"""The benchmark suite's smoke run: every case in --quick mode, valid JSON, --compare."""

import json

import pytest

from jaxrl_async.cli.bench.cases import CASES
from jaxrl_async.cli.bench.suite import main, table


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    assert main(["--quick", "--repeats", "2", "--out", str(out)]) == 0
    return out, json.loads(out.read_text())


# The quick run's report, checked case by case (one run, in the module's fixture).

def test_quick_run_writes_the_machine_and_every_case(quick_report):
    _, report = quick_report
    meta = report["meta"]
    for field in ("python", "cpu", "cpu_count", "devices", "backend", "versions", "config", "date"):
        assert field in meta
    assert meta["versions"]["jax"] and meta["config"]["quick"] is True
    prefixes = {key.split("/")[0] for key in report["results"]}
    assert prefixes == {"env_step", "rollout", "advantages", "update", "gae_placement", "e2e", "devices",
                        "compile_cache", "ops_per_iteration", "eval_cost", "gradient_step_cost", "host_step_cost",
                        "host_sync_cost", "bootstrap_cost", "processes", "suites", "pqn_vs_ppo", "video_cost"}


def test_microbenchmarks_report_compile_time_and_rates(quick_report):
    results = quick_report[1]["results"]
    for key, row in results.items():
        if key.startswith(("env_step", "rollout", "advantages", "update")):
            assert row["compile_s"] > 0 and row["repeats"] >= 2
            unit = next(u for u in ("steps_per_second", "samples_per_second", "transitions_per_second") if u in row)
            assert 0 < row[unit]["min"] <= row[unit]["median"] <= row[unit]["max"]
    assert results["rollout/CartPole-v1/envs=16"]["ratio_to_raw_env"] > 0


def test_gae_placement(quick_report):
    gae = quick_report[1]["results"]["gae_placement/CartPole-v1/4x128"]
    assert gae["gae_ms"] > 0 and gae["collect_ms"] > 0  # timed apart, so not ordered (see test_host_step_cost)
    assert gae["gae_share_of_update"] == pytest.approx(gae["gae_ms"] / gae["update_ms"])


def test_end_to_end_and_devices(quick_report):
    results = quick_report[1]["results"]
    for lag in ("0", "1", "latest"):
        row = results[f"e2e/4x128/async-lag{lag}/seeds=1"]
        assert row["ratio_to_fused"] > 0 and row["overlap_efficiency"] > 0
    assert results["e2e/4x128/fused/seeds=2"]["steps_per_second"]["median"] > 0
    assert results["devices/4x128/seeds=2/all-devices"]["ratio_to_one_device"] > 0


def test_ops_per_iteration(quick_report):
    meta, results = quick_report[1]["meta"], quick_report[1]["results"]
    ops = {variant: results[f"ops_per_iteration/CartPole-v1/4x128/{variant}"]
           for variant in ("auto", "cpu-defaults", "gpu-defaults")}
    assert ops["auto"]["ops_per_iteration"] == ops[f"{meta['backend']}-defaults"]["ops_per_iteration"]
    # the GPU's layout (unrolled loops, GAE as one product) launches fewer ops on any backend
    assert 0 < ops["gpu-defaults"]["ops_per_iteration"] < ops["cpu-defaults"]["ops_per_iteration"]


def test_gradient_step_cost(quick_report):
    cost = quick_report[1]["results"]["gradient_step_cost/dqn/CartPole-v1/8x32"]
    assert set(cost["us_per_gradient_step"]) == {"8", "64"} and min(cost["us_per_gradient_step"].values()) > 0
    # the line through the two batch sizes, and the bound it gives at the config's batch of 64
    assert cost["fixed_us"] + 64 * cost["us_per_sample"] == pytest.approx(cost["us_per_gradient_step"]["64"])
    assert cost["gradient_steps_per_env_step"] == 128 / 256
    assert cost["config_steps_per_second"] == pytest.approx(1e6 / (0.5 * cost["us_per_gradient_step"]["64"]))
    assert cost["compute_bound_steps_per_second"] == pytest.approx(1e6 / (0.5 * 64 * cost["us_per_sample"]))


def test_host_step_cost(quick_report):
    host = quick_report[1]["results"]["host_step_cost/gymnasium:CartPole-v1/4x128"]
    # each part timed on its own: not ordered against each other, since under the suite's load one slow
    # median of two repeats put the envs alone at 61.6 us and the whole fragment's step at 56.9 us
    assert min(host[k] for k in ("fragment_us", "env_us", "act_us", "dispatch_floor_us")) > 0
    assert host["env_bound_steps_per_second"] == pytest.approx(4e6 / host["env_us"])
    assert host["actor_steps_per_second"] == pytest.approx(4e6 / host["fragment_us"])
    assert host["actor_to_env"] == pytest.approx(host["env_us"] / host["fragment_us"]) and host["env_groups"] == 1
    # likewise the env's step and the act call in turn (once 111 us for the env alone, 77 us for both)
    assert host["alternated_us"] > 0
    assert host["fragment_to_alternated"] == pytest.approx(host["fragment_us"] / host["alternated_us"])
    # EnvPool (in the dev extra) in two env groups
    grouped = quick_report[1]["results"]["host_step_cost/envpool:CartPole-v1/4x128/groups=2"]
    assert grouped["env_groups"] == 2 and grouped["fragment_us"] > 0 and grouped["env_us"] > 0


def test_host_sync_cost(quick_report):
    sync = quick_report[1]["results"]["host_sync_cost/CartPole-v1/4x128"]
    # quick: 40 updates, which 'auto' runs as a call of 1, one of 1, then 19 calls of 2
    assert (sync["updates"], sync["calls"]) == (40, 21) and sync["pairs"] == 2
    assert sync["extra_ms_per_call"] == pytest.approx(1e3 * (sync["auto_to_one_call"] - 1) * sync["one_call_s"] / 20)
    assert sync["iteration_ms"] == pytest.approx(1e3 * sync["one_call_s"] / 40) and 0 < sync["empty_call_ms"]


def test_bootstrap_cost(quick_report):
    bootstrap = quick_report[1]["results"]["bootstrap_cost/CartPole-v1/4x128"]
    # CartPole's 500-step limit: at most one truncation per env in 128 steps
    assert bootstrap["max_truncations"] == 1 and bootstrap["rounds"] == 2
    assert bootstrap["truncated_ms"] > 0 and bootstrap["every_step_ms"] > 0 and bootstrap["truncated_to_every_step"] > 0


def test_processes(quick_report):
    results = quick_report[1]["results"]
    two, one = (results[f"processes/4x128/seeds=8/{label}"] for label in ("two-processes", "one-process"))
    # 4 seeds per device either way: the same per-device program, the same params
    assert two["identical_params"] is True and two["ratio_to_one_process"] > 0
    assert two["launch_to_first_sync_s"] > 0 and one["launch_to_first_sync_s"] > 0
    # the table prints the ratio docs/distributed.md quotes
    assert f"ratio_to_one_process={two['ratio_to_one_process']:.2f}" in table({"two": two})


def test_only_names_every_case_in_its_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    assert [name for name in CASES if name not in help_text] == []


def test_compile_cache(quick_report):
    cache = quick_report[1]["results"]["compile_cache/CartPole-v1/fused"]
    assert cache["cold_compile_s"] > 0 and cache["warm_compile_s"] > 0
    for start in ("cold", "warm"):  # the split of each start's compile time
        loop = [cache[f"{start}_compile_{phase}_s"] for phase in ("trace", "lower", "xla")]
        assert min(loop) > 0 and max(loop) <= cache[f"{start}_compile_s"]
        assert 0 < cache[f"{start}_eval_compile_xla_s"] <= cache[f"{start}_eval_compile_s"]


def test_eval_cost(quick_report):
    cost = quick_report[1]["results"]["eval_cost/4x128/fused/defaults"]
    assert cost["eval_checkpoint_pct"]["median"] == pytest.approx(100 * cost["eval_checkpoint_s"] / cost["train_s"])
    assert 0 < cost["eval_s"] + cost["checkpoint_s"] <= cost["eval_checkpoint_s"]
    assert cost["evaluations"] == cost["checkpoints"] == 10  # 'auto' at 40 updates: every 4th, the last included


def test_video_cost(quick_report):
    results = quick_report[1]["results"]
    off, on = results["video_cost/4x128/fused/off"], results["video_cost/4x128/fused/every-eval"]
    assert off["video_s"] == 0 and on["video_s"] > 0 and on["video_draw_s"] > 0
    assert on["ratio_to_off"] == pytest.approx(on["steps_per_second"]["median"] / off["steps_per_second"]["median"])
    assert on["wall_ratio_to_off"] > 0


def test_pqn_vs_ppo(quick_report):
    results = quick_report[1]["results"]
    pqn, ppo = (results[f"pqn_vs_ppo/CartPole-v1/16x128/{algo}"] for algo in ("pqn", "ppo"))
    assert pqn["ratio_to_ppo"] == pytest.approx(pqn["steps_per_second"]["median"] / ppo["steps_per_second"]["median"])
    assert pqn["ratio_to_ppo"] > 0 and "ratio_to_ppo" not in ppo


def test_compare_prints_ratios(quick_report, tmp_path, capsys):
    old, _ = quick_report
    assert main(["--quick", "--only", "advantages", "--repeats", "2", "--out", str(tmp_path / "new.json"),
                 "--compare", str(old)]) == 0
    out = capsys.readouterr().out
    assert "vs old" in out
    gae_line = next(line for line in out.splitlines() if line.startswith("advantages/gae"))
    assert gae_line.rstrip().endswith("x")


def test_unknown_case_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--only", "nonsense"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "nonsense" in err and "env_step" in err and len(err.strip().splitlines()) == 1
    assert set(CASES) >= {"env_step", "rollout", "advantages", "update", "end_to_end", "compile_cache"}


def test_suites_rollout_against_the_suites_raw_step(quick_report):
    results = quick_report[1]["results"]
    raw, env, ours = (results[f"suites/{row}/navix:Navix-Empty-5x5-v0/envs=8"] for row in ("raw", "env", "rollout"))
    assert raw["compile_s"] > 0 and raw["steps_per_second"]["median"] > 0
    assert env["repeats"] == ours["repeats"] == raw["repeats"] == 2  # timed in turns, round by round
    rate = {name: row["steps_per_second"]["median"] for name, row in (("raw", raw), ("env", env), ("ours", ours))}
    assert ours["ratio_to_raw_env"] == pytest.approx(rate["ours"] / rate["raw"])
    assert ours["ratio_to_env_with_resets"] == pytest.approx(rate["ours"] / rate["env"])
    assert env["ratio_to_raw_env"] == pytest.approx(rate["env"] / rate["raw"])
    # the least a PPO rollout does (PureJaxRL's), timed in the same turns
    minimal = results["suites/minimal/navix:Navix-Empty-5x5-v0/envs=8"]
    assert minimal["repeats"] == 2 and minimal["ratio_to_raw_env"] == pytest.approx(
        minimal["steps_per_second"]["median"] / rate["raw"])
    assert ours["ratio_to_minimal_rollout"] == pytest.approx(rate["ours"] / minimal["steps_per_second"]["median"])
    acting = results["suites/acting/navix:Navix-Empty-5x5-v0/envs=8"]
    split = ours["ms_per_step"]
    assert split["acting"] == pytest.approx(1e3 * acting["median_s"] / 16)  # 16 steps in the quick run
    assert sum(split.values()) == pytest.approx(1e3 * ours["median_s"] / 16)
