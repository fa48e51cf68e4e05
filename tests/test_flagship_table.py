"""benchmarks/flagship_table.py: a run's row from each side's files, and the seconds to the suite
trainer's return read off them."""

import json

from benchmarks import flagship_table


def test_rows_from_each_sides_files(tmp_path):
    run_dir = tmp_path / "ours"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps(
        {"steps_per_second": 1000.0, "final_eval_return_mean": 7.5, "compile_s": 3.0, "eval_compile_s": 1.0}))
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(row) for row in (
        {"env_steps": 10, "wall_s": 4.04},  # a training line: no evaluation
        {"env_steps": 20, "wall_s": 5.06, "eval_return_mean": 2.0},
        {"env_steps": 30, "wall_s": 6.0, "eval_return_mean": 7.5})) + "\n")
    log = tmp_path / "brax.log"
    log.write_text("\n".join([
        "a warning line",
        json.dumps({"env_steps": 16, "sps": 9.0, "epoch_s": 2.0, "wall_s": 3.0, "eval_return": 1.0}),
        json.dumps({"env_steps": 32, "sps": 9.0, "epoch_s": 4.0, "wall_s": 5.5, "eval_return": 6.0}),
        "SUMMARY " + json.dumps({"steps_per_second": 8.0, "final_return": 6.0, "compile_and_first_epoch_s": 2.0})]))

    ours = flagship_table.row("ours", "ant", "1", "9.5", str(run_dir), "unused")
    assert ours == {"who": "ours", "env": "ant", "seed": 1, "process_s": 9.5, "steps_per_second": 1000.0,
                    "final_return": 7.5, "compile_s": 3.0, "eval_compile_s": 1.0,
                    "evals": [[20, 5.1, 2.0], [30, 6.0, 7.5]]}
    brax = flagship_table.row("brax", "ant", "1", "8.0", "unused", str(log))
    assert brax["evals"] == [[16, 3.0, 1.0], [32, 5.5, 6.0]]
    assert (brax["steps_per_second"], brax["final_return"]) == (8.0, 6.0)


def test_the_target_is_the_suite_trainers_mean_final_return():
    def run(who, seed, final, evals):
        return {"who": who, "env": "ant", "seed": seed, "process_s": 10.0 + seed, "steps_per_second": 100.0,
                "final_return": final, "evals": evals}

    rows = [run("brax", 0, 100.0, [[1, 5.0, 100.0]]), run("brax", 1, 200.0, [[1, 6.0, 150.0], [2, 9.0, 200.0]]),
            run("ours", 0, 300.0, [[1, 4.0, 149.0], [2, 8.0, 150.0]]), run("ours", 1, 120.0, [[1, 4.0, 120.0]]),
            {"who": "ours", "env": "ant", "seed": 2, "error": 124, "process_s": 1.0},
            run("ours-clip1", 0, 160.0, [[1, 7.0, 160.0]])]
    assert flagship_table.seconds_to(rows[2]["evals"], 150.0) == 8.0
    assert flagship_table.seconds_to(rows[3]["evals"], 150.0) is None
    lines = flagship_table.table(rows).splitlines()
    ours = next(line for line in lines if "| ours |" in line)
    brax = next(line for line in lines if "| brax |" in line)
    # target 150: ours' seed 0 at its 8 s evaluation, seed 1 never; Brax's seed 0 never, seed 1 at 6 s
    assert ours == "| ant | ours | 2 (1 failed) | 210.0 ± 127.3 (300, 120) | 100.0 ± 0.0 | 10.5 ± 0.7 | 8, - |"
    assert brax == "| ant | brax | 2 | 150.0 ± 70.7 (100, 200) | 100.0 ± 0.0 | 10.5 ± 0.7 | -, 6 |"
    # a variant of ours has its own line, before Brax's
    sides = [line.split(" | ")[1] for line in lines if line.startswith("| ant |")]
    assert sides == ["ours", "ours-clip1", "brax"]
