"""Interval widths of held-out accuracy before and after a larger final eval, from one sweep (issue 45).

The final eval's per-sample rewards (evals.jsonl `outcomes`, train.final_eval_k samples per problem) hold a
smaller eval inside them: its first k' samples per problem are a k'-sample eval of the same model (other draws
than a k'-sample eval would make, from the same distribution). For each k' (default 4 and the whole k), each
paired difference of the page (each arm against its baseline as the report pairs them: report/arms.pairs, so a
swept setting such as train.lr is compared within each of its values) is given with its paired t interval, the
noise split of the difference (report/heldout.paired_split) and the crossed interval (new problems too).

    python perf/final_eval_widths.py results/sweeps/compare-default --ks 4 16
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from gspo.report.arms import group_arms, pairs
from gspo.report.heldout import crossed_interval, final_outcomes, new_problems_interval, paired_split
from gspo.report.runs import load_runs
from gspo.report.stats import paired_ci


def _first(out, k: int):
    """The eval's first k samples per problem as an eval of its own."""
    samples = out.samples[:, :k]
    return replace(out, k=k, samples=samples, correct=np.rint(samples.sum(axis=1)).astype(int))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="a sweep folder, or run folders")
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--metric", default="eval/arith/accuracy")
    args = ap.parse_args()
    runs, _ = load_runs(args.paths)
    for arm, base in pairs(group_arms(runs)):
        by_seed = {r.config.get("seed"): r for r in arm.runs}
        both = [(final_outcomes(by_seed[r.config.get("seed")], args.metric), final_outcomes(r, args.metric))
                for r in base.runs if r.config.get("seed") in by_seed]
        if any(a is None or b is None or a.samples is None or b.samples is None for a, b in both):
            print(f"{arm.label} - {base.label}: per-sample outcomes not recorded (a run of gspo before issue 45)")
            continue
        for k in args.ks:
            ks = [(_first(a, k), _first(b, k)) for a, b in both]
            t = paired_ci([a.accuracy for a, _ in ks], [b.accuracy for _, b in ks])
            split = paired_split(ks)
            per = (np.stack([a.per_problem for a, _ in ks]), np.stack([b.per_problem for _, b in ks]))
            crossed, (page, how) = crossed_interval(*per), new_problems_interval(*per)
            print(f"{arm.label} - {base.label} at k={k:>2} ({len(ks)} seeds): {t.mean:+.4f}, paired t {t.low:+.4f} to "
                  f"{t.high:+.4f} (half-width {(t.high - t.low) / 2:.4f}); eval share of variance {split.eval_share:.2f} "
                  f"(shared draws sd {split.eval ** 0.5:.4f}, as independent {split.independent ** 0.5:.4f}); crossed "
                  f"{crossed.low:+.4f} to {crossed.high:+.4f} (half-width {(crossed.high - crossed.low) / 2:.4f}, "
                  f"df {crossed.df:.1f}); the page's over new problems: {how}, half-width {(page.high - page.low) / 2:.4f}")


if __name__ == "__main__":
    main()
