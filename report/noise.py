"""The page's held-out section (where the noise of held-out accuracy comes from, and what an eval costs) and,
with more than two arms, the "which objective" table.

The split per arm is report/heldout.decompose: the variance of the final held-out accuracy across seeds, the
part the eval's own sampling explains (k samples on n problems), and the rest, training seed. Beside it the
two-level paired bootstrap of each difference (seeds, then problems within seeds): the interval that also
generalises over new eval problems. The eval's cost is the runs' time/eval_s (the held-out task eval at the
final step, sampled and greedy) against their mean training step.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

import gspo.vocab.metrics as M
from gspo.report.arms import Arm
from gspo.report.heldout import decompose, final_outcomes, paired_bootstrap
from gspo.report.stats import clip_to, mean_ci
from gspo.report.tables import PAIRED, Difference, Headline, arm_values, informative, run_value

EVAL_S = M.TIME_PHASE.format("eval")


def _cost(arms: list[Arm]) -> tuple[float, float]:
    """(mean seconds of one held-out eval, mean seconds of one training step) over the runs."""
    evals = [v for a in arms for r in a.runs if EVAL_S in r.metrics for v in r.metrics[EVAL_S].dropna()]
    steps = [run_value(r, M.TIME_STEP, "mean") for a in arms for r in a.runs]
    steps = [s for s in steps if not math.isnan(s)]
    return (float(np.mean(evals)) if evals else math.nan, float(np.mean(steps)) if steps else math.nan)


def split_table(arms: list[Arm], head: Headline) -> pd.DataFrame:
    """Per arm: k, problems, seeds, the sd of the final accuracy across seeds, its eval-sampling part and its
    training-seed part, the eval's share of the variance, and the eval part at 4x the samples."""
    rows = []
    for arm in arms:
        outs = [o for r in arm.runs if (o := final_outcomes(r, head.metric)) is not None]
        split = decompose(outs) if len(outs) == len(arm.runs) else None
        if split is None:
            continue
        rows.append({"arm": arm.label, "k": split.k, "problems": split.n_problems, "seeds": split.n_seeds,
                     "sd across seeds": math.sqrt(split.total),
                     "eval sampling sd" + (" (at most)" if split.bound else ""): math.sqrt(split.eval),
                     "training seed sd": math.sqrt(split.seed), "eval share of variance": split.eval_share,
                     f"eval sampling sd at k={4 * split.k}": math.sqrt(split.eval / 4)})
    return pd.DataFrame(rows)


def bootstrap_table(diffs: list[Difference]) -> pd.DataFrame:
    """Each paired difference of held-out accuracy with its two-level paired bootstrap interval."""
    rows = []
    for d in diffs:
        if d.method != PAIRED:
            continue
        arm_by_seed = {r.config.get("seed"): r for r in d.arm.runs}
        pairs = [(arm_by_seed[r.config.get("seed")], r) for r in d.base.runs]
        outs = [(final_outcomes(a, d.head.metric), final_outcomes(b, d.head.metric)) for a, b in pairs]
        if any(a is None or b is None for a, b in outs):
            continue
        mean, low, high = paired_bootstrap(np.stack([a.per_problem for a, _ in outs]),
                                           np.stack([b.per_problem for _, b in outs]))
        rows.append({"difference": f"{d.arm.label} - {d.base.label}", "mean": mean, "paired t low": d.ci.low,
                     "paired t high": d.ci.high, "bootstrap low": low, "bootstrap high": high})
    return pd.DataFrame(rows)


def noise_text(arms: list[Arm]) -> str:
    eval_s, step_s = _cost(arms)
    cost = (f"One held-out eval took {eval_s:.3g} s on average (sampled and greedy), against {step_s:.3g} s per "
            "training step." if not math.isnan(eval_s) else "The runs did not record their eval's cost (time/eval_s).")
    return ("Where the noise of final held-out accuracy comes from: its variance across the seeds of an arm is the "
            "eval's own sampling (k samples on each problem; from one sample only an upper bound is known) plus "
            "training seed (the rest). More samples per problem (train.eval_k) shrink the first as 1/k at the cost "
            f"of generation only; more seeds shrink both. {cost} The bootstrap table resamples seeds, then problems "
            "within seeds: its interval also covers new eval problems, where the paired t covers new seeds on "
            "these problems.")


def which_objective(arms: list[Arm], head: Headline, diffs: list[Difference], mechanism: str) -> pd.DataFrame:
    """Each arm's estimate of `head` with its interval and the mechanism figure (`mechanism`, mean over steps),
    best first; arms whose difference to the baseline is not resolved make no claim against it (the verdict's
    words: not resolved is not a tie)."""
    by_arm = {id(d.arm): d for d in diffs}
    rows = []
    for arm in arms:
        ci = informative(clip_to(mean_ci(arm_values(arm, head)), head.info.valid))
        mech = mean_ci([run_value(r, mechanism, "mean") for r in arm.runs]).mean
        d = by_arm.get(id(arm))
        said = "baseline" if d is None else (f"{'above' if d.ci.mean > 0 else 'below'} {d.base.label}" if d.resolved
                                             else f"no claim vs {d.base.label}")
        rows.append({"arm": arm.label, "mean": ci.mean, "95% CI low": ci.low, "95% CI high": ci.high,
                     "vs baseline": said, M.lookup(mechanism).label if M.lookup(mechanism) else mechanism: mech})
    return pd.DataFrame(rows).sort_values("mean", ascending=False, na_position="last").reset_index(drop=True)
