"""Benchmark: does `train.compile=true` pay back, and after how many steps?

The update's forward/backward can run through a torch.compile'd model body (trainer/model/logprobs.py
`compile_body`). Compiling costs time in the first batches of every process; what torch compiled is kept under
the cache dir (GSPO_CACHE/inductor), so a later process of the same model shape reads it back instead of
compiling again. This script runs gspo's arm of perf/trl_vs_gspo.py (the same work: the embedded model, B
prompts x G completions, M optimizer steps per rollout batch, fp32 on the CPU) in separate processes:

- compile off;
- compile on with an empty compile cache (the first run of a sweep on a machine);
- compile on again with the cache the previous process left (every later run);

and prints, for each, the first `--first` batches' seconds (where compilation is paid) and the steady seconds
per rollout batch after them, then the steps after which compiling has paid back (extra seconds up front /
seconds saved per step) against the default run length (train.steps).

    python perf/compile_payback.py                   # GRPO, 2 repeats of each, 6 batches per process
    python perf/compile_payback.py --algo gspo --repeats 3 --batches 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import trl_vs_gspo as bench  # noqa: E402  (the arm, its work and its child process)


def _arm(args, work_file: str, compile_: bool, cache: str | None) -> dict:
    """One gspo process (`cache`: its compile cache folder); its per-batch seconds (all batches, none dropped)."""
    extra = [*bench.child_flags(args), "--warmup=0", f"--batches={args.batches}",
             f"--gspo-override=train.compile={str(compile_).lower()}"]
    res = bench.spawn(args, "gspo", args.algo, work_file, extra,
                      env={"TORCHINDUCTOR_CACHE_DIR": cache} if cache is not None else None)
    walls = [b["wall"] for b in res["batches"]]
    updates = [b["update"] for b in res["batches"]]
    return {"walls": walls, "updates": updates, "startup": res["startup"], "peak_rss_mb": res["peak_rss_mb"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="grpo")
    ap.add_argument("--repeats", type=int, default=2, help="processes of each kind (cold ones each get a new cache)")
    ap.add_argument("--batches", type=int, default=6, help="rollout batches per process")
    ap.add_argument("--first", type=int, default=2, help="leading batches counted as the compile's (not steady)")
    bench.add_work_args(ap)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    args.model, args.tmp, args.warmup, args.gspo_override = "embedded", None, 0, []
    from gspo.conf.compose import compose_config

    default_steps = compose_config([]).train.steps
    print(f"load average at start {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    rows: dict[str, list[dict]] = {"off": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = tmp
        work_file = os.path.join(tmp, "work.json")
        args_plan = argparse.Namespace(**{**vars(args), "warmup": 0})
        Path(work_file).write_text(json.dumps(bench.plan(args_plan)))
        for r in range(args.repeats):
            cache = os.path.join(tmp, f"inductor-{r}")  # empty: this repeat's cold process compiles into it
            for kind in ("off", "cold", "warm"):
                res = _arm(args, work_file, kind != "off", cache if kind != "off" else None)
                rows[kind].append(res)
                print(f"  repeat {r + 1} {kind:>4}: batches " + " ".join(f"{w:.2f}" for w in res["walls"])
                      + f" s (load {os.getloadavg()[0]:.1f})", flush=True)
    k = args.first
    summary = {}
    for kind, runs in rows.items():
        first = statistics.median(sum(x["walls"][:k]) for x in runs)
        steady = statistics.median(statistics.fmean(x["walls"][k:]) for x in runs)
        update = statistics.median(statistics.fmean(x["updates"][k:]) for x in runs)
        summary[kind] = {"first": first, "steady": steady, "update": update,
                         "peak_rss_mb": max(x["peak_rss_mb"] for x in runs)}
    print(f"\n== {args.algo.upper()}: B={args.prompts} x G={args.group}, {args.max_new_tokens} new tokens, "
          f"{args.updates} optimizer steps per rollout batch, {args.threads} threads; median of {args.repeats} "
          f"processes each ==")
    print(f"  {'compile':>8} {'first ' + str(k) + ' s':>10} {'steady s/batch':>15} {'update s':>9} {'RSS MiB':>8}")
    for kind, s in summary.items():
        print(f"  {kind:>8} {s['first']:10.2f} {s['steady']:15.3f} {s['update']:9.3f} {s['peak_rss_mb']:8.0f}")
    saved = summary["off"]["steady"] - summary["warm"]["steady"]
    for kind in ("cold", "warm"):
        extra = summary[kind]["first"] - summary["off"]["first"]
        steps = k + extra / saved if saved > 0 else float("inf")
        summary[kind]["payback_steps"] = steps
        print(f"  compile {kind}: {extra:.1f} s more in the first {k} batches, {saved:.3f} s saved per batch after: "
              f"pays back after {steps:.0f} steps (default run: {default_steps})")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary, "default_steps": default_steps}))


if __name__ == "__main__":
    main()
