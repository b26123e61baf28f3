"""The page's held-out section (where the noise of held-out accuracy comes from, and what an eval costs) and,
with more than two arms, the "which objective" table.

The split per arm is report/heldout.decompose: the variance of the final held-out accuracy across seeds, the
part the eval's own sampling explains (k samples on n problems), and the rest, training seed. The split of each
paired difference is report/heldout.paired_split: the verdict's interval is about d_s = acc_a - acc_b, whose eval
noise the arms' shared random numbers partly cancel, so its table says how much of the interval's width is eval
sampling (what a larger train.final_eval_k buys) and how much training seed (what only seeds buy). Beside the
paired t, which covers new seeds on these problems, the crossed-design interval (heldout.crossed_interval) covers
new seeds and new problems. The eval's cost is the runs' time/eval_s (the held-out task eval, sampled and
greedy): the intermediate evals' and the final one's apart, against their mean training step.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

import gspo.vocab.metrics as M
from gspo.report.arms import Arm
from gspo.report.heldout import Outcomes, decompose, final_outcomes, new_problems_interval, paired_split
from gspo.report.load import as_recorded, load_words
from gspo.report.stats import Interval, clip_to, mean_ci
from gspo.report.tables import PAIRED, Difference, Headline, arm_values, informative, run_value

EVAL_S = M.TIME_PHASE.format("eval")


def _cost(arms: list[Arm]) -> tuple[float, float, float]:
    """(mean seconds of an intermediate held-out eval, of the final one, of one training step) over the runs, as
    they recorded them (also a loaded run's, which noise_text says with its load)."""
    middle, final = [], []
    runs = [as_recorded(r) for a in arms for r in a.runs]
    for r in (r for r in runs if EVAL_S in r.metrics):
        times = list(r.metrics[EVAL_S].dropna())
        final += times[-1:]
        middle += times[:-1]
    steps = [run_value(r, M.TIME_STEP, "mean") for r in runs]
    steps = [s for s in steps if not math.isnan(s)]
    return (float(np.mean(middle)) if middle else math.nan, float(np.mean(final)) if final else math.nan,
            float(np.mean(steps)) if steps else math.nan)


def split_row(label: str, outs: list[Outcomes]) -> dict | None:
    """One arm's row of the split table from its runs' final outcomes (None below 2 runs)."""
    split = decompose(outs)
    if split is None:
        return None
    return {"arm": label, "k": split.k, "problems": split.n_problems, "seeds": split.n_seeds,
            "sd across seeds": math.sqrt(split.total),
            "eval sampling sd" + (" (at most)" if split.bound else ""): math.sqrt(split.eval),
            "training seed sd": math.sqrt(split.seed), "eval share of variance": split.eval_share,
            f"eval sampling sd at k={4 * split.k}": math.sqrt(split.eval / 4)}


def split_table(arms: list[Arm], head: Headline) -> pd.DataFrame:
    """Per arm: k, problems, seeds, the sd of the final accuracy across seeds, its eval-sampling part and its
    training-seed part, the eval's share of the variance, and the eval part at 4x the samples."""
    rows = []
    for arm in arms:
        outs = [o for r in arm.runs if (o := final_outcomes(r, head.metric)) is not None]
        row = split_row(arm.label, outs) if len(outs) == len(arm.runs) else None
        rows += [row] if row else []
    return pd.DataFrame(rows)


def _final_pairs(d: Difference) -> list[tuple[Outcomes, Outcomes]] | None:
    """(arm, baseline) final held-out outcomes of each seed of a paired difference; None where one is missing."""
    if d.method != PAIRED:
        return None
    arm_by_seed = {r.config.get("seed"): r for r in d.arm.runs}
    pairs = [(final_outcomes(arm_by_seed[r.config.get("seed")], d.head.metric), final_outcomes(r, d.head.metric))
             for r in d.base.runs if r.config.get("seed") in arm_by_seed]
    return None if any(a is None or b is None for a, b in pairs) else pairs


def paired_row(label: str, pairs: list[tuple[Outcomes, Outcomes]], ci: Interval) -> dict | None:
    """One paired difference's row of the paired noise table: `pairs` its (arm, baseline) final outcomes by seed,
    `ci` its paired t 95% interval (None: no split)."""
    split = paired_split(pairs) if pairs else None
    if split is None:
        return None
    draws = "shared" if split.shared else "as independent" + (" (at most)" if split.bound else "")
    return {"difference": label, "k": split.k, "seeds": split.n_seeds,
            "sd across seeds": math.sqrt(split.total), "eval draws": draws,
            "eval sampling sd": math.sqrt(split.eval), "eval sd, draws independent": math.sqrt(split.independent),
            "training seed sd": math.sqrt(split.seed), "eval share of variance": split.eval_share,
            "95% CI half-width": (ci.high - ci.low) / 2 if ci.how == "t" else math.nan,
            "half-width, exact eval": split.half_width(0.0), f"half-width at k={4 * split.k}": split.half_width(0.25)}


def paired_noise_table(diffs: list[Difference]) -> pd.DataFrame:
    """Per paired difference: the sd of d_s across seeds, its eval-sampling part (the arms' shared draws where the
    runs recorded each sample, else as if independent) and its training-seed part, the eval's share of the
    variance, and the paired t interval's half-width as measured, with an exact eval and at 4x the samples."""
    rows = [paired_row(f"{d.arm.label} - {d.base.label}", _final_pairs(d), d.ci) for d in diffs]
    return pd.DataFrame([r for r in rows if r])


def crossed_row(label: str, pairs: list[tuple[Outcomes, Outcomes]], ci: Interval) -> dict | None:
    """One paired difference's row of the new-problems table (None where the problems differ in number)."""
    if not pairs or len({len(a.correct) for pair in pairs for a in pair}) != 1:
        return None
    found = new_problems_interval(np.stack([a.per_problem for a, _ in pairs]), np.stack([b.per_problem for _, b in pairs]))
    if found is None:
        return None
    new, how = found
    return {"difference": label, "mean": ci.mean, "paired t low": ci.low, "paired t high": ci.high,
            "new problems low": new.low if new.tested else math.nan,
            "new problems high": new.high if new.tested else math.nan, "from": how, "df": new.df}


def crossed_table(diffs: list[Difference]) -> pd.DataFrame:
    """Each paired difference of held-out accuracy with its paired t interval (new seeds, these problems) and its
    interval over new problems too (heldout.new_problems_interval: the crossed design's, or the paired t's where
    that is wider), saying which and at what degrees of freedom."""
    rows = [crossed_row(f"{d.arm.label} - {d.base.label}", _final_pairs(d), d.ci) for d in diffs]
    return pd.DataFrame([r for r in rows if r])


def noise_text(arms: list[Arm]) -> str:
    middle, final, step_s = _cost(arms)
    before = (f"An intermediate held-out eval took {middle:.3g} s on average and the final one"
              if not math.isnan(middle) else "The final held-out eval")
    load = load_words([r for a in arms for r in a.runs])
    cost = (f"{before} (its k in the tables) {final:.3g} s (sampled and greedy), against {step_s:.3g} s per "
            "training step" + (f", {load}." if load else ".") if not math.isnan(final)
            else f"The eval's cost is not shown: the runs recorded no time for it ({EVAL_S}).")
    return ("Where the noise of final held-out accuracy comes from: its variance across the seeds of an arm is the "
            "eval's own sampling (k samples on each problem; from one sample only an upper bound is known) plus "
            "training seed (the rest). More samples per problem at the final eval (train.final_eval_k) shrink the "
            f"first as 1/k at the cost of generation only; more seeds shrink both. {cost} The verdict is about the "
            "paired difference, so its split is given too: runs of one seed draw each eval sample from the same "
            "random numbers, which cancel part of the difference's eval noise (eval draws 'shared', from the "
            "per-sample rewards the runs recorded; 'as independent' where they did not), and the half-widths say "
            "how much of its interval a larger eval could remove (exact eval) and what the rest, training seed, "
            "leaves. The paired t covers new seeds on these problems; the new-problems interval also covers new "
            "problems: the crossed design's (seeds and problems as crossed random effects, with the arm x problem "
            "effect a new problem set draws anew), or the paired t's where that is wider ('from'). Every run's "
            "per-problem outcomes are in this page's folder (outcomes.csv.gz): `python -m gspo.report.recompute "
            "<page folder>` recomputes these tables from them alone.")


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
