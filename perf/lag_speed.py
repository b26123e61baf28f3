"""Benchmark: wall time per step of one `gspo train` at `rollout.lag=0` (generate, then update) against
`rollout.lag=1` (the next batch generated while the current one updates; trainer/step/lagged.py, docs/async.md).

Each pass is the embedded default at `train.prompts_per_step=4` (32 completions a step; --prompts), 6 steps, seed 0, no
held-out evals but the one at step 0 (`train.eval_every=0 task.eval_size=8`); the figure is the mean of the
runs' own `time/step_s` over steps 2-6 (step 1 also draws the first batch). Passes alternate ABAB... so the
machine's drift falls on both alike; the load average is printed before and after each pass.

    python perf/lag_speed.py                      # 2 passes each, torch threads 1 and 2
    python perf/lag_speed.py --passes 1 --threads 1
    python perf/lag_speed.py --prompts 16           # the embedded default's batch (128 completions)

Run it alone: a second workload on the machine falls on whichever lag it overlaps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

COMMON = ["train.steps=6", "seed=0", "train.eval_every=0", "task.eval_size=8",
          "logger.progress=false", "logger.wandb=disabled"]


def one_pass(lag: int, threads: int, out: Path, prompts: int) -> dict:
    run_id = f"lag{lag}-t{threads}-{time.monotonic_ns()}"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    load = os.getloadavg()[0]
    start = time.monotonic()
    done = subprocess.run(["gspo", "train", *COMMON, f"train.prompts_per_step={prompts}", f"rollout.lag={lag}", f"output_dir={out}", f"run_id={run_id}"],
                          env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if done.returncode:
        raise SystemExit(f"error: gspo train rollout.lag={lag} failed: {done.stderr.strip().splitlines()[-1:]}")
    rows = [json.loads(x) for x in (out / run_id / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r["time/step_s"] for r in rows if "time/step_s" in r and 2 <= r.get("step", 0) <= 6]
    return {"lag": lag, "threads": threads, "step_s": statistics.mean(steps), "min": min(steps), "max": max(steps),
            "wall_s": wall, "load": (load, os.getloadavg()[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--threads", default="1,2", help="torch threads, comma-separated")
    parser.add_argument("--prompts", type=int, default=4, help="train.prompts_per_step (the embedded default: 16)")
    args = parser.parse_args()
    print(f"cores {os.cpu_count()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"train.prompts_per_step={args.prompts} (x8 completions)")
    print("| torch threads | lag | time/step_s, mean of steps 2-6 (min-max) | wall s | load before, after |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for threads in (int(t) for t in args.threads.split(",")):
            for _ in range(args.passes):
                for lag in (0, 1):
                    r = one_pass(lag, threads, Path(tmp), args.prompts)
                    print(f"| {threads} | {lag} | {r['step_s']:.2f} ({r['min']:.2f}-{r['max']:.2f}) | "
                          f"{r['wall_s']:.0f} | {r['load'][0]:.1f}, {r['load'][1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
