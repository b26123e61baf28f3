"""Benchmark: on a machine with few cores, does a preset finish sooner as parallel jobs of one thread each, or
as one job at a time using every core?

The embedded model's matmuls are small (hidden size 64-128), so a second torch thread buys a job little; two
jobs at one thread each keep both cores busy with work that does not have to be split. This script runs the
real command, `gspo compare preset=NAME`, on the machine's warm cold-start cache, under each layout in turn
(ABAB..., so the VM's drift falls on both alike), and prints each pass's wall time, its runs' own wall times and
the load average:

- `serial`: Hydra's basic launcher, one job at a time, torch's default threads (one per core);
- `jobs=N`: `hydra/launcher=joblib hydra.launcher.n_jobs=N`, each job given cores // N torch threads
  (study/launch.py).

    python perf/jobs_vs_threads.py                       # the default compare, serial vs jobs=2, 2 passes each
    python perf/jobs_vs_threads.py --presets family --passes 1 --layouts serial,jobs=2

Run it alone: a second workload on the machine falls on whichever layout it overlaps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from time_to_answer import measure  # noqa: E402  (one way to run and time a preset)


def layout_overrides(layout: str) -> list[str]:
    if layout == "serial":
        return []
    n = int(layout.removeprefix("jobs="))
    return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="compare")
    ap.add_argument("--layouts", default="serial,jobs=2")
    ap.add_argument("--passes", type=int, default=2, help="passes of every layout, interleaved")
    ap.add_argument("--override", action="append", default=[], help="extra override for every run")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    import torch

    cache = Path(os.environ.get("GSPO_CACHE") or Path.home() / ".cache" / "gspo")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads by default), python {platform.python_version()}; load average at "
          f"start {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    layouts = args.layouts.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            for p in range(args.passes):
                for layout in layouts:
                    row = measure(preset, "warm", cache, Path(tmp) / f"{preset}-{layout.replace('=', '')}-{p}",
                                  [*layout_overrides(layout), *args.override])
                    row.update(layout=layout, passed=p)
                    rows.append(row)
                    print(f"  {preset} {layout:>8} pass {p}: {row['wall']:6.0f} s wall, runs {row['runs']}, "
                          f"their own wall {row['runs_wall']:.0f} s in all (longest {row['run_wall_max']:.0f} s), "
                          f"cold start built {row['cold_start']:.0f} s, load {row['load']:.1f}", flush=True)
    print(f"\n  {'preset':>10} {'layout':>8} {'passes':>6} {'median wall s':>14} {'walls':>20}")
    for preset in args.presets.split(","):
        base = None
        for layout in layouts:
            walls = [r["wall"] - r["cold_start"] for r in rows if r["preset"] == preset and r["layout"] == layout]
            med = statistics.median(walls)
            base = base or med
            print(f"  {preset:>10} {layout:>8} {len(walls):6d} {med:14.0f} {' '.join(f'{w:.0f}' for w in walls):>20}"
                  f"   {base / med:.2f}x the first layout's speed")
    print("  (wall: the command's, less any cold start it had to build)")
    print(f"load average at end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
