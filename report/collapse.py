"""Collapse as a verdict: how many runs of each arm collapsed, tested with Fisher's exact test.

A run collapsed when its collapse detector fired (run.json `collapsed: {step, reason}`, trainer/run/collapse.py).
For an arm against its baseline the 2x2 table is (collapsed, not collapsed) x (arm, baseline); Fisher's exact
test (scipy.stats.fisher_exact, two-sided: the sum of the probabilities of every table with the same margins
that is no more likely than the one observed, under the hypergeometric law) gives p; resolved = p < 0.05.
With few runs the test cannot resolve anything: 3/3 against 0/3, the most extreme table of three runs per
arm, gives p = 0.10, and the page says so (`smallest_p`). Comparisons within strata (GSPO against GRPO at
each learning rate) are also pooled over the strata, one table per pair of first-key values; a pooled
table adds unlike risks (a high rate collapses both), so it is a summary, not a stratified test.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.stats import fisher_exact

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


def fisher_p(a: Count, b: Count) -> float:
    """Two-sided Fisher's exact p of `a`'s collapse share against `b`'s."""
    table = [[a.collapsed, a.runs - a.collapsed], [b.collapsed, b.runs - b.collapsed]]
    return float(fisher_exact(table, alternative="two-sided").pvalue)


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p Fisher's test can give with these run counts (all of one arm collapsed, none
    of the other): 0.10 with 3 runs each, below 0.05 from 3 and 4 runs (0.029) or 2 and 5 (0.048) up."""
    return fisher_p(Count("a", n_a, n_a), Count("b", 0, n_b))


def p_text(p: float) -> str:
    return "p = 1" if p > 0.9995 else f"p = {p:.2g}" if p >= 0.01 else f"p = {p:.1e}"


def line(a: Count, b: Count, prefix: str = "collapsed") -> str:
    """`collapsed: GSPO 2/3 vs GRPO 0/3 (first at step 15 vs -; Fisher's exact test p = 0.4): not resolved`."""
    p = fisher_p(a, b)
    first = f"first at step {a.steps[0] if a.steps else '-'} vs {b.steps[0] if b.steps else '-'}; "
    if p < LEVEL:
        more = a if a.collapsed / a.runs > b.collapsed / b.runs else b
        tail = f"resolved ({more.label} collapses more often)"
    else:
        floor = smallest_p(a.runs, b.runs)
        tail = "not resolved" + (f"; with {a.runs} and {b.runs} runs no count can be (all against none gives "
                                 f"{p_text(floor)})" if floor >= LEVEL else "")
    return f"{prefix}: {a} vs {b} ({first}Fisher's exact test {p_text(p)}): {tail}"


def _first(arm) -> str:
    """The arm's first label value as the label writes it (GSPO in `GSPO lr=0.0005`)."""
    return arm.label.split(" ")[0] if arm.values else arm.label


def verdict(compared: list, arms: list) -> list[str]:
    """The verdict's collapse lines, only when some run collapsed: how many, then `verdict_lines`."""
    runs = [r for a in arms for r in a.runs]
    broke = [r for r in runs if collapsed(r)]
    if not broke:
        return []
    return [f"{len(broke)} of {len(runs)} runs collapsed (dashed lines in the curves).", *verdict_lines(compared)]


def verdict_lines(compared: list) -> list[str]:
    """Each compared pair (arm, baseline) where either arm has a collapse, then, where one pair of first-key
    values (GSPO vs GRPO) recurs over several strata, its pooled count."""
    lines = []
    pooled: dict[tuple[str, str], list] = {}
    for arm, base in compared:
        a, b = count(arm.label, arm.runs), count(base.label, base.runs)
        if a.collapsed or b.collapsed:
            lines.append(line(a, b))
        pooled.setdefault((_first(arm), _first(base)), []).append((arm, base))
    for (fa, fb), group in pooled.items():
        a = count(fa, [r for arm, _ in group for r in arm.runs])
        b = count(fb, [r for _, base in group for r in base.runs])
        if len(group) > 1 and (a.collapsed or b.collapsed):
            over = ", ".join(k for k in list(group[0][0].values)[1:]) or "groups"
            lines.append(line(a, b, prefix=f"collapsed, pooled over {over} ({len(group)} values; a summary: unlike "
                                           "risks added)"))
    return lines


def row(arm, base) -> dict:
    """The collapse columns of an arm's row in the sensitivity table (p against `base`, its baseline)."""
    c = count(arm.label, arm.runs)
    out = {"seeds": c.runs, "collapsed": f"{c.collapsed}/{c.runs}", "first collapse step": c.steps[0] if c.steps else None}
    out["vs"] = base.label if base is not None else None  # a baseline has none
    out["p (Fisher)"] = p_text(fisher_p(c, count(base.label, base.runs))).removeprefix("p = ") if base is not None else None
    return out


def pooled_lines(compared: list) -> list[str]:
    """Pooled over the strata: one line per pair of first-key values that recurs (GSPO vs GRPO over lrs)."""
    return [ln for ln in verdict_lines(compared) if ln.startswith("collapsed, pooled")]
