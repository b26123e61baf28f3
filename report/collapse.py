"""Collapse as a verdict: how many runs of each arm collapsed, tested with Boschloo's exact test.

A run collapsed when its collapse detector fired (run.json `collapsed: {step, reason}`, trainer/run/collapse.py).
For an arm against its baseline the 2x2 table is (collapsed, not collapsed) x (arm, baseline), with the runs per
arm fixed by design (two binomials, not fixed margins both ways). Boschloo's exact unconditional test
(scipy.stats.boschloo_exact, two-sided: Fisher's p as the statistic, its size maximised over the common
collapse probability; Boschloo 1970) gives p; resolved = p within its level (below). It is uniformly more powerful than Fisher's
test, which conditions on the total collapses and so cannot resolve any 3-vs-3 count (3/3 against 0/3 gives
Fisher's p = 0.10, Boschloo's 0.031); issue 45 measured Boschloo's size at 0.031-0.039 and its power at 6 runs
per arm for 0.8 vs 0.2 at 0.56 against Fisher's 0.28. With fewer runs even the most extreme table cannot
resolve, and the page says so (`smallest_p`). Where the arms' runs pair by seed (the same seeds in both),
the exact McNemar test on the seeds that collapsed in one arm only is shown beside it (a binomial test of
those discordant seeds at 1/2: exact, and it uses the pairing). Comparisons within strata (GSPO against GRPO at
each learning rate) are also pooled over the strata, one table per pair of first-key values; a pooled
table adds unlike risks (a high rate collapses both), so it is described, never tested.

The collapse tests are confirmatory lines of the page beside the primary score's comparisons: all of them share
one family-wise 5% (weighted Holm over their union, report/family.py), so each is held to the level it gets
there, not to 5% (issue 57: at 5% per pair, a family page's A/A rate of a false "resolved" was 0.14).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import binomtest, boschloo_exact

LEVEL = 0.05


def collapse_step(run) -> int | None:
    """The step where the run's collapse detector fired (None: it did not)."""
    info = run.status.get("collapsed") or {}
    return info.get("step", -1) if info else None


def collapsed(run) -> bool:
    return collapse_step(run) is not None


@dataclass(frozen=True)
class Count:
    label: str
    collapsed: int
    runs: int
    steps: tuple[int, ...] = ()  # the collapse steps, sorted

    def __str__(self) -> str:
        return f"{self.label} {self.collapsed}/{self.runs}"


def count(label: str, runs: list) -> Count:
    steps = sorted(s for r in runs if (s := collapse_step(r)) is not None)
    return Count(label, len(steps), len(runs), tuple(steps))


def boschloo_p(a: Count, b: Count) -> float:
    """Two-sided Boschloo exact p of `a`'s collapse share against `b`'s; 1 where no run or every run collapsed
    (a table with an empty column: nothing to test, where scipy gives NaN)."""
    if a.collapsed + b.collapsed in (0, a.runs + b.runs):
        return 1.0
    table = [[a.collapsed, b.collapsed], [a.runs - a.collapsed, b.runs - b.collapsed]]  # columns: the arms
    p = float(boschloo_exact(table, alternative="two-sided").pvalue)
    return min(p, 1.0) if not math.isnan(p) else 1.0


def mcnemar_p(arm: list, base: list) -> tuple[float, int, int] | None:
    """(exact McNemar p, seeds where only the arm collapsed, seeds where only the baseline did) where the runs
    pair by seed (one run of each seed in each arm, the same seeds); None otherwise."""
    by_a, by_b = {r.config.get("seed"): r for r in arm}, {r.config.get("seed"): r for r in base}
    if len(by_a) != len(arm) or len(by_b) != len(base) or set(by_a) != set(by_b):
        return None
    only_a = sum(collapsed(by_a[s]) and not collapsed(by_b[s]) for s in by_a)
    only_b = sum(collapsed(by_b[s]) and not collapsed(by_a[s]) for s in by_a)
    p = float(binomtest(only_a, only_a + only_b, 0.5).pvalue) if only_a + only_b else 1.0
    return p, only_a, only_b


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p Boschloo's test can give with these run counts (all of one arm collapsed, none
    of the other): 2/64 = 0.031 with 3 runs each, 2/16 = 0.125 with 2 each (only the two extreme tables)."""
    return boschloo_p(Count("a", n_a, n_a), Count("b", 0, n_b))


def p_text(p: float) -> str:
    return "p = 1" if p > 0.9995 else f"p = {p:.2g}" if p >= 0.01 else f"p = {p:.1e}"


def pair_p(arm, base) -> float:
    """Boschloo's p of a compared pair's collapse counts (1 where neither arm's runs collapsed)."""
    return boschloo_p(count(arm.label, arm.runs), count(base.label, base.runs))


def line(a: Count, b: Count, level: float = LEVEL, paired: tuple[float, int, int] | None = None) -> str:
    """`collapsed: GSPO 2/3 vs GRPO 0/3 (first at step 15 vs -; Boschloo's exact test p = 0.16, at its level
    0.01 of the page's 5%): not resolved`; `level`: the level the test is held to (its weighted Holm level over the
    page's confirmatory lines; NaN: described, not tested, after rounds that spent the page's alpha);
    `paired`: mcnemar_p's answer, said beside."""
    p = boschloo_p(a, b)
    first = f"first at step {a.steps[0] if a.steps else '-'} vs {b.steps[0] if b.steps else '-'}; "
    if paired is not None:
        first += (f"paired by seed: {paired[1]} seed(s) collapsed in {a.label} only, {paired[2]} in {b.label} only, "
                  f"exact McNemar {p_text(paired[0])}; ")
    at = f", at its level {level:.2g} of the page's {LEVEL:g}" if level < LEVEL * (1 - 1e-9) else ""
    if math.isnan(level):
        return (f"collapsed: {a} vs {b} ({first}Boschloo's exact test {p_text(p)}): described, not tested (the rounds "
                "spent the page's 5% on the primary score)")
    if p <= level:
        more = a if a.collapsed / a.runs > b.collapsed / b.runs else b
        tail = f"resolved ({more.label} collapses more often)"
    else:
        floor = smallest_p(a.runs, b.runs)
        tail = "not resolved" + (f"; with {a.runs} and {b.runs} runs no count can be at this level (all against none "
                                 f"gives {p_text(floor)})" if floor > level else "")
    return f"collapsed: {a} vs {b} ({first}Boschloo's exact test {p_text(p)}{at}): {tail}"


def pooled_line(a: Count, b: Count, over: str, values: int) -> str:
    """A pair's counts pooled over strata: described, never tested (a pooled table adds unlike risks)."""
    first = f"first at step {a.steps[0] if a.steps else '-'} vs {b.steps[0] if b.steps else '-'}"
    return (f"collapsed, pooled over {over} ({values} values): {a} vs {b} ({first}); described, not tested: a pooled "
            "table adds unlike risks (a high rate collapses both), so it is no confirmatory line")


def _first(arm) -> str:
    """The arm's first label value as the label writes it (GSPO in `GSPO lr=0.0005`)."""
    return arm.label.split(" ")[0] if arm.values else arm.label


def verdict(compared: list, arms: list, levels: list[float] | None = None) -> list[str]:
    """The verdict's collapse lines, only when some run collapsed: how many, then `verdict_lines`."""
    runs = [r for a in arms for r in a.runs]
    broke = [r for r in runs if collapsed(r)]
    if not broke:
        return []
    return [f"{len(broke)} of {len(runs)} runs collapsed (dashed lines in the curves).", *verdict_lines(compared, levels)]


def verdict_lines(compared: list, levels: list[float] | None = None) -> list[str]:
    """Each compared pair (arm, baseline) where either arm has a collapse, tested at its level (`levels`, one per
    pair: weighted Holm over the page's confirmatory lines; None: 5% each), then, where one pair of first-key values
    (GSPO vs GRPO) recurs over several strata, its pooled count, described."""
    lines = []
    levels = list(levels) if levels is not None else [LEVEL] * len(compared)
    pooled: dict[tuple[str, str], list] = {}
    for (arm, base), level in zip(compared, levels, strict=True):
        a, b = count(arm.label, arm.runs), count(base.label, base.runs)
        if a.collapsed or b.collapsed:
            lines.append(line(a, b, level, paired=mcnemar_p(arm.runs, base.runs)))
        pooled.setdefault((_first(arm), _first(base)), []).append((arm, base))
    for (fa, fb), group in pooled.items():
        a = count(fa, [r for arm, _ in group for r in arm.runs])
        b = count(fb, [r for _, base in group for r in base.runs])
        if len(group) > 1 and (a.collapsed or b.collapsed):
            over = ", ".join(k for k in list(group[0][0].values)[1:]) or "groups"
            lines.append(pooled_line(a, b, over, len(group)))
    return lines


def row(arm, base) -> dict:
    """The collapse columns of an arm's row in the sensitivity table (p against `base`, its baseline)."""
    c = count(arm.label, arm.runs)
    out = {"seeds": c.runs, "collapsed": f"{c.collapsed}/{c.runs}", "first collapse step": c.steps[0] if c.steps else None}
    out["vs"] = base.label if base is not None else None  # a baseline has none
    out["p (Boschloo)"] = p_text(boschloo_p(c, count(base.label, base.runs))).removeprefix("p = ") if base is not None else None
    return out


def pooled_lines(compared: list) -> list[str]:
    """Pooled over the strata: one line per pair of first-key values that recurs (GSPO vs GRPO over lrs)."""
    return [ln for ln in verdict_lines(compared) if ln.startswith("collapsed, pooled")]
