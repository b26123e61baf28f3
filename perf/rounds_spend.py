"""The rounds' spend and power (issue 57): each design of `verdict.until=resolved` in docs/verdicts.md (rounds of 3
seeds per arm up to 9 and up to 12, Pocock- and O'Brien-Fleming-type spending), simulated as the rounds decide
(report.sequential.plan_levels' levels; a paired comparison claimed at a look when its t p and its sign-flip p
are both within the look's level; stopped for equivalence when the repeated interval lies within +-effect), beside
a fixed design of the same maximum seeds (the paired t at 5%, exact: the noncentral t).

- A/A spend: normal per-seed differences (the worst case: no equivalence stop), collapse-like ones (each run
  collapsing with probability 1/2: a seed's difference about -0.62, 0 or +0.62) and the unpaired levels (the t
  alone, for comparisons the pairing does not hold for);
- power at effect d (one sd of a seed's paired difference: the audit's fixed 9-seed power 0.75), with the mean
  seeds per arm the rounds used.

    nice -n 10 python perf/rounds_spend.py --reps 100000
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats as sps

from gspo.report.sequential import flip_rows, paths_t_p, plan_levels
from gspo.report.stats import SIGN_FLIP_DRAWS, SIGN_FLIP_MAX, SIGN_FLIP_SEED
from gspo.vocab.choices import Spending

DESIGNS = [([3, 6, 9], Spending.POCOCK), ([3, 6, 9], Spending.OBRIEN_FLEMING),
           ([3, 6, 9, 12], Spending.POCOCK), ([3, 6, 9, 12], Spending.OBRIEN_FLEMING)]
BEYOND = [3, 6, 9, 12, 15, 18, 21]  # --beyond: a design past 16 seeds, where the sign-flip p is Monte Carlo


def mc_signs(n: int) -> np.ndarray:
    """The sign patterns stats.sign_flip_mc draws for n differences [SIGN_FLIP_DRAWS, n] (its seed, its blocks)."""
    rng = np.random.default_rng(SIGN_FLIP_SEED)
    return np.concatenate([rng.choice([-1.0, 1.0], size=(min(8192, SIGN_FLIP_DRAWS - i), n))
                           for i in range(0, SIGN_FLIP_DRAWS, 8192)])


def rounds(x: np.ndarray, seeds: list[int], levels: list[float], gate: bool = True,
           margin: float = 0.0) -> tuple[float, float]:
    """(the share of rows of x [R, n_K] claimed at some look, the mean seeds per arm used) of the rounds at
    `levels`: t p and (`gate`) sign-flip p within the look's level; `margin` > 0 stops a row whose repeated
    interval lies within +-margin (equivalent, report.sequential.decide)."""
    reps = len(x)
    s, q = np.cumsum(x, axis=1), np.cumsum(np.square(x), axis=1)
    alive, hit = np.ones(reps, dtype=bool), np.zeros(reps, dtype=bool)
    used = np.full(reps, seeds[-1])
    for n, level in zip(seeds, levels, strict=True):
        if level <= 0:
            continue
        tp = paths_t_p(s[:, n - 1], q[:, n - 1], n)
        cand = np.flatnonzero(alive & (tp <= level))
        if gate:
            cand = cand[flip_rows(x[cand, :n], mc_signs(n) if n > SIGN_FLIP_MAX else None) <= level * (1 + 1e-9)]
        claimed = np.zeros(reps, dtype=bool)
        claimed[cand] = True
        stop = claimed
        if margin > 0:
            mean = s[:, n - 1] / n
            half = sps.t.isf(level / 2, n - 1) * np.sqrt(np.maximum(q[:, n - 1] - s[:, n - 1] ** 2 / n, 0) / (n - 1) / n)
            stop = claimed | (alive & (half > 0) & (mean - half > -margin) & (mean + half < margin))
        used[alive & stop] = n
        hit |= claimed
        alive &= ~stop
    return float(hit.mean()), float(used.mean())


def fixed_power(n: int, d: float, alpha: float = 0.05) -> float:
    """The exact power of the paired t at two-sided `alpha` with n seeds at effect d sds (noncentral t)."""
    c, ncp = sps.t.isf(alpha / 2, n - 1), d * math.sqrt(n)
    return float(sps.nct.sf(c, n - 1, ncp) + sps.nct.cdf(-c, n - 1, ncp))


def collapse_like(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
    acc = np.where(rng.random((reps, 2, n)) < 0.5, 0.03, 0.65) + rng.normal(0, 0.01, (reps, 2, n))
    return acc[:, 0] - acc[:, 1]


def row(seeds: list[int], kind: str, reps: int, d: float, rng: np.random.Generator) -> dict:
    top = seeds[-1]
    plan = plan_levels(seeds, top, kind=kind, final=True)
    aa, _ = rounds(rng.standard_normal((reps, top)), seeds, plan.paired)
    collapse, _ = rounds(collapse_like(rng, reps, top), seeds, plan.paired)
    unpaired, _ = rounds(rng.standard_normal((reps, top)), seeds, plan.unpaired, gate=False)
    power, used = rounds(rng.standard_normal((reps, top)) + d, seeds, plan.paired, margin=d)
    return {"design": f"{kind} {'->'.join(map(str, seeds))}", "levels": plan.paired, "planned": plan.spent[-1],
            "aa": aa, "collapse": collapse, "unpaired": unpaired, "power": power, "seeds": used,
            "fixed": fixed_power(top, d)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=100_000)
    ap.add_argument("--effect", type=float, default=1.0, help="the effect d in sds of a seed's paired difference")
    ap.add_argument("--seed", type=int, default=2057)
    ap.add_argument("--beyond", action="store_true", help=f"only the A/A spend of {'->'.join(map(str, BEYOND))} "
                    "(Monte Carlo sign-flip p above 16 seeds), both spendings")
    args = ap.parse_args()
    if args.beyond:
        return beyond(args.reps, np.random.default_rng(args.seed))
    rng, start = np.random.default_rng(args.seed), time.time()
    se = math.sqrt(0.05 * 0.95 / args.reps)
    print(f"{args.reps} repetitions each (binomial se {se:.4f} at 0.05); effect d = {args.effect:g} sd")
    print("| design | levels per look | A/A normal | A/A collapse-like | A/A unpaired (t alone) | power at d "
          "| mean seeds/arm | fixed design, same max seeds: power (A/A 0.05) |")
    print("|---|---|---|---|---|---|---|---|")
    for seeds, kind in DESIGNS:
        r = row(seeds, kind, args.reps, args.effect, rng)
        levels = ", ".join(f"{v:.4f}" if v > 0 else "0" for v in r["levels"])
        print(f"| {r['design']} | {levels} | {r['aa']:.4f} | {r['collapse']:.4f} | {r['unpaired']:.4f} | "
              f"{r['power']:.3f} | {r['seeds']:.2f} | {seeds[-1]} seeds: {r['fixed']:.3f} |", flush=True)
    print(f"{time.time() - start:.0f} s wall, {time.process_time():.0f} s CPU")


def beyond(reps: int, rng: np.random.Generator) -> None:
    """The A/A spend of a design past the sign-flip p's exact range (normal and collapse-like differences)."""
    start = time.time()
    for kind in (Spending.POCOCK, Spending.OBRIEN_FLEMING):
        plan = plan_levels(BEYOND, BEYOND[-1], kind=kind, final=True)
        aa, _ = rounds(rng.standard_normal((reps, BEYOND[-1])), BEYOND, plan.paired)
        collapse, _ = rounds(collapse_like(rng, reps, BEYOND[-1]), BEYOND, plan.paired)
        print(f"{kind} {'->'.join(map(str, BEYOND))}: levels {', '.join(f'{v:.4f}' for v in plan.paired)}; A/A normal "
              f"{aa:.4f}, collapse-like {collapse:.4f} ({reps} repetitions, se {math.sqrt(0.05 * 0.95 / reps):.4f})",
              flush=True)
    print(f"{time.time() - start:.0f} s wall, {time.process_time():.0f} s CPU")


if __name__ == "__main__":
    main()
