"""The numbers of a report: one value per run per headline metric, arm tables with 95% intervals, the
differences between arms (paired by seed where the design pairs, Welch's otherwise; Holm across the
comparisons of one metric; the minimum detectable effect, the equivalence bound and the seeds for the
smallest effect of interest), and summary.csv (one row per run).

What each metric is comes from the metric catalogue (gspo.vocab.metrics): its short words, its valid range
(bands and intervals are clipped to it) and its kind: a `score` (higher is better), a `mechanism` (what the
algorithm does: clip fractions, KL, entropy, length; described, never called a win or a loss) or a `cost`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd
from scipy.integrate import trapezoid

import gspo.vocab.metrics as M
from gspo.conf.errors import GspoError
from gspo.report.arms import Arm
from gspo.report.comparable import ended_early
from gspo.report.heldout import final_outcomes
from gspo.report.load import load_text
from gspo.report.pairing import pair_runs
from gspo.report.power import equivalence, mde, seeds_for
from gspo.report.runs import Run
from gspo.report.stats import (
    LEVEL,
    Interval,
    clip_to,
    diff_ci,
    excludes_zero,
    holm,
    iqm,
    mean_ci,
    paired_ci,
    prob_improvement,
    sign_flip_p,
)

SCORE, MECHANISM, COST = "score", "mechanism", "cost"
_KINDS = {M.HIGHER: SCORE, M.MECHANISM: MECHANISM, M.LOWER: COST}


@dataclass(frozen=True)
class MetricInfo:
    label: str  # short, for headlines and axes
    valid: tuple[float | None, float | None]  # the range a value can take (None: unbounded)
    kind: str  # SCORE, MECHANISM or COST


AUC = "auc:"  # verdict.primary=auc:<metric>: the area under a held-out metric's curve over training, per run


def metric_info(metric: str) -> MetricInfo:
    """What the catalogue (gspo.vocab.metrics) says of `metric`: its verdict words, valid range and kind;
    eval/<task>/accuracy and accuracy_greedy by the task eval's own entries; `auc:<metric>` as its metric's,
    named as an area."""
    if metric.startswith(AUC):
        base = metric_info(metric.removeprefix(AUC))
        return MetricInfo(f"{base.label} (area under the curve)", base.valid, base.kind)
    m = M.lookup(metric)
    stat = metric.rsplit("/", 1)[-1]
    if M.EVAL.matches(metric) and stat in M.EVAL_STATS:
        m = M.EVAL_STATS[stat]
    if m is None:
        return MetricInfo(metric, (None, None), MECHANISM)
    return MetricInfo(m.short, m.valid, _KINDS[m.kind])


def valid_range(metric: str, runs: list[Run]) -> tuple[float | None, float | None]:
    """The metric's declared range (the training reward's [0, 1] unless a run shapes it with an overlong
    penalty), widened to any value the runs actually logged."""
    lo, hi = metric_info(metric).valid
    if metric == M.REWARD_MEAN and not any(r.config.get("rollout.overlong_buffer") for r in runs):
        lo = 0.0  # a task reward lies in [0, 1]: only DAPO's overlong penalty (rollout.overlong_buffer) goes below
    values = [float(v) for r in runs if metric in r.metrics for v in r.metrics[metric].dropna()]
    if values and lo is not None:
        lo = min(lo, min(values))
    if values and hi is not None:
        hi = max(hi, max(values))
    return lo, hi


@dataclass(frozen=True)
class Headline:
    metric: str
    reduce: str  # "final": the last logged value; "mean": the mean over training steps (step >= 1)
    title: str
    higher_is_better: bool | None = None  # None: no "best" (a diagnostic, not a score)

    @property
    def info(self) -> MetricInfo:
        return metric_info(self.metric)


def headlines(task: str) -> list[Headline]:
    acc, greedy = M.EVAL.format(task, M.EVAL_ACCURACY), M.EVAL.format(task, M.EVAL_ACCURACY_GREEDY)
    over_steps = [M.REWARD_MEAN, M.CLIP_TOKEN_FRAC, M.CLIP_SEQ_FRAC, M.LEN_MEAN, M.TIME_STEP]
    return [
        Headline(acc, "final", "held-out accuracy, sampled at the training temperature (final)", True),
        Headline(greedy, "final", "held-out accuracy, greedy (final)", True),
        *[Headline(name, "mean", f"{M.lookup(name).label} (mean over steps)",
                   True if M.lookup(name).kind == M.HIGHER else None) for name in over_steps],
    ]


def _series(run: Run, metric: str) -> pd.Series:
    if metric not in run.metrics:
        return pd.Series(dtype=float)
    return run.metrics.set_index("step")[metric].dropna().astype(float)


def auc_headline(metric: str) -> Headline | None:
    """`auc:eval/<task>/accuracy`: the area under that held-out curve as a score of its own (None: not that form;
    a metric that is no held-out eval is one line)."""
    if not metric.startswith(AUC):
        return None
    base = metric.removeprefix(AUC)
    if not M.EVAL.matches(base) or metric_info(base).kind != SCORE:
        raise GspoError(f"primary score {metric}: an area under the curve is of a held-out score "
                        f"(auc:eval/<task>/accuracy), not of {base}")
    return Headline(metric, "auc", f"area under the {metric_info(base).label} curve (its mean over training, "
                                   "trapezoid over the evals' steps)", True)


def curve_area(run: Run, metric: str) -> float:
    """The area under `run`'s curve of `metric` over its logged steps (trapezoid), divided by the steps it spans:
    the mean held-out accuracy over training, in the metric's units. A run that ended early (a stop rule, a failure)
    carries its last eval to its configured end (intention-to-treat, as its final value is read); NaN below two
    evals."""
    s = _series(run, metric)
    steps, values = [float(x) for x in s.index], [float(v) for v in s.values]
    if len(steps) < 2:
        return math.nan
    end = float(run.config.get("train.steps") or steps[-1]) if ended_early(run) else steps[-1]
    if end > steps[-1]:
        steps, values = steps + [end], values + [values[-1]]
    return float(trapezoid(values, steps) / (steps[-1] - steps[0]))


def run_value(run: Run, metric: str, reduce: str) -> float:
    """The run's `metric` reduced: "final" (final_value), "mean" over steps >= 1, or "max"; an `auc:` metric is
    its curve's area (curve_area) whatever the reduction."""
    if metric.startswith(AUC):
        return curve_area(run, metric.removeprefix(AUC))
    if reduce == "final":
        return final_value(run, metric)
    s = _series(run, metric)
    if reduce == "mean":
        s = s[s.index >= 1]
    if s.empty:
        return math.nan
    return float(s.iloc[-1]) if reduce == "final" else float(s.mean()) if reduce == "mean" else float(s.max())


def final_value(run: Run, metric: str) -> float:
    """The value at the last step that logged `metric`; NaN (missing) when that value is null, NaN or no number:
    never an earlier value standing in for it."""
    step = run.final_steps.get(metric)
    if step is None or metric not in run.metrics:
        return math.nan
    at = run.metrics.loc[run.metrics["step"] == step, metric].dropna()
    return float(at.iloc[-1]) if len(at) else math.nan


def final_step(run: Run, metric: str) -> int | None:
    """The step a run's final `metric` is from (None: never logged)."""
    return run.final_steps.get(metric)


def final_notes(runs: list[Run], heads: list[Headline]) -> list[str]:
    """What a report must say of finals that are not at a run's last step (a run stopped early, by
    train.stop_on_collapse before it evaluated there), or that are missing (logged as null, NaN or no number)."""
    notes = []
    for r in runs:
        for h in [h for h in heads if h.reduce == "final"]:
            step = final_step(r, h.metric)
            if step is not None and step < r.last_step and r.status.get("stopped"):  # no eval where it stopped
                notes.append(f"{r.run_id}: its final {h.metric} is from step {step}, not its last step {r.last_step}"
                             f" (stopped early: {r.status['stopped']}); the tables use the step-{step} value")
            elif step is not None and math.isnan(final_value(r, h.metric)):
                notes.append(f"{r.run_id}: its final {h.metric} (step {step}) is missing (null, NaN or not a number); "
                             "the tables leave the run out of that metric, never using an earlier value")
        if r.not_numbers:
            notes.append(f"{r.run_id}: {r.not_numbers} logged value(s) in metrics.jsonl are no finite number (NaN, "
                         "Infinity or text): shown as missing")
        if r.duplicate_steps:
            notes.append(f"{r.run_id}: metrics.jsonl logs step(s) {', '.join(map(str, r.duplicate_steps[:10]))} more "
                         "than once (a copied or edited log): the last row of each is used")
    return notes


def arm_table(arms: list[Arm], h: Headline, valid: tuple[float | None, float | None] | None = None) -> pd.DataFrame:
    """One row per arm: mean, 95% CI (cut to `valid`, default the metric's declared range) and n of the runs'
    values; `how` says whether the interval was cut."""
    valid = valid if valid is not None else h.info.valid
    rows = []
    for arm in arms:
        ci = informative(clip_to(mean_ci(arm_values(arm, h)), valid))
        rows.append({"arm": arm.label, "mean": ci.mean, "ci_low": ci.low, "ci_high": ci.high, "n": ci.n,
                     "how": ci.how if ci.n >= 2 else "-", "IQM": iqm(arm_values(arm, h))})
    return pd.DataFrame(rows)


def informative(ci: Interval) -> Interval:
    """No bounds (NaN) where the interval was cut at both ends of the range: "95% CI 0 to 1" says nothing."""
    if not ci.uninformative:
        return ci
    return Interval(ci.mean, math.nan, math.nan, ci.n, "covers the range")


def arm_values(arm: Arm, h: Headline) -> list[float]:
    return [run_value(r, h.metric, h.reduce) for r in arm.runs]


PAIRED, WELCH = "paired t", "Welch"
PRIMARY, EXPLORATORY = "primary", "exploratory"
POST_HOC = "post hoc"  # a primary chosen at report time, not the one the experiment's plan registered: never a finding


@dataclass(frozen=True)
class Difference:
    """One arm against its baseline on one headline metric."""
    head: Headline
    arm: Arm
    base: Arm
    ci: Interval  # the 95% interval of mean(arm) - mean(base) by `method`
    arm_mean: float
    base_mean: float
    seeds: int | None  # seeds per arm for 80% power at the smallest effect of interest (scores only)
    p_better: float  # rliable's probability of improvement, P(arm's seed > base's seed)
    method: str = WELCH  # PAIRED (per-seed differences) or WELCH (unpaired)
    why_unpaired: str = ""  # why the pairing did not hold, in words (empty when paired)
    welch: Interval | None = None  # Welch's interval of the same difference (for the widths paired vs unpaired)
    alpha: float = 1 - LEVEL  # the level its test is held to after Holm across the report's comparisons of the metric
    m: int = 1  # comparisons of this metric in the report
    effect: float = math.nan  # the smallest effect of interest (scores; NaN: none)
    values: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # (arm, base) per run, in pair order if paired
    adjusted_by: str = "Holm"  # what set `alpha`: Holm, or a group-sequential design's last look
    role: str = ""  # PRIMARY (the page's one confirmatory score), POST_HOC, EXPLORATORY (another score), "" (no score)
    setting: str = ""  # the shared setting the difference holds at, in words ("at train.lr=0.0001"); empty: none
    family: str = ""  # the page's confirmatory family its level comes from, in words (report/family.py); empty: none
    dropped: tuple = ()  # the seeds whose pair is left out (a run of it has no value); the other seeds stay paired

    @property
    def flip_p(self) -> float:
        """The exact sign-flip p of the per-seed differences (paired only; NaN otherwise or above 16 seeds)."""
        return sign_flip_p(*self.values) if self.method == PAIRED else math.nan

    @property
    def seeds_point(self) -> int | None:
        """Seeds per arm for the effect of interest at the sd as measured (`seeds` plans at its upper bound)."""
        if math.isnan(self.effect):
            return None
        return seeds_for(self.effect, self.ci, self.method == PAIRED, self.alpha, upper=None)

    @property
    def ratio(self) -> float:
        return self.arm_mean / self.base_mean if self.base_mean else math.nan

    @property
    def adjusted(self) -> Interval:
        """The interval at the level Holm (or a sequential design) tests it at; the 95% one when unadjusted."""
        return self.ci.at(1 - self.alpha) if self.alpha != 1 - LEVEL else self.ci

    @property
    def resolved(self) -> bool:
        """The adjusted interval excludes zero, from a test (seeds that tied are none); a confirmatory line (the
        page's primary comparisons, report/family.py, or the rounds' looks) also needs its exact sign-flip p within
        the level (`gate_refused`)."""
        return self.ci.tested and excludes_zero(self.adjusted) and not self.gate_refused

    @property
    def confirmatory(self) -> bool:
        """A line of the page's confirmatory family (its level from report/family.py) or of the rounds' design; a
        primary chosen after the runs (post hoc) is held to the family's level but stays a lead, never a finding."""
        return (bool(self.family) and self.role != POST_HOC) or self.adjusted_by != "Holm"

    @property
    def gate_refused(self) -> bool:
        """A confirmatory paired line whose exact sign-flip p is above its level: the t alone would rest on the
        normal shape of a few differences (three nearly equal ones give a huge t whatever their sign pattern's
        chance: a collapse-like A/A family page called a false "resolved" on 11% of pages by the t alone)."""
        return self.confirmatory and not math.isnan(self.flip_p) and self.flip_p > self.alpha * (1 + 1e-9)

    @property
    def whisker(self) -> Interval:
        """The interval drawn as the forest plot's thin whisker: the one the verdict tests, at its level (Holm's
        in the page's family, Holm's within the metric, or the group-sequential repeated interval), so the whisker
        excludes zero exactly where the line's interval does (a Bonferroni alpha / m whisker could cross zero where
        Holm resolved, issue 57 D10). Not a simultaneous family: Holm's levels cover all m at once 0.926 of the
        time (docs/verdicts.md)."""
        return self.adjusted

    @property
    def mde(self) -> float:
        return mde(self.ci, self.alpha)

    @property
    def tost(self) -> tuple[Interval, bool]:
        return equivalence(self.ci, self.effect, self.alpha) if not math.isnan(self.effect) else (self.ci, False)


def _pairing(h: Headline, arm: Arm, base: Arm):
    def problems(run: Run) -> str | None:
        out = final_outcomes(run, h.metric)
        return out.problems if out is not None else None

    return pair_runs(arm.runs, base.runs, lambda r: run_value(r, h.metric, h.reduce), problems, (arm.label, base.label))


def difference(h: Headline, arm: Arm, base: Arm, effect: float = math.nan) -> Difference:
    """`arm` - `base` on `h`: paired by seed where the runs' records show the design pairs, else Welch's; the
    seeds per arm that would resolve `effect` (a score's smallest effect of interest) with 80% power."""
    pairing = _pairing(h, arm, base)
    if pairing.paired:
        a, b = [run_value(x, h.metric, h.reduce) for x, _ in pairing.pairs], \
            [run_value(y, h.metric, h.reduce) for _, y in pairing.pairs]
        ci, method = paired_ci(a, b), PAIRED
    else:
        a, b = arm_values(arm, h), arm_values(base, h)
        ci, method = diff_ci(a, b), WELCH
    welch = diff_ci(a, b)
    lo, hi = h.info.valid
    if lo is not None and hi is not None:  # a difference of two values in [lo, hi] lies in [lo - hi, hi - lo]
        ci, welch = clip_to(ci, (lo - hi, hi - lo)), clip_to(welch, (lo - hi, hi - lo))
    effect = effect if h.info.kind == SCORE else math.nan
    seeds = seeds_for(effect, ci, method == PAIRED) if not math.isnan(effect) else None
    return Difference(h, arm, base, ci, mean_ci(a).mean, mean_ci(b).mean, seeds,
                      prob_improvement(a, b, paired=method == PAIRED), method, pairing.why, welch, effect=effect,
                      values=(tuple(a), tuple(b)), dropped=pairing.dropped)


def adjust(diffs: list[Difference]) -> list[Difference]:
    """Holm across the comparisons of one metric: each difference held to the level Holm tests it at (stats.holm);
    its seeds for the effect of interest recomputed at that level. One comparison: unchanged."""
    if len(diffs) < 2:
        return diffs
    levels = holm([d.ci.p for d in diffs])
    return [replace(d, alpha=lvl, m=len(diffs),
                    seeds=seeds_for(d.effect, d.ci, d.method == PAIRED, lvl) if not math.isnan(d.effect) else None)
            for d, lvl in zip(diffs, levels, strict=True)]


def diff_table(diffs: list[Difference]) -> pd.DataFrame:
    """Each arm minus its baseline: the method, the 95% interval (and Holm's where several comparisons share the
    metric), Welch's for comparison, the minimum detectable effect at 80% power, the TOST interval and the seeds
    per arm for the smallest effect of interest."""
    rows = []
    for d in diffs:
        adj, (tost, _) = d.adjusted, d.tost
        moved = d.alpha != 1 - LEVEL  # held to Holm's level, or a sequential design's last look
        rows.append({"difference": f"{d.arm.label} - {d.base.label}", "method": d.method, "mean": d.ci.mean,
                     "ci_low": d.ci.low, "ci_high": d.ci.high, "n": d.ci.n,
                     "adjusted level": f"{1 - d.alpha:.2%} ({d.adjusted_by})" if moved else "-",
                     "adjusted low": adj.low if moved else None, "adjusted high": adj.high if moved else None,
                     "Welch low": d.welch.low if d.welch else None, "Welch high": d.welch.high if d.welch else None,
                     "MDE (80% power)": d.mde, "TOST low": tost.low if d.tost[0] is not d.ci else None,
                     "TOST high": tost.high if d.tost[0] is not d.ci else None,
                     f"seeds for {fmt_effect(d.effect)} (sd's 80% bound)": d.seeds,
                     "p (t)": d.ci.p, "sign-flip p": d.flip_p,
                     "P(better)" + (" by seed" if d.method == PAIRED else ""): d.p_better})
    return pd.DataFrame(rows)


def fmt_effect(effect: float) -> str:
    return "the effect of interest" if math.isnan(effect) else f"+-{effect:g}"


def status_table(arms: list[Arm]) -> pd.DataFrame:
    """One row per run: its state, and where it ran (the Slurm jobs, for runs made on a cluster); wall_s sums the
    attempts that ended, and a run with attempts that died (killed, the machine lost) shows their seconds apart, in
    `dead attempts' s`."""
    slurm = any(r.status.get("slurm_jobs") for arm in arms for r in arm.runs)
    dead = any(r.status.get("dead_s") for arm in arms for r in arm.runs)
    rows = [{"run": r.run_id, "arm": arm.label, "seed": r.config.get("seed"), "status": r.status.get("status", "unknown"),
             "step": r.last_step, "of steps": r.config.get("train.steps"), "wall_s": r.status.get("wall_s"),
             **({"dead attempts' s": r.status.get("dead_s")} if dead else {}),
             "load (max)": load_text(r)} | ({"slurm job": " ".join(r.status.get("slurm_jobs") or []) or "-",
                                             "host": r.status.get("host")} if slurm else {})
            for arm in arms for r in arm.runs]
    return pd.DataFrame(rows)


def summary_frame(arms: list[Arm], keys: list[str], heads: list[Headline],
                  diffs: dict[str, list[Difference]] | None = None) -> pd.DataFrame:
    """summary.csv: identifiers, the differing config keys, whether the run collapsed, then final (and best,
    mean) per headline metric; for a run of an arm compared with a baseline (`diffs`, by metric), its arm's
    difference on each headline metric (as reduced in the report), its method, its 95% interval (Holm-adjusted
    where several comparisons share the metric), the minimum detectable effect and the seeds per arm for the
    smallest effect of interest (empty where it is resolved)."""
    by_arm = {(id(d.arm), h): d for h, ds in (diffs or {}).items() for d in ds}
    rows = []
    for arm in arms:
        base = next((d.base.label for (a, _), d in by_arm.items() if a == id(arm)), None)
        for r in arm.runs:
            row = {"run_id": r.run_id, "path": str(r.path), "arm": arm.label, "seed": r.config.get("seed"),
                   "status": r.status.get("status", "unknown"), "step": r.last_step,
                   "collapsed_step": (r.status.get("collapsed") or {}).get("step")}
            row |= {k: r.config.get(k) for k in keys}
            row["baseline"] = base
            for h in heads:
                row[f"{h.metric} final"] = run_value(r, h.metric, "final")
                if h.higher_is_better:
                    row[f"{h.metric} best"] = run_value(r, h.metric, "max")
                row[f"{h.metric} mean"] = run_value(r, h.metric, "mean")
                d = by_arm.get((id(arm), h.metric))
                adj = d.adjusted if d else None
                row[f"{h.metric} {h.reduce} diff"] = d.ci.mean if d else None
                row[f"{h.metric} diff method"] = d.method if d else None
                row[f"{h.metric} diff ci_low"] = adj.low if d else None
                row[f"{h.metric} diff ci_high"] = adj.high if d else None
                row[f"{h.metric} diff mde"] = d.mde if d else None
                row[f"{h.metric} seeds_needed"] = d.seeds if d and not d.resolved else None
            rows.append(row)
    return pd.DataFrame(rows)
