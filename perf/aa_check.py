"""A/A checks of the report's statistics: each procedure run many times on simulated data whose truth is known,
its false-positive rate and coverage measured against the nominal 5% / 95%.

The data imitate what a compare records (issue 34's measurements on the embedded default): a held-out eval of
P problems, k samples each, at accuracy near 0.65; the runs of one seed share the model's start and the prompt
stream, so both arms of a seed share a seed effect (sd 0.3 on the logit scale, about 0.06 in accuracy), and
each run adds its own training noise (sd 0.1 on the logit scale). Problems differ in difficulty (logit sd 1.5);
a fresh eval set is drawn for every experiment. "A/A": both arms are the same algorithm, so the true
difference is 0 and any "resolved" is a false positive.

Checked (the functions are the report's own, called as the report calls them):
- paired t (report.stats.paired_ci) and Welch (diff_ci): false-positive rate under A/A, coverage of a known
  difference under a normal model;
- Holm across m comparisons against one baseline (report.stats.holm): the family-wise error rate;
- the two-level paired bootstrap (report.heldout.paired_bootstrap): false-positive rate under A/A;
- the group-sequential procedure (report.sequential: boundaries, decide) with rounds of seeds: the
  false-positive rate under repeated looks, beside the naive rate (a fixed 95% interval at every look).

    python perf/aa_check.py                     # the full check; prints the table
    python perf/aa_check.py --figure docs/aa.png --reps 20000

tests/report/test_aa.py runs the same functions with fewer repetitions.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from gspo.report.heldout import paired_bootstrap
from gspo.report.sequential import boundaries, decide, nominal
from gspo.report.stats import LEVEL, diff_ci, excludes_zero, holm, paired_ci


def heldout(rng: np.random.Generator, seeds: int, reps: int, *, problems: int = 128, k: int = 1, shift: float = 0.0,
            seed_sd: float = 0.3, run_sd: float = 0.1, arms: int = 2) -> np.ndarray:
    """Per-problem accuracy [reps, arms, seeds, problems] (each the mean of k samples) of `reps` simulated
    experiments, each with its own eval set; arm 0 is shifted by `shift` on the logit scale."""
    difficulty = rng.normal(math.log(0.65 / 0.35), 1.5, size=(reps, 1, 1, problems))  # [R, 1, 1, P]
    seed_effect = rng.normal(0, seed_sd, size=(reps, 1, seeds, 1))  # shared by the arms (common random numbers)
    run_effect = rng.normal(0, run_sd, size=(reps, arms, seeds, 1))
    logit = difficulty + seed_effect + run_effect
    logit[:, 0] += shift
    return rng.binomial(k, 1 / (1 + np.exp(-logit))) / k


def fixed_n(rng: np.random.Generator, reps: int, seeds: int, k: int = 1) -> dict[str, float]:
    """A/A false-positive rates of the paired t and Welch intervals of final held-out accuracy."""
    hits = {"paired t": 0, "Welch": 0}
    for acc in heldout(rng, seeds, reps, k=k).mean(axis=3):  # [A, S] per experiment
        a, b = list(acc[0]), list(acc[1])
        hits["paired t"] += excludes_zero(paired_ci(a, b))
        hits["Welch"] += excludes_zero(diff_ci(a, b))
    return {m: h / reps for m, h in hits.items()}


def coverage(rng: np.random.Generator, reps: int, seeds: int, delta: float = 0.03) -> dict[str, float]:
    """Coverage of a known difference `delta` (normal model: a shared seed effect, sd 0.05, and run noise, sd
    0.01) by the paired t and Welch 95% intervals."""
    hits = {"paired t": 0, "Welch": 0}
    for _ in range(reps):
        u = rng.normal(0, 0.05, size=seeds)
        a, b = u + delta + rng.normal(0, 0.01, size=seeds), u + rng.normal(0, 0.01, size=seeds)
        for name, ci in (("paired t", paired_ci(list(a), list(b))), ("Welch", diff_ci(list(a), list(b)))):
            hits[name] += ci.low <= delta <= ci.high
    return {m: h / reps for m, h in hits.items()}


def holm_fwer(rng: np.random.Generator, reps: int, seeds: int, m: int = 6) -> float:
    """Family-wise error of m paired comparisons against one baseline, all A/A, under Holm."""
    errors = 0
    for acc in heldout(rng, seeds, reps, arms=m + 1).mean(axis=3):  # [m + 1, S] per experiment
        cis = [paired_ci(list(acc[i]), list(acc[0])) for i in range(1, m + 1)]
        levels = holm([ci.p for ci in cis])
        errors += any(excludes_zero(ci.at(1 - lvl)) for ci, lvl in zip(cis, levels, strict=True))
    return errors / reps


def bootstrap_fpr(rng: np.random.Generator, reps: int, seeds: int, draws: int = 1000) -> float:
    """A/A false-positive rate of the two-level paired bootstrap interval."""
    hits = 0
    for r, out in enumerate(heldout(rng, seeds, reps)):
        _, low, high = paired_bootstrap(out[0], out[1], draws=draws, seed=r)
        hits += low > 0 or high < 0
    return hits / reps


def sequential_fpr(rng: np.random.Generator, reps: int, rounds: int = 4, per_round: int = 3,
                   kind: str = "obrien_fleming") -> dict[str, float]:
    """A/A false-positive rate of seeds added in rounds, looking after each: the group-sequential procedure's
    repeated intervals, and the naive 95% interval at every look."""
    n_max = rounds * per_round
    fractions = [(r + 1) * per_round / n_max for r in range(rounds)]
    levels = [nominal(c) for c in boundaries(fractions, 1 - LEVEL, kind, final=True)]
    hits = {"sequential": 0, "naive": 0}
    for acc in heldout(rng, n_max, reps).mean(axis=3):  # [A, S] per experiment
        seq = naive = False
        for r in range(rounds):
            n = (r + 1) * per_round
            ci = paired_ci(list(acc[0, :n]), list(acc[1, :n]))
            seq = seq or decide(ci, levels[r], math.inf).resolved
            naive = naive or excludes_zero(ci)
        hits["sequential"] += seq
        hits["naive"] += naive
    return {m: h / reps for m, h in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10000)
    parser.add_argument("--figure", default=None, help="write the bar chart of the rates to this PNG")
    args = parser.parse_args()
    rng = np.random.default_rng(34)
    start = time.perf_counter()
    rows = []
    for seeds in (3, 5, 10):
        for method, rate in fixed_n(rng, args.reps, seeds).items():
            rows.append((f"A/A false positives, {method}, {seeds} seeds", rate, 0.05))
        for method, rate in coverage(rng, args.reps, seeds).items():
            rows.append((f"coverage of a true difference, {method}, {seeds} seeds", rate, 0.95))
    rows.append(("Holm, 6 comparisons, family-wise error, 3 seeds", holm_fwer(rng, args.reps // 4, 3), 0.05))
    for seeds in (3, 10):
        rows.append((f"two-level bootstrap, A/A false positives, {seeds} seeds",
                     bootstrap_fpr(rng, args.reps // 20, seeds), 0.05))
    for kind in ("obrien_fleming", "pocock"):
        rates = sequential_fpr(rng, args.reps, kind=kind)
        rows.append((f"4 looks of 3 seeds, {kind} spending", rates["sequential"], 0.05))
    rows.append(("4 looks of 3 seeds, naive 95% at every look", rates["naive"], 0.05))
    for name, rate, want in rows:
        print(f"{name:<62} {rate:.4f}  (nominal {want:.2f})")
    print(f"{args.reps} repetitions (bootstrap {args.reps // 20}, Holm {args.reps // 4}), "
          f"{time.perf_counter() - start:.0f} s")
    if args.figure:
        figure(rows, args.figure)


def figure(rows: list[tuple[str, float, float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1), dpi=100)
    y = np.arange(len(rows))[::-1]
    ax.barh(y, [r[1] for r in rows], color=["#1f77b4" if r[2] == 0.05 else "#2ca02c" for r in rows])
    for yi, (_, rate, want) in zip(y, rows, strict=True):
        ax.plot([want, want], [yi - 0.4, yi + 0.4], color="#c00")
        ax.text(rate + 0.01, yi, f"{rate:.3f}", va="center", fontsize=7)
    ax.set_yticks(y, [r[0] for r in rows], fontsize=7)
    ax.set_xlabel("rate (red: nominal)")
    ax.set_title("A/A checks of the verdict statistics (perf/aa_check.py)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
