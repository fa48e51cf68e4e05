"""The rows of benchmarks/gpu_flagship.sh: one JSON line a run, and the table of both sides.

    python -m benchmarks.flagship_table row WHO ENV SEED PROCESS_S RUN_DIR LOG   (the script calls it)
    python -m benchmarks.flagship_table RESULTS.jsonl

A row: who (`ours`, `ours-TAG` for a variant, or `brax`: the suite's own trainer through
benchmarks/peers_brax.py), env (the
script's phase), seed, process_s (the process, start to exit), steps_per_second (ours: the
summary's, compile excluded; Brax's: its later epochs', as peers_brax.py gives it), final_return,
and evals: [env steps, seconds since the run started, greedy return] at each evaluation (ours from
metrics.jsonl; Brax's from its epoch lines, seconds since its trainer was called).

The table, per env and side: seeds, final return mean ± standard deviation (each seed's), steps/s,
process seconds, and the seconds to the target: the first evaluation at or above the suite's own
trainer's mean final return over its seeds (the return "the suite's own trainer's, measured beside
it" of issue #57), per seed; `-` where a seed never reached it.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys


def ours_row(run_dir: pathlib.Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [[row["env_steps"], round(row["wall_s"], 1), row["eval_return_mean"]]
             for row in rows if "eval_return_mean" in row]
    return {"steps_per_second": summary["steps_per_second"], "final_return": summary["final_eval_return_mean"],
            "compile_s": summary["compile_s"], "eval_compile_s": summary.get("eval_compile_s"), "evals": evals}


def brax_row(log: pathlib.Path) -> dict:
    lines = log.read_text().splitlines()
    epochs = [json.loads(line) for line in lines if line.startswith('{"env_steps"')]
    summary = json.loads(next(line for line in lines if line.startswith("SUMMARY "))[len("SUMMARY "):])
    return {"steps_per_second": summary["steps_per_second"], "final_return": summary["final_return"],
            "compile_and_first_epoch_s": summary["compile_and_first_epoch_s"],
            "evals": [[row["env_steps"], round(row["wall_s"], 1), row["eval_return"]] for row in epochs]}


def row(who: str, env: str, seed: str, process_s: str, run_dir: str, log: str) -> dict:
    measured = ours_row(pathlib.Path(run_dir)) if who.startswith("ours") else brax_row(pathlib.Path(log))
    return {"who": who, "env": env, "seed": int(seed), "process_s": float(process_s), **measured}


def seconds_to(evals: list, target: float) -> float | None:
    """The seconds at the first evaluation at or above `target`, None if none was."""
    return next((seconds for _, seconds, value in evals if value >= target), None)


def _seconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f}"


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {spread:.1f}"


def table(rows: list[dict]) -> str:
    lines = ["| env | side | seeds | final return (each) | steps/s | process s | s to the suite trainer's return |",
             "|---|---|---|---|---|---|---|"]
    for env in dict.fromkeys(row["env"] for row in rows):
        done = [row for row in rows if row["env"] == env and "error" not in row]
        theirs = [row["final_return"] for row in done if row["who"] == "brax"]
        target = statistics.mean(theirs) if theirs else None
        sides = dict.fromkeys(row["who"] for row in rows if row["env"] == env)
        for who in sorted(sides, key=lambda who: (who == "brax", who)):  # ours and its variants, then Brax's
            side = [row for row in done if row["who"] == who]
            failed = sum(1 for row in rows if row["env"] == env and row["who"] == who and "error" in row)
            if not side and not failed:
                continue
            finals = [row["final_return"] for row in side]
            reached = "-" if target is None else ", ".join(_seconds(seconds_to(row["evals"], target)) for row in side)
            lines.append(f"| {env} | {who} | {len(side)}{f' ({failed} failed)' if failed else ''} | "
                         f"{_spread(finals)} ({', '.join(f'{v:.0f}' for v in finals)}) | "
                         f"{_spread([row['steps_per_second'] for row in side])} | "
                         f"{_spread([row['process_s'] for row in side])} | {reached} |")
    if len(lines) > 2:
        lines.append("target: the suite trainer's mean final return over its seeds, per env")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if argv[:1] == ["row"]:
        print(json.dumps(row(*argv[1:7])))
        return
    rows = [json.loads(line) for line in pathlib.Path(argv[0]).read_text().splitlines() if line.strip()]
    print(table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
