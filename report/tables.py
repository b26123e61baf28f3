"""The numbers of a report: one value per run per headline metric, arm tables with 95% intervals, the
differences between arms (with seeds needed), and summary.csv (one row per run).

What each metric is comes from the metric catalogue (gspo.algos.metrics): its short words, its valid range
(bands and intervals are clipped to it) and its kind: a `score` (higher is better), a `mechanism` (what the
algorithm does: clip fractions, KL, entropy, length; described, never called a win or a loss) or a `cost`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

import gspo.algos.metrics as M
from gspo.report.arms import Arm
from gspo.report.load import load_text
from gspo.report.runs import Run
from gspo.report.stats import (
    Interval,
    clip_to,
    diff_ci,
    excludes_zero,
    iqm,
    mean_ci,
    prob_improvement,
    seeds_needed,
)

SCORE, MECHANISM, COST = "score", "mechanism", "cost"
_KINDS = {M.HIGHER: SCORE, M.MECHANISM: MECHANISM, M.LOWER: COST}


@dataclass(frozen=True)
class MetricInfo:
    label: str  # short, for headlines and axes
    valid: tuple[float | None, float | None]  # the range a value can take (None: unbounded)
    kind: str  # SCORE, MECHANISM or COST


def metric_info(metric: str) -> MetricInfo:
    """What the catalogue (gspo.algos.metrics) says of `metric`: its verdict words, valid range and kind;
    eval/<task>/accuracy and accuracy_greedy by the task eval's own entries."""
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


def run_value(run: Run, metric: str, reduce: str) -> float:
    """The run's `metric` reduced: "final" (final_value), "mean" over steps >= 1, or "max"."""
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
    return notes


def arm_table(arms: list[Arm], h: Headline, valid: tuple[float | None, float | None] | None = None) -> pd.DataFrame:
    """One row per arm: mean, 95% CI (cut to `valid`, default the metric's declared range) and n of the runs'
    values; `how` says whether the interval was cut."""
    valid = valid if valid is not None else h.info.valid
    rows = []
    for arm in arms:
        ci = clip_to(mean_ci(arm_values(arm, h)), valid)
        rows.append({"arm": arm.label, "mean": ci.mean, "ci_low": ci.low, "ci_high": ci.high, "n": ci.n,
                     "how": ci.how if ci.n >= 2 else "-", "IQM": iqm(arm_values(arm, h))})
    return pd.DataFrame(rows)


def arm_values(arm: Arm, h: Headline) -> list[float]:
    return [run_value(r, h.metric, h.reduce) for r in arm.runs]


@dataclass(frozen=True)
class Difference:
    """One arm against its baseline on one headline metric."""
    head: Headline
    arm: Arm
    base: Arm
    ci: Interval  # Welch's 95% interval of mean(arm) - mean(base)
    arm_mean: float
    base_mean: float
    seeds: int | None  # seeds per arm for 80% power at the observed difference and variance
    p_better: float  # rliable's probability of improvement, P(arm's seed > base's seed)

    @property
    def ratio(self) -> float:
        return self.arm_mean / self.base_mean if self.base_mean else math.nan


def difference(h: Headline, arm: Arm, base: Arm) -> Difference:
    a, b = arm_values(arm, h), arm_values(base, h)
    lo, hi = h.info.valid
    ci = diff_ci(a, b)
    if lo is not None and hi is not None:  # a difference of two values in [lo, hi] lies in [lo - hi, hi - lo]
        ci = clip_to(ci, (lo - hi, hi - lo))
    return Difference(h, arm, base, ci, mean_ci(a).mean, mean_ci(b).mean, seeds_needed(a, b), prob_improvement(a, b))


def diff_table(arms: list[Arm], h: Headline, pairs: list[tuple[Arm, Arm]] | None = None) -> pd.DataFrame:
    """Each arm minus its baseline (default: the first arm), with Welch's 95% interval and the seeds per arm
    that would resolve a difference of this size at 80% power."""
    pairs = pairs if pairs is not None else [(arm, arms[0]) for arm in arms[1:]]
    rows = []
    for arm, base in pairs:
        d = difference(h, arm, base)
        rows.append({"difference": f"{arm.label} - {base.label}", "mean": d.ci.mean, "ci_low": d.ci.low,
                     "ci_high": d.ci.high, "n": d.ci.n, "seeds needed (80% power)": d.seeds,
                     "P(better)": d.p_better})
    return pd.DataFrame(rows, columns=["difference", "mean", "ci_low", "ci_high", "n", "seeds needed (80% power)",
                                       "P(better)"])


def status_table(arms: list[Arm]) -> pd.DataFrame:
    rows = [{"run": r.run_id, "arm": arm.label, "seed": r.config.get("seed"), "status": r.status.get("status", "unknown"),
             "step": r.last_step, "of steps": r.config.get("train.steps"), "wall_s": r.status.get("wall_s"),
             "load (max)": load_text(r)}
            for arm in arms for r in arm.runs]
    return pd.DataFrame(rows)


def summary_frame(arms: list[Arm], keys: list[str], heads: list[Headline],
                  compared: list[tuple[Arm, Arm]] = ()) -> pd.DataFrame:
    """summary.csv: identifiers, the differing config keys, whether the run collapsed, then final (and best,
    mean) per headline metric; for a run of an arm compared with a baseline (`compared`), its arm's
    difference on each headline metric (as reduced in the report), its 95% interval and the seeds per arm
    that would resolve it at 80% power (empty where it is resolved)."""
    base_of = {id(arm): base for arm, base in compared}
    rows = []
    for arm in arms:
        diffs = {h.metric: difference(h, arm, base_of[id(arm)]) for h in heads} if id(arm) in base_of else {}
        for r in arm.runs:
            row = {"run_id": r.run_id, "path": str(r.path), "arm": arm.label, "seed": r.config.get("seed"),
                   "status": r.status.get("status", "unknown"), "step": r.last_step,
                   "collapsed_step": (r.status.get("collapsed") or {}).get("step")}
            row |= {k: r.config.get(k) for k in keys}
            row["baseline"] = base_of[id(arm)].label if diffs else None
            for h in heads:
                row[f"{h.metric} final"] = run_value(r, h.metric, "final")
                if h.higher_is_better:
                    row[f"{h.metric} best"] = run_value(r, h.metric, "max")
                row[f"{h.metric} mean"] = run_value(r, h.metric, "mean")
                d = diffs.get(h.metric)
                resolved = d is not None and excludes_zero(d.ci)
                row[f"{h.metric} {h.reduce} diff"] = d.ci.mean if d else None
                row[f"{h.metric} diff ci_low"] = d.ci.low if d else None
                row[f"{h.metric} diff ci_high"] = d.ci.high if d else None
                row[f"{h.metric} seeds_needed"] = d.seeds if d and not resolved else None
            rows.append(row)
    return pd.DataFrame(rows)
