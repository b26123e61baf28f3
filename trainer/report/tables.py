"""The numbers of a report: one value per run per headline metric, arm tables with 95% intervals, the
differences between arms, and summary.csv (one row per run)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from gspo.trainer.report.arms import Arm
from gspo.trainer.report.runs import Run
from gspo.trainer.report.stats import diff_ci, mean_ci


@dataclass(frozen=True)
class Headline:
    metric: str
    reduce: str  # "final": the last logged value; "mean": the mean over training steps (step >= 1)
    title: str
    higher_is_better: bool | None = None  # None: no "best" (a diagnostic, not a score)


def headlines(task: str) -> list[Headline]:
    return [
        Headline(f"eval/{task}/accuracy", "final", "held-out accuracy, sampled at the training temperature (final)", True),
        Headline(f"eval/{task}/accuracy_greedy", "final", "held-out accuracy, greedy (final)", True),
        Headline("reward/mean", "mean", "training reward (mean over steps)", True),
        Headline("clip/token_frac", "mean", "clipped-token fraction (mean over steps)"),
        Headline("clip/seq_frac", "mean", "clipped-sequence fraction (mean over steps)"),
        Headline("completion/len_mean", "mean", "response length in tokens (mean over steps)"),
        Headline("time/step_s", "mean", "seconds per step (mean over steps)"),
    ]


def _series(run: Run, metric: str) -> pd.Series:
    if metric not in run.metrics:
        return pd.Series(dtype=float)
    return run.metrics.set_index("step")[metric].dropna().astype(float)


def run_value(run: Run, metric: str, reduce: str) -> float:
    s = _series(run, metric)
    if reduce == "mean":
        s = s[s.index >= 1]
    if s.empty:
        return math.nan
    return float(s.iloc[-1]) if reduce == "final" else float(s.mean()) if reduce == "mean" else float(s.max())


def arm_table(arms: list[Arm], h: Headline) -> pd.DataFrame:
    """One row per arm: mean, 95% CI and n of the runs' values."""
    rows = []
    for arm in arms:
        ci = mean_ci([run_value(r, h.metric, h.reduce) for r in arm.runs])
        rows.append({"arm": arm.label, "mean": ci.mean, "ci_low": ci.low, "ci_high": ci.high, "n": ci.n})
    return pd.DataFrame(rows)


def diff_table(arms: list[Arm], h: Headline) -> pd.DataFrame:
    """Each arm minus the first (the baseline), with Welch's 95% interval."""
    base = [run_value(r, h.metric, h.reduce) for r in arms[0].runs]
    rows = []
    for arm in arms[1:]:
        ci = diff_ci([run_value(r, h.metric, h.reduce) for r in arm.runs], base)
        rows.append({"difference": f"{arm.label} - {arms[0].label}", "mean": ci.mean, "ci_low": ci.low,
                     "ci_high": ci.high, "n": ci.n})
    return pd.DataFrame(rows, columns=["difference", "mean", "ci_low", "ci_high", "n"])


def status_table(arms: list[Arm]) -> pd.DataFrame:
    rows = [{"run": r.run_id, "arm": arm.label, "seed": r.config.get("seed"), "status": r.status.get("status", "unknown"),
             "step": r.last_step, "of steps": r.config.get("train.steps"), "wall_s": r.status.get("wall_s")}
            for arm in arms for r in arm.runs]
    return pd.DataFrame(rows)


def summary_frame(arms: list[Arm], keys: list[str], heads: list[Headline]) -> pd.DataFrame:
    """summary.csv: identifiers, the differing config keys, then final (and best, mean) per headline metric."""
    rows = []
    for arm in arms:
        for r in arm.runs:
            row = {"run_id": r.run_id, "path": str(r.path), "arm": arm.label, "seed": r.config.get("seed"),
                   "status": r.status.get("status", "unknown"), "step": r.last_step}
            row |= {k: r.config.get(k) for k in keys}
            for h in heads:
                row[f"{h.metric} final"] = run_value(r, h.metric, "final")
                if h.higher_is_better:
                    row[f"{h.metric} best"] = run_value(r, h.metric, "max")
                row[f"{h.metric} mean"] = run_value(r, h.metric, "mean")
            rows.append(row)
    return pd.DataFrame(rows)
