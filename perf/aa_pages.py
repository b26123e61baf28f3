"""A/A pages with their collapse lines counted (issue 57, D1): the share of simulated pages whose arms are all the
same algorithm on which at least one confirmatory line says "resolved", per page type, before (each collapse test
at 5% per pair, the pooled one too; the primary score's comparisons Holm at 5% among themselves) and after (every
confirmatory line under one family-wise 5%: report/family.py's weighted Holm over the union, the pooled count
described).

The data are perf/aa_check.py's held-out model (128 problems, difficulty logit sd 1.5 around accuracy 0.65, a seed
effect every run of a seed shares, logit sd 0.3, each run's own noise, logit sd 0.1, one sample per problem), with
collapse added: each run collapses with probability q (its stratum's) and then scores near 0.03 (its last eval,
intention-to-treat). Page types: two-arm compare (GSPO vs GRPO), family (7 arms: 6 against the baseline), lr (5
rates x 2 arms, GSPO vs GRPO at each; the pooled count over the rates). Every repetition at once in numpy.

    nice -n 10 python perf/aa_pages.py --reps 100000      # the table in docs/verdicts.md
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from gspo.report.collapse import Count, boschloo_p
from gspo.report.family import weights
from gspo.report.stats import LEVEL

sys.path.insert(0, str(Path(__file__).parent))
from aa_check import flip_p  # noqa: E402  (one vectorized sign-flip p for the A/A scripts)

ALPHA = 1 - LEVEL
PROBLEMS = 128
# page type -> (strata, arms per stratum): comparisons are arm j > 0 against arm 0 of its stratum
PAGES = {"two-arm compare": (1, 2), "family (7 arms)": (1, 7), "lr (5 rates x 2 arms)": (5, 2)}
COLLAPSED_ACC = 0.03


def accuracy(rng: np.random.Generator, reps: int, runs: int, seeds: int, q: np.ndarray, chunk: int = 2000
             ) -> tuple[np.ndarray, np.ndarray]:
    """(final held-out accuracy [R, runs, S], collapsed [R, runs, S]): every run of a seed shares its seed effect;
    run i collapses with probability q[i]."""
    accs, broke = [], []
    for start in range(0, reps, chunk):
        r = min(chunk, reps - start)
        logit = (rng.normal(math.log(0.65 / 0.35), 1.5, size=(r, 1, 1, PROBLEMS))
                 + rng.normal(0, 0.3, size=(r, 1, seeds, 1)) + rng.normal(0, 0.1, size=(r, runs, seeds, 1)))
        acc = (rng.random((r, runs, seeds, PROBLEMS)) < 1 / (1 + np.exp(-logit))).mean(-1)
        gone = rng.random((r, runs, seeds)) < q[None, :, None]
        low = rng.binomial(PROBLEMS, COLLAPSED_ACC, size=(r, runs, seeds)) / PROBLEMS
        accs.append(np.where(gone, low, acc))
        broke.append(gone)
    return np.concatenate(accs), np.concatenate(broke)


def paired_p(d: np.ndarray) -> np.ndarray:
    """The paired t's two-sided p on the last axis of d (se 0: NaN, no test)."""
    n = d.shape[-1]
    mean, se = d.mean(-1), d.std(-1, ddof=1) / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 0, 2 * sps.t.sf(np.abs(mean) / se, n - 1), np.nan)


def boschloo_table(runs: int) -> np.ndarray:
    """p[a, b]: Boschloo's p (report.collapse.boschloo_p) of a/runs collapsed against b/runs, every table."""
    return np.array([[boschloo_p(Count("a", a, runs), Count("b", b, runs)) for b in range(runs + 1)]
                     for a in range(runs + 1)])


def weighted_holm_levels(p: np.ndarray, w: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """stats.holm(p, alpha, w) on each row of p [R, K] (NaN: never rejected): the level each line is held to."""
    p = np.nan_to_num(p, nan=np.inf)
    order = np.argsort(p / w, axis=1, kind="stable")
    ws, ps = w[order], np.take_along_axis(p, order, 1)
    left = w.sum() - np.concatenate([np.zeros((len(p), 1)), np.cumsum(ws, 1)[:, :-1]], 1)  # weight not yet rejected
    fail = ps > alpha * ws / left
    first = np.where(fail.any(1), fail.argmax(1), p.shape[1])
    stop = np.take_along_axis(left, np.minimum(first, p.shape[1] - 1)[:, None], 1)  # the weight left at the stop
    levels = np.where(np.arange(p.shape[1]) < first[:, None], alpha * ws / left, alpha * ws / stop)
    out = np.empty_like(levels)
    np.put_along_axis(out, order, levels, 1)
    return out


def lines(acc: np.ndarray, broke: np.ndarray, strata: int, arms: int, table: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the primary comparisons' paired t p [R, m], the collapse tests' p [R, m], the comparisons' exact sign-flip
    p [R, m])."""
    pairs = [(s * arms + j, s * arms) for s in range(strata) for j in range(1, arms)]
    prim = np.stack([paired_p(acc[:, a] - acc[:, b]) for a, b in pairs], 1)
    counts = broke.sum(-1)  # [R, runs]
    coll = np.stack([table[counts[:, a], counts[:, b]] for a, b in pairs], 1)
    flips = np.stack([flip_p(acc[:, a] - acc[:, b]) for a, b in pairs], 1)
    return prim, coll, flips


def page_rates(rng: np.random.Generator, reps: int, page: str, seeds: int, q: list[float]) -> dict[str, float]:
    """A/A rates of at least one false "resolved" on `page` at `seeds` per arm, collapse probability q per stratum:
    before (comparisons Holm among themselves at 5%, each collapse test and the pooled one at 5%), after (the
    page's weighted Holm over the union, report/family.py, a comparison resolved only where its exact sign-flip p is
    within its level too: its p the larger of the two) and "t only" (the union without that gate)."""
    strata, arms = PAGES[page]
    qs = np.repeat(np.asarray(q, float), arms)
    acc, broke = accuracy(rng, reps, strata * arms, seeds, qs)
    prim, coll, flips = lines(acc, broke, strata, arms, boschloo_table(seeds))
    m = prim.shape[1]
    before = (weighted_holm_levels(prim, np.ones(m)) >= np.nan_to_num(prim, nan=np.inf)).any(1) | (coll < ALPHA).any(1)
    if strata > 1:  # the pooled count, GSPO over the rates against GRPO over the rates, tested at 5% before
        counts = broke.sum(-1)
        pooled = boschloo_table(strata * seeds)[counts[:, 1::2].sum(1), counts[:, 0::2].sum(1)]
        before |= pooled < ALPHA
    union = np.concatenate([prim, coll], 1)
    w = np.asarray(weights(m, m))
    return {"before": float(before.mean()), "t only": _any_resolved(union, w),
            "after": _any_resolved(np.concatenate([np.fmax(prim, flips), coll], 1), w)}


def _any_resolved(p: np.ndarray, w: np.ndarray) -> float:
    """The share of rows of p [R, K] where the weighted Holm of the page resolves some line."""
    return float((np.nan_to_num(p, nan=np.inf) <= weighted_holm_levels(p, w)).any(1).mean())


CASES = [(page, seeds, [q] * PAGES[page][0]) for page in PAGES for seeds in (3, 6) for q in (0.0, 0.5)]
CASES.append(("lr (5 rates x 2 arms)", 3, [0.0, 0.1, 0.3, 0.5, 0.9]))  # collapses rising with the rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100_000)
    args = parser.parse_args()
    rng = np.random.default_rng(57)
    start = time.perf_counter()
    se = math.sqrt(0.05 * 0.95 / args.reps)
    print("| page | seeds per arm | collapse probability q | before (collapse tests at 5% each) | one family, t only "
          "| after (one family, t and exact sign-flip) |")
    print("|---|---|---|---|---|---|")
    for page, seeds, q in CASES:
        r = page_rates(rng, args.reps, page, seeds, q)
        qs = f"{q[0]:g}" if len(set(q)) == 1 else ", ".join(f"{x:g}" for x in q)
        print(f"| {page} | {seeds} | {qs} | {r['before']:.4f} | {r['t only']:.4f} | {r['after']:.4f} |", flush=True)
    print(f"{args.reps} repetitions each (Monte Carlo se {se:.4f} at 0.05); {time.perf_counter() - start:.0f} s wall, "
          f"{time.process_time():.0f} s CPU, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
