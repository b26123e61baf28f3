"""Benchmark: how long a comparison preset takes to give its answer, on a fresh cache and on a warm one.

`gspo compare preset=NAME` is what a user waits for: the embedded model's cold start (built once per machine
and cached under GSPO_CACHE), the preset's training runs (and, with train.compile=true, the compilation in
their first steps), then the report. For each preset this script runs the real command twice in a
subprocess:

- fresh: with an empty GSPO_CACHE (a new machine: the cold start is built first);
- warm: again with the cache the first left (every later compare on that machine);

and prints the wall time of each, split into the cold start (coldstart.json's `seconds`), the runs (each
run's own wall time in run.json, summed; their first steps' excess over their median step: start-up and any
compilation) and the rest (process start, sweep launch, the report).

    python perf/time_to_answer.py                          # the default preset (compare), fresh and warm
    python perf/time_to_answer.py --presets compare,mismatch --only warm
    python perf/time_to_answer.py --presets compare --override train.compile=true

The runs write under a temporary folder; only the figures are kept (--json to save them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP_TIME = "time/step_s"  # gspo.vocab.metrics.TIME_STEP: read from the runs' metrics.jsonl


def _runs(sweep_dir: Path) -> list[Path]:
    from gspo.trainer.run.sweepdir import sweep_runs

    return sweep_runs(sweep_dir)  # the run folders the sweep recorded (under output_dir)


def _first_step_excess(run: Path) -> float:
    """Seconds the run's first training step took beyond its median step (start-up, compilation)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r[STEP_TIME] for r in rows if r.get("step", 0) >= 1 and STEP_TIME in r]
    return steps[0] - statistics.median(steps) if len(steps) > 1 else 0.0


def _cold_start_seconds(cache: Path) -> float:
    return sum(json.loads(p.read_text()).get("seconds", 0.0) for p in cache.glob("coldstart/*/coldstart.json"))


def measure(preset: str, kind: str, cache: Path, sweep_dir: Path, overrides: list[str]) -> dict:
    """One `gspo compare preset=...` into `sweep_dir`, with GSPO_CACHE=`cache`."""
    cold_before = _cold_start_seconds(cache)
    cmd = [sys.executable, "-m", "gspo.cli.main", "compare", f"preset={preset}", f"hydra.sweep.dir={sweep_dir}",
           f"output_dir={sweep_dir}-runs", *overrides]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env={**os.environ, "GSPO_CACHE": str(cache)}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        sys.exit(f"{preset} ({kind}) failed (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
    runs = _runs(sweep_dir)
    run_walls = [json.loads((r / "run.json").read_text()).get("wall_s", 0.0) for r in runs]
    cold = _cold_start_seconds(cache) - cold_before  # built by this command (0 when it was cached)
    return {"preset": preset, "kind": kind, "wall": wall, "cold_start": cold, "runs": len(runs),
            "runs_wall": sum(run_walls), "run_wall_max": max(run_walls, default=0.0),
            "first_step_excess": sum(_first_step_excess(r) for r in runs),
            "rest": wall - cold - sum(run_walls), "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="compare", help="comma-separated conf/sweep presets")
    ap.add_argument("--only", choices=["fresh", "warm"], help="one kind only (warm: the current GSPO_CACHE)")
    ap.add_argument("--override", action="append", default=[], help="extra override for every run")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    import torch

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, python "
          f"{platform.python_version()}; load average at start {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
          flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            kinds = [args.only] if args.only else ["fresh", "warm"]
            fresh_cache = Path(tmp) / f"cache-{preset}"
            for kind in kinds:
                if kind == "warm" and args.only == "warm":
                    cache = Path(os.environ.get("GSPO_CACHE") or Path.home() / ".cache" / "gspo")
                else:
                    cache = fresh_cache
                row = measure(preset, kind, cache, Path(tmp) / f"{preset}-{kind}", args.override)
                rows.append(row)
                print(f"  {preset} {kind}: {row['wall']:.0f} s (load {row['load']:.1f})", flush=True)
    print(f"\n  {'preset':>10} {'cache':>6} {'wall s':>7} {'cold start':>11} {'runs':>5} {'runs s':>7} "
          f"{'longest run':>12} {'first steps':>12} {'rest s':>7}")
    for r in rows:
        print(f"  {r['preset']:>10} {r['kind']:>6} {r['wall']:7.0f} {r['cold_start']:11.0f} {r['runs']:5d} "
              f"{r['runs_wall']:7.0f} {r['run_wall_max']:12.0f} {r['first_step_excess']:12.1f} {r['rest']:7.0f}")
    print("  (runs s: the runs' own wall times summed; first steps: their first steps' excess over their median "
          "step, summed; rest: process start, sweep launch, report)")
    print(f"load average at end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
