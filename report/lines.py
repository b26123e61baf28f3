"""The verdict in words: one line per comparison of the page's primary score, what the other scores and the
mechanism metrics say (exploratory, descriptive), each in words that match what was tested.

One primary score per page (held-out accuracy unless `verdict.primary` names another): its comparisons are the
confirmatory ones (Holm across them, or the group-sequential design of `verdict.until=resolved`), and only they
are called "resolved". The other scores are exploratory: testing three scores at 95% each calls at least one
"resolved" in 12-14% of A/A pages (issue 45), so an exploratory interval that excludes zero is a lead for the
next compare, not a finding. Mechanism metrics (clip fractions) are described: they say what an algorithm does.

Words follow the test: seeds that tied (se 0) are no test, whatever the interval's width; an interval cut at
both ends of the metric's range rules nothing out and is not printed; a minimum detectable effect beyond the
range says no difference in it is detectable. Beside a paired t at small n, the exact sign-flip p, whose floor
2 / 2^n says how small a p the seeds can give at all.
"""

from __future__ import annotations

import math

import gspo.vocab.metrics as M
from gspo.report.page import fmt
from gspo.report.stats import SIGN_FLIP_MAX, excludes_zero, sign_flip_floor, zero_width
from gspo.report.tables import EXPLORATORY, PAIRED, POST_HOC, PRIMARY, SCORE, Difference, Headline, arm_values

FLIP_SHOWN = 10  # the sign-flip p is shown beside the paired t up to this many seeds (its floor is 0.002 at 10)
ROLE = {PRIMARY: "primary", POST_HOC: "primary, post hoc", EXPLORATORY: "exploratory", "": "mechanism, described"}


def signed(v: float) -> str:
    return f"{v:+.3g}" if not math.isnan(v) else "-"


def ratio_text(r: float) -> str:
    """`130x`, `1,100x`, `0.0042x`: never `0x` (a zero arm has no ratio to its baseline: the caller leaves it
    out) nor `1.1e+03x`."""
    return f"{r:,.0f}x" if abs(r) >= 1000 else f"{r:.3g}x" if abs(r) >= 0.001 else f"1/{1 / r:,.0f}x"


def _one_seed(d: Difference) -> str:
    """`one seed per arm`, or the seeds each arm used when they differ (`GRPO 2 seeds, CISPO 1`)."""
    a, b = len(d.arm.runs), len(d.base.runs)
    return "one seed per arm" if a == b else f"{d.base.label} {b} seed(s), {d.arm.label} {a}"


def _method(d: Difference) -> str:
    """How the interval was made: "paired t, 3 seeds", or "Welch, unpaired: <why>"."""
    if d.method == PAIRED:
        return f"paired t, {d.ci.n} seeds"
    return f"Welch, unpaired: {d.why_unpaired}, {d.ci.n} seeds" if d.why_unpaired else f"Welch, {d.ci.n} seeds"


def p_words(p: float) -> str:
    return "-" if math.isnan(p) else f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def flip_text(d: Difference) -> str:
    """`exact sign-flip p = 0.25 (its floor at 3 seeds: 2/2^3 = 0.25)`, paired and at small n; else empty."""
    n = len(d.values[0])
    if d.method != PAIRED or not 2 <= n <= min(FLIP_SHOWN, SIGN_FLIP_MAX) or math.isnan(d.flip_p):
        return ""
    return f"exact sign-flip p = {p_words(d.flip_p)} (its floor at {n} seeds: 2/2^{n} = {p_words(sign_flip_floor(n))})"


def interval_text(d: Difference, pre: str) -> str:
    """The interval the verdict rests on (Holm's where several comparisons share the metric, the design's last
    look after rounds), its t p and the exact sign-flip p, and Welch's beside a paired one so the reader sees
    what pairing bought; an interval that rules out nothing in the metric's range is said, not printed."""
    ci = d.adjusted
    level = "95% CI"
    if d.adjusted_by != "Holm":
        level = f"group-sequential repeated {1 - d.alpha:.3g} CI of the last look"
    elif d.family:
        level = f"{d.family}: {1 - d.alpha:.2%} CI"
    elif d.m > 1:
        level = f"Holm over {d.m}: {1 - d.alpha:.1%} CI"
    if d.adjusted_by != "Holm" and d.alpha <= 0:
        text = (f"{pre}{_method(d)}: no claim possible at the last look (its group-sequential level is below the "
                f"sign-flip floor 2/2^{len(d.values[0])})")
    elif ci.uninformative:
        text = f"{pre}{_method(d)}: no informative interval (its {level} covers every possible difference)"
    else:
        text = f"{pre}{_method(d)}: {level} {signed(ci.low)} to {signed(ci.high)}"
    text += f", t p = {p_words(d.ci.p)}" if d.ci.tested else ""
    text += f"; {flip}" if (flip := flip_text(d)) else ""
    if d.method == PAIRED and d.welch is not None and not math.isnan(d.welch.low) and not ci.uninformative and d.alpha > 0:
        w = d.welch.at(1 - d.alpha)
        text += f"; Welch {signed(w.low)} to {signed(w.high)}"
    return text


def _span(d: Difference) -> float:
    """The widest a difference of this metric can be (hi - lo of its valid range; inf: unbounded)."""
    lo, hi = d.head.info.valid
    return math.inf if lo is None or hi is None else hi - lo


def _unresolved(d: Difference) -> str:
    """Not resolved: no claim, and why where the interval excludes zero all the same; what these seeds could have
    resolved (MDE); whether the difference is shown equivalent within the effect of interest (the TOST interval
    printed only where it answers that: a 90% interval excluding zero beside "no claim" reads as a loss); and the
    seeds the effect of interest needs (planned at the sd's upper bound)."""
    mde = d.mde
    if math.isfinite(mde) and mde > _span(d):
        parts = [f"no difference within the metric's range is detectable at these seeds (MDE {mde:.3g})"]
    else:
        parts = [f"MDE {mde:.3g}" if math.isfinite(mde) else "no MDE at these seeds"]
    if not math.isnan(d.effect):
        tost, shown = d.tost
        if shown:
            return (f"equivalent within +-{d.effect:g}: the difference lies within {signed(tost.low)} to "
                    f"{signed(tost.high)} (TOST)")
        if not tost.uninformative:
            parts.insert(0, f"not shown equivalent within +-{d.effect:g} (TOST)")
        point = f"; ~{d.seeds_point} at the sd measured" if d.seeds_point else ""
        parts.append(f"~{d.seeds} seeds/arm for {d.effect:g} (80% power at the sd's 80% upper bound{point})"
                     if d.seeds else f"no seed count resolves {d.effect:g}")
    return "no claim (not resolved" + (f": {why}" if (why := refused(d)) else "") + "); " + "; ".join(parts)


def refused(d: Difference) -> str:
    """Why a line whose interval excludes zero makes no claim (empty where it does not exclude zero): its exact
    sign-flip p is above its level, at the floor 2/2^n or above it."""
    if not (d.ci.tested and excludes_zero(d.adjusted)) or not d.gate_refused:
        return ""
    n = len(d.values[0])
    why = (f"at {n} seeds the exact sign-flip p cannot go below 2/2^{n} = {p_words(sign_flip_floor(n))}"
           if sign_flip_floor(n) > d.alpha else f"the exact sign-flip p is {p_words(d.flip_p)}")
    least = math.ceil(math.log2(2 / d.alpha) - 1e-9)  # the fewest seeds whose floor 2/2^n is within the level
    return (f"the interval excludes zero, but {why}, above its level {p_words(d.alpha)}; a claim by the t alone would "
            f"rest on the normal shape of {n} differences: {least} seeds per arm is the fewest that can resolve at "
            "this level")


def _tie(d: Difference, what: str, pre: str, left: str) -> str:
    n = d.ci.n
    flip = f"; {flip}" if (flip := flip_text(d)) else ""
    if d.method == PAIRED and d.ci.mean != 0:
        return (f"{what} ({pre}paired, {n} seeds{left}{flip}): every seed gave the same difference, so the t has no "
                f"spread to test: no claim; {n} seeds agreeing is not certainty, run more seeds")
    return (f"{what} ({pre}{n} seeds{left}): the seeds tied exactly, so there is no test: no claim; a tie of {n} "
            "seeds is not certainty, run more seeds")


def _resolved(d: Difference) -> str:
    side = "higher" if d.ci.mean > 0 else "lower"
    if d.role == EXPLORATORY:
        return (f"the interval excludes zero ({d.arm.label} {side}); exploratory: not the primary score, and not "
                "adjusted across the page's scores, so a lead for a compare with this as its primary, not a finding")
    if d.role == POST_HOC:
        return (f"the interval excludes zero ({d.arm.label} {side}); post hoc: this primary score was chosen after "
                "the runs, not the one the experiment's plan registered, so a lead for a compare that registers it, "
                "not a finding")
    if d.head.info.kind != SCORE:
        return f"{d.arm.label} {side} (the interval excludes zero; a mechanism: described, not a score)"
    return f"resolved ({d.arm.label} {side})"


ESTIMAND_KEYS = ("train.lr",)  # settings the estimand names (the sign of GSPO - GRPO changes with the rate)


def estimand(d: Difference) -> str:
    """What a confirmatory line estimates, in words: `for these 128 held-out problems, from <model.start>,
    train.lr=0.0001, step 20` (new seeds of the same runs; the noise section's new-problems interval is the other
    claim). Steps: the final eval's (a range where a run ended early: its last eval, intention-to-treat), the steps
    a mean runs over, or the curve's span for an area."""
    runs = d.arm.runs + d.base.runs
    cfg = runs[0].config
    held = d.head.metric.split(":")[-1].startswith("eval/")
    what = f"these {cfg.get('task.eval_size', '?')} held-out problems" if held else "this task's training prompts"
    start = cfg.get("model.start") or f"the {cfg.get('model.name', '?')} cold start"
    parts = [what, f"from {start}"]
    parts += [f"{k}={vals.pop()}" for k in ESTIMAND_KEYS if len(vals := {str(r.config.get(k)) for r in runs}) == 1
              and "None" not in vals]
    ends = sorted({r.final_steps.get(d.head.metric.split(":")[-1], r.last_step) for r in runs})
    span = str(ends[0]) if len(ends) == 1 else f"{ends[0]}-{ends[-1]}"
    parts.append({"final": f"step {span}", "mean": f"mean over steps 1-{span}",
                  "auc": f"area under its curve to step {span}"}.get(d.head.reduce, f"step {span}"))
    return "for " + ", ".join(parts)


def verdict_line(d: Difference) -> str:
    """One comparison in plain words: what the arm's value is against its baseline, at which setting, by which
    method, how sure, and (not resolved) the minimum detectable effect, the equivalence bound and the seeds
    the effect of interest needs."""
    label, ci, n = d.head.info.label, d.ci, d.ci.n
    role = f" [{ROLE[d.role]}]" if d.role or d.head.info.kind != SCORE else ""
    at = f" {estimand(d)}" if d.role in (PRIMARY, POST_HOC) else f" {d.setting}" if d.setting else ""
    if d.head.info.kind == SCORE:
        what, pre = f"{label}{role}: {d.arm.label} - {d.base.label} = {signed(ci.mean)}{at}", ""
    else:
        ratio = f"{ratio_text(d.ratio)}; " if d.base_mean and d.arm_mean and not math.isnan(d.ratio) else ""
        what = f"{label}{role}: {d.arm.label} {fmt(d.arm_mean)} vs {d.base.label} {fmt(d.base_mean)}{at}"
        pre = f"{ratio}difference {signed(ci.mean)}, "
    runs = len(d.arm.runs) + len(d.base.runs)
    missing = sum(math.isnan(v) for v in arm_values(d.arm, d.head) + arm_values(d.base, d.head))
    left = f"; {missing} of {runs} runs have no {d.head.reduce} value and are left out" if missing else ""
    if d.dropped:
        left = (f"; seed {', '.join(map(str, d.dropped))}'s pair left out: a run of it has no {d.head.reduce} value "
                "(the other seeds stay paired)")
    left += f"; {note}" if (note := like_for_like(d)) else ""
    if n == 0:
        return f"{what} (no seed of one arm has a {d.head.reduce} value: no comparison{left})"
    if n < 2:
        return f"{what} ({pre}{_one_seed(d)}: no interval, no claim either way{left})"
    if zero_width(ci) or not ci.tested:
        return _tie(d, what, pre, left)
    small = "; only 2 seeds, so the interval is wide and rests on one pair" if n == 2 else ""
    tail = _resolved(d) if d.resolved else _unresolved(d)
    return f"{what} ({interval_text(d, pre)}{left}): {tail}{small}"


def like_for_like(d: Difference) -> str:
    """Why a difference of the training reward is not like for like: an arm with dynamic sampling
    (rollout.dynamic_sampling, DAPO) averages its reward over the groups it kept, all-right and all-wrong groups
    dropped, while the other averages over every group. Empty where it is like for like."""
    if d.head.metric != M.REWARD_MEAN:
        return ""
    dyn = [a.label for a in (d.arm, d.base) if any(r.config.get("rollout.dynamic_sampling") for r in a.runs)]
    if len(dyn) != 1:
        return ""
    return (f"not like for like: {dyn[0]} samples dynamically, so its training reward is over the groups it kept "
            "(groups whose rewards were all equal dropped)")


def summary_line(h: Headline, diffs: list[Difference]) -> str:
    """A non-primary metric of a page with many comparisons in one line: each arm's difference to its baseline
    with its interval, marked where the interval excludes zero, with the role in words."""
    role = ROLE[diffs[0].role] if diffs else ""
    items = []
    for d in diffs:
        adj = d.adjusted
        span = "no interval" if not d.ci.tested or math.isnan(adj.low) else f"{signed(adj.low)} to {signed(adj.high)}"
        mark = ", excludes 0" if d.resolved else ""
        items.append(f"{d.arm.label} - {d.base.label} {signed(d.ci.mean)} ({span}{mark})")
    level = f"Holm over {diffs[0].m} within the metric" if diffs and diffs[0].m > 1 else "95%"
    notes = sorted({n for d in diffs if (n := like_for_like(d))})
    words = {PRIMARY: "", POST_HOC: "post hoc: chosen after the runs, a lead, not a finding",
             EXPLORATORY: "exploratory: not adjusted across scores, a lead, not a finding",
             "": "described, not a score"}[diffs[0].role if diffs else ""]
    return (f"{h.info.label} [{role}] ({h.reduce}, {level}; {words}): " + "; ".join(items)
            + (f"; {'; '.join(notes)}" if notes else ""))


def also_excluding(heads: list[Headline], chosen: list[Headline], diffs: dict) -> list[str]:
    """Every difference of a reported metric the verdict's chosen metrics left out whose interval excludes
    zero (DAPO's training reward must not hide in a table), one line per metric, in the words of its role."""
    lines = []
    for h in (h for h in heads if h not in chosen):
        found = [d for d in diffs[h.metric] if d.resolved]
        if found:
            role = ROLE[found[0].role]
            lines.append(f"also excluding zero, {h.info.label} [{role}] ({h.reduce}): " + "; ".join(
                f"{d.arm.label} - {d.base.label} {signed(d.ci.mean)} ({interval_text(d, '')})" for d in found))
    return lines
