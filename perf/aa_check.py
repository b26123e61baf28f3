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
from scipy import stats as sps

from gspo.report.heldout import paired_bootstrap
from gspo.report.sequential import boundaries, decide, nominal, t_levels
from gspo.report.stats import LEVEL, diff_ci, excludes_zero, holm, paired_ci, sign_flip_p


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
    levels = t_levels([(r + 1) * per_round for r in range(rounds)], n_max, 1 - LEVEL, kind, final=True)
    hits = {"sequential": 0, "naive": 0}
    for acc in heldout(rng, n_max, reps).mean(axis=3):  # [A, S] per experiment
        seq = naive = False
        for r in range(rounds):
            n = (r + 1) * per_round
            a, b = list(acc[0, :n]), list(acc[1, :n])
            ci = paired_ci(a, b)
            seq = seq or decide(ci, levels[r], math.inf, sign_flip_p(a, b)).resolved
            naive = naive or excludes_zero(ci)
        hits["sequential"] += seq
        hits["naive"] += naive
    return {m: h / reps for m, h in hits.items()}


# ---- vectorized checks (issue 45): every repetition at once in numpy, 100,000 in minutes on 2 loaded cores ----

def _paired_t(d: np.ndarray, level: float | np.ndarray = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, se, p) of the paired t on the last axis of d [..., n] (se 0: p NaN, no test)."""
    n = d.shape[-1]
    mean, se = d.mean(-1), d.std(-1, ddof=1) / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(se > 0, 2 * sps.t.sf(np.abs(mean) / se, n - 1), np.nan)
    return mean, se, p


def flip_p(d: np.ndarray) -> np.ndarray:
    """The exact sign-flip p of each row of d [R, n] (stats.sign_flip_p, in blocks of 4,096 rows)."""
    n = d.shape[1]
    signs = (1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)).astype(float).T  # [n, 2^n]
    out = np.empty(len(d))
    for i in range(0, len(d), 4096):
        block = d[i:i + 4096]
        out[i:i + 4096] = (np.abs(block @ signs) >= np.abs(block.sum(1))[:, None] * (1 - 1e-12)).mean(1)
    return out


def _accuracy(rng: np.random.Generator, seeds: int, reps: int, chunk: int = 5000) -> np.ndarray:
    """Final held-out accuracy [R, 2, S] of `heldout`, drawn `chunk` experiments at a time (memory)."""
    return np.concatenate([heldout(rng, seeds, min(chunk, reps - i)).mean(axis=3) for i in range(0, reps, chunk)])


def page_error(rng: np.random.Generator, reps: int, seeds: int = 3) -> dict[str, float]:
    """A/A pages with three scores (held-out accuracy, greedy accuracy: one eval set, sampled and greedy draws;
    training reward: its own noise), each a paired t at 95%: the share of pages calling any of them resolved
    (before issue 45) against the share calling the primary score resolved (after: the others are exploratory)."""
    acc, greedy = _accuracy(rng, seeds, reps), _accuracy(rng, seeds, reps)  # [R, 2, S] each
    reward = rng.normal(0, 0.03, size=(reps, 2, seeds)) + rng.normal(0, 0.05, size=(reps, 1, seeds))
    ps = np.stack([_paired_t(x[:, 0] - x[:, 1])[2] for x in (acc, greedy, reward)])  # [3, R]
    hit = np.nan_to_num(ps, nan=1.0) < 1 - LEVEL
    return {"any of 3 scores": float(hit.any(axis=0).mean()), "primary only": float(hit[0].mean())}


def bimodal(rng: np.random.Generator, reps: int, seeds: int, q: float = 0.5, noise: float = 0.01) -> np.ndarray:
    """Collapse-like A/A per-seed differences [R, S]: each run collapses with probability q (accuracy 0.03,
    else 0.65), plus a little eval noise: d is about -0.62, 0 or +0.62."""
    acc = np.where(rng.random((reps, 2, seeds)) < q, 0.03, 0.65) + rng.normal(0, noise, (reps, 2, seeds))
    return acc[:, 0] - acc[:, 1]


def sequential_rate(d: np.ndarray, seeds: list[int], levels: list[float], gate: bool) -> float:
    """The share of rows of d [R, n_K] resolved at some look: paired t of the first n_k at level pi_k, and
    (`gate`) the exact sign-flip p within pi_k too (report.sequential.decide)."""
    hit = np.zeros(len(d), dtype=bool)
    for n, level in zip(seeds, levels, strict=True):
        if level <= 0:
            continue
        _, _, p = _paired_t(d[:, :n])
        r = np.nan_to_num(p, nan=1.0) <= level
        if gate:
            idx = np.flatnonzero(r & ~hit)
            r[idx] = flip_p(d[idx, :n]) <= level * (1 + 1e-9)
        hit |= r
    return float(hit.mean())


def sequential_checks(rng: np.random.Generator, reps: int) -> list[tuple[str, float, float]]:
    """A/A false-positive rates of the rounds, normal and collapse-like outcomes, 3 -> 6 -> 9 and 3 -> 6 -> 9 -> 12,
    both spendings: the z boundaries with t quantiles (before) and the t-calibrated levels with the sign-flip
    gate (after: report.sequential.t_levels, calibrated on the rule as it decides, and decide)."""
    rows = []
    for seeds in ([3, 6, 9], [3, 6, 9, 12]):
        top = seeds[-1]
        normal, collapse = rng.standard_normal((reps, top)), bimodal(rng, reps, top)
        for kind in ("obrien_fleming", "pocock"):
            z = [nominal(c) for c in boundaries([n / top for n in seeds], 1 - LEVEL, kind, final=True)]
            t = t_levels(seeds, top, 1 - LEVEL, kind, final=True)
            path = "->".join(map(str, seeds))
            for name, d in (("normal", normal), ("collapse-like", collapse)):
                rows.append((f"rounds {path}, {kind}, {name}: before (z levels)", sequential_rate(d, seeds, z, False), 0.05))
                rows.append((f"rounds {path}, {kind}, {name}: after (levels calibrated on the rule: t + sign-flip)",
                             sequential_rate(d, seeds, t, True), 0.05))
    return rows


def _holm_levels(p: np.ndarray, alpha: float = 1 - LEVEL) -> np.ndarray:
    """stats.holm on each row of p [R, m] (NaN: never rejected)."""
    m = p.shape[1]
    p = np.nan_to_num(p, nan=np.inf)
    order = np.argsort(p, axis=1)
    steps = alpha / (m - np.arange(m))  # [m]
    fail = np.take_along_axis(p, order, 1) > steps
    first = np.where(fail.any(1), fail.argmax(1), m)  # the first not rejected
    levels_sorted = np.where(np.arange(m) < first[:, None], steps, steps[np.minimum(first, m - 1)][:, None])
    out = np.empty_like(levels_sorted)
    np.put_along_axis(out, order, levels_sorted, 1)
    return out


def whisker_coverage(rng: np.random.Generator, reps: int, seeds: int = 3, m: int = 6) -> dict[str, float]:
    """How often the m intervals of one metric cover all m true differences at once (normal model: a seed
    effect every arm shares, sd 0.05; run noise sd 0.02; true differences 0, 0.06, ..., 0.3): at Holm's
    per-comparison levels (the verdict's test) and at Bonferroni's alpha / m (the forest's whiskers)."""
    delta = np.linspace(0, 0.3, m)
    u = rng.normal(0, 0.05, size=(reps, 1, seeds))
    runs = u + rng.normal(0, 0.02, size=(reps, m + 1, seeds))
    d = runs[:, 1:] - runs[:, :1] + delta[None, :, None]  # [R, m, S]
    mean, se, p = _paired_t(d)
    out = {}
    for name, level in (("Holm's levels", _holm_levels(p)), ("Bonferroni alpha/m", np.full(p.shape, (1 - LEVEL) / m))):
        half = sps.t.isf(level / 2, seeds - 1) * se
        out[name] = float((np.abs(mean - delta) <= half).all(axis=1).mean())
    return out


def boschloo_size(runs: int) -> float:
    """The exact size of Boschloo's test at `runs` per arm (report.collapse.boschloo_p on every table), the
    largest over a common collapse probability in 0.05, 0.10, ..., 0.95: no simulation needed."""
    from scipy.stats import binom

    from gspo.report.collapse import Count, boschloo_p

    reject = [(a, b) for a in range(runs + 1) for b in range(runs + 1)
              if boschloo_p(Count("a", a, runs), Count("b", b, runs)) < 1 - LEVEL]
    return max(sum(binom.pmf(a, runs, q) * binom.pmf(b, runs, q) for a, b in reject) for q in np.arange(0.05, 1, 0.05))


def fast_fixed_n(rng: np.random.Generator, reps: int, seeds: int) -> dict[str, float]:
    """fixed_n, vectorized: A/A false-positive rates of the paired t and Welch on final held-out accuracy."""
    acc = _accuracy(rng, seeds, reps)  # [R, 2, S]
    _, _, p = _paired_t(acc[:, 0] - acc[:, 1])
    va, vb = acc[:, 0].var(1, ddof=1) / seeds, acc[:, 1].var(1, ddof=1) / seeds
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (va + vb) ** 2 / ((va**2 + vb**2) / (seeds - 1))
        welch = 2 * sps.t.sf(np.abs(acc[:, 0].mean(1) - acc[:, 1].mean(1)) / np.sqrt(va + vb), df)
    return {"paired t": float((np.nan_to_num(p, nan=1) < 1 - LEVEL).mean()),
            "Welch": float((np.nan_to_num(welch, nan=1) < 1 - LEVEL).mean())}


def vectorized(rng: np.random.Generator, reps: int) -> list[tuple[str, float, float]]:
    """Every vectorized check at `reps` repetitions: (name, rate, nominal)."""
    rows = []
    for seeds in (3, 5, 10):
        rows += [(f"A/A false positives, {k}, {seeds} seeds", v, 0.05) for k, v in fast_fixed_n(rng, reps, seeds).items()]
    rows += [(f"A/A page, 3 scores at 95% each: {k}", v, 0.05) for k, v in page_error(rng, reps).items()]
    rows += sequential_checks(rng, reps)
    rows += [(f"6 intervals cover all 6 true differences, {k}", v, 0.95)
             for k, v in whisker_coverage(rng, reps).items()]
    rows += [(f"Boschloo's exact test, size at {n} runs per arm (exact, worst q)", boschloo_size(n), 0.05) for n in (3, 6)]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100_000)
    parser.add_argument("--figure", default=None, help="write the bar chart of the rates to this PNG")
    parser.add_argument("--loops", action="store_true", help="also the per-repetition checks (coverage, Holm, "
                        "bootstrap) through the report's own functions, at --reps / 25")
    args = parser.parse_args()
    rng = np.random.default_rng(45)
    start = time.perf_counter()
    rows = vectorized(rng, args.reps)
    if args.loops:
        small = max(args.reps // 25, 100)
        for seeds in (3, 5, 10):
            rows += [(f"coverage of a true difference, {k}, {seeds} seeds", v, 0.95)
                     for k, v in coverage(rng, small, seeds).items()]
        rows.append(("Holm, 6 comparisons, family-wise error, 3 seeds", holm_fwer(rng, small, 3), 0.05))
        rows.append(("two-level bootstrap, A/A false positives, 3 seeds", bootstrap_fpr(rng, small // 10, 3), 0.05))
    for name, rate, want in rows:
        print(f"| {name} | {rate:.4f} | {want:.2f} |")
    print(f"{args.reps} repetitions; {time.perf_counter() - start:.0f} s, {time.process_time():.0f} s CPU")
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
