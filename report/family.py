"""A page's confirmatory lines under one family-wise level.

A page makes two kinds of confirmatory claim: its primary score's comparisons (report/lines.py) and its collapse
tests (report/collapse.py: Boschloo's exact test of each compared pair's collapse counts). Each at 5% made a
family page (six comparisons against GRPO) call at least one false "resolved" on 14% of A/A pages and the lr page
on 11-17% (issue 57). So every confirmatory line of a page shares one family-wise alpha = 5%: weighted Holm over
their union (Holm 1979; stats.holm), COLLAPSE_SHARE of alpha set aside for the collapse tests and the rest for the
comparisons, split equally within each kind; a rejected line passes its share on, so once every comparison is
resolved the collapse tests get the whole 5%, and the other way round. A collapse test counts whether or not a run
collapsed (its weight is fixed before the data: where nothing collapsed its p is 1 and it is never rejected), so a
page where nothing collapsed holds its comparisons to 4% in all. The pooled collapse line (over strata) is
described, never tested.

A comparison's p in the family is the larger of its t p and its exact sign-flip p (`gated_p`; paired, up to 16
seeds), as the rounds' looks decide: collapse-like outcomes gave three nearly equal differences a huge t, and the t
alone called a false "resolved" on 11-13% of A/A family and lr pages at 3 seeds (perf/aa_pages.py). No comparison of
n seeds resolves below the floor 2/2^n, and a line whose interval excludes zero all the same says why
(report/lines.py `refused`).

After rounds of seeds (verdict.until=resolved) the group-sequential design has spent the page's whole 5% on the
primary score's comparisons (its looks spend 0.049-0.050, docs/verdicts.md), so the collapse tests are described
(their exact p said), not tested: the split is stated on the page.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gspo.report.collapse import pair_p
from gspo.report.power import seeds_for
from gspo.report.stats import COLLAPSE_SHARE, LEVEL, holm
from gspo.report.tables import PAIRED, Difference

ALPHA = 1 - LEVEL


def weights(comparisons: int, tests: int) -> list[float]:
    """The union's Holm weights: the comparisons' 1 - COLLAPSE_SHARE split over them, the collapse tests'
    COLLAPSE_SHARE over them (one kind alone takes the whole)."""
    if not tests or not comparisons:
        return [1.0 / max(comparisons + tests, 1)] * (comparisons + tests)
    return [(1 - COLLAPSE_SHARE) / comparisons] * comparisons + [COLLAPSE_SHARE / tests] * tests


def words(comparisons: int, tests: int) -> str:
    """The family beside a line's level: `Holm over the page's 2 confirmatory lines`."""
    return f"Holm over the page's {comparisons + tests} confirmatory line{'s' if comparisons + tests > 1 else ''}"


def page_words(comparisons: int, tests: int, sequential: bool = False) -> str:
    """How the page holds its confirmatory lines, said once above the verdict."""
    if sequential:
        return (f"The rounds spent the page's 5% on the primary score's comparisons (the design's levels), so its {tests} "
                "collapse test(s) are described, not tested.")
    if not tests or not comparisons:
        return f"Its {comparisons + tests} confirmatory line(s) share one family-wise 5% by Holm."
    return (f"Its {comparisons + tests} confirmatory lines share one family-wise 5%: weighted Holm over the {comparisons} "
            f"comparison(s) of the primary score ({1 - COLLAPSE_SHARE:.0%} of alpha, split equally) and the {tests} "
            f"collapse test(s) ({COLLAPSE_SHARE:.0%}), a resolved line passing its share on; a collapse test counts "
            "whether or not a run collapsed, and a count pooled over strata is described, not tested.")


def gated_p(d: Difference) -> float:
    """A comparison's p in the family: the paired t's, or its exact sign-flip p where that is larger (a paired
    line up to 16 seeds): resolved needs both within the level. The larger of two valid p-values is valid, and
    the sign-flip one is exact whatever the differences' shape (collapse-like outcomes: the t alone called a
    false "resolved" on 11% of A/A family pages at 3 seeds, perf/aa_pages.py)."""
    return d.ci.p if math.isnan(d.flip_p) or math.isnan(d.ci.p) else max(d.ci.p, d.flip_p)


def confirmatory(diffs: list[Difference], compared: list, sequential: bool = False
                 ) -> tuple[list[Difference], list[float]]:
    """(the primary score's comparisons held to their levels in the page's family, each collapse test's level, one
    per compared pair). `sequential`: the comparisons keep the design's levels, which spent the whole alpha; the
    collapse tests' levels are NaN (described, not tested)."""
    ps = [pair_p(arm, base) for arm, base in compared]
    if sequential:
        return diffs, [math.nan] * len(ps)
    levels = holm([gated_p(d) for d in diffs] + ps, ALPHA, weights(len(diffs), len(ps)))
    said = words(len(diffs), len(ps))
    held = [replace(d, alpha=lvl, m=len(diffs), family=said,
                    seeds=seeds_for(d.effect, d.ci, d.method == PAIRED, lvl) if not math.isnan(d.effect) else None)
            for d, lvl in zip(diffs, levels, strict=False)]
    return held, levels[len(diffs):]
