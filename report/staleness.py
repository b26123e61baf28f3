"""The staleness section (`gspo compare preset=staleness`, docs/async.md): when the arms differ in rollout.lag, each
lag's verdict on the objectives and the interaction, whether GSPO - GRPO changes with the lag.

The score is the page's held-out accuracy (final). Within a lag, arms that share a seed share the start model, the
prompts and the sampling seeds, so each difference is paired over seeds (report/stats.py paired_ci), as the Results
section's are. The interaction is estimated two ways, both over seeds that ran every lag of both objectives:
- the slope: for each seed s, the least-squares slope b_s of d_s(k) = GSPO_s(k) - GRPO_s(k) on the lag k; the
  interaction is mean_s b_s with a t interval across seeds (a change of the difference per update of lag);
- the contrast at each lag k > 0: d_s(k) - d_s(0), paired over seeds (a difference in differences).
A slope whose interval holds 0 says the seeds do not resolve a change of GSPO - GRPO with the lag; it does not say
there is none (the interval's width says how large a change is ruled out).

Beside them, per lag, how far behind the data was and how often each correction or mask acted (the means over steps
of mismatch/*, correction/* and clip/opsm_masked_frac, where logged).
"""

from __future__ import annotations

import math
import statistics

import pandas as pd

import gspo.vocab.metrics as M
from gspo.report.page import Block
from gspo.report.runs import Run
from gspo.report.sections import Page, register_section
from gspo.report.stats import Interval, mean_ci, paired_ci
from gspo.report.tables import final_value, run_value

LAG = "rollout.lag"
BASE, OTHER = "GRPO", "GSPO"
ACTIVITY = (M.LAG_BEHIND, M.MISMATCH_LOGP, M.LAG_GAP_MAX, M.LAG_TOKEN_STD, M.CORRECTION_TRUNCATED, M.CORRECTION_MASKED,
            M.OPSM_MASKED, M.CLIP_TOKEN_FRAC)


def objective(run: Run) -> str:
    """GRPO, GSPO, or either with its correction (`GSPO+tis`)."""
    name = str(run.config.get("algo.name", "?")).upper()
    kind = run.config.get("algo.correction.kind", "none")
    return name if kind in (None, "none") else f"{name}+{kind}"


def scores(runs: list[Run], metric: str) -> dict[int, dict[str, dict[int, float]]]:
    """lag -> objective -> seed -> the run's final `metric` (NaN runs left out)."""
    out: dict[int, dict[str, dict[int, float]]] = {}
    for r in runs:
        value = final_value(r, metric)
        if not math.isnan(value):
            out.setdefault(int(r.config.get(LAG) or 0), {}).setdefault(objective(r), {})[r.config.get("seed")] = value
    return out


def paired(a: dict[int, float], b: dict[int, float]) -> Interval:
    """mean over the seeds both hold of a_s - b_s, with its paired t interval."""
    seeds = sorted(set(a) & set(b))
    return paired_ci([a[s] for s in seeds], [b[s] for s in seeds])


def slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ys on xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def interaction(table: dict[int, dict[str, dict[int, float]]], a: str = OTHER, b: str = BASE
                ) -> tuple[Interval, dict[int, Interval], list]:
    """(slope, {lag: contrast with the smallest lag}, seeds used) of d_s(k) = a_s(k) - b_s(k), over the seeds that
    ran a and b at every lag; a NaN interval where fewer than two lags or seeds."""
    lags = sorted(k for k in table if a in table[k] and b in table[k])
    seeds = sorted(set.intersection(*(set(table[k][a]) & set(table[k][b]) for k in lags))) if lags else []
    d = {k: [table[k][a][s] - table[k][b][s] for s in seeds] for k in lags}
    if len(lags) < 2 or not seeds:
        return Interval(math.nan, math.nan, math.nan, 0), {}, seeds
    slopes = [slope([float(k) for k in lags], [d[k][i] for k in lags]) for i in range(len(seeds))]
    contrasts = {k: paired_ci(d[k], d[lags[0]]) for k in lags[1:]}
    return mean_ci(slopes), contrasts, seeds


def _ci(ci: Interval) -> str:
    if math.isnan(ci.mean):
        return "-"
    if math.isnan(ci.low):
        return f"{ci.mean:+.3f} (n={ci.n}, no interval)"
    return f"{ci.mean:+.3f} [{ci.low:+.3f}, {ci.high:+.3f}] (n={ci.n})"


def verdict_words(ci: Interval, what: str) -> str:
    if math.isnan(ci.low):
        return f"{what}: {_ci(ci)}: too few seeds for an interval"
    if ci.low > 0 or ci.high < 0:
        return f"{what}: {_ci(ci)}: resolved, {'above' if ci.low > 0 else 'below'} 0"
    return f"{what}: {_ci(ci)}: not resolved (the interval holds 0)"


def lag_table(table: dict[int, dict[str, dict[int, float]]]) -> pd.DataFrame:
    """Per lag: each objective's mean score and the paired differences against GRPO and against GSPO."""
    rows = []
    for k in sorted(table):
        row = {"lag": k, **{o: statistics.fmean(v.values()) for o, v in sorted(table[k].items())}}
        for o in sorted(table[k]):
            base = OTHER if o.startswith(OTHER + "+") else BASE  # a correction against its own objective uncorrected
            if o != base and base in table[k]:
                row[f"{o} - {base}"] = _ci(paired(table[k][o], table[k][base]))
        rows.append(row)
    return pd.DataFrame(rows)


def activity(runs: list[Run]) -> pd.DataFrame:
    """Per lag and objective: the mean over steps (then over seeds) of each staleness and correction metric logged."""
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault((int(r.config.get(LAG) or 0), objective(r)), []).append(r)
    rows = []
    for (k, o), rs in sorted(groups.items()):
        row = {"lag": k, "objective": o}
        for m in ACTIVITY:
            values = [v for v in (run_value(r, m, "mean") for r in rs) if not math.isnan(v)]
            if values:
                row[m] = statistics.fmean(values)
        rows.append(row)
    return pd.DataFrame(rows)


def staleness(page: Page) -> list[Block]:
    """The section; nothing unless the arms differ in rollout.lag."""
    if LAG not in page.keys:
        return []
    held = [h for h in page.heads if M.EVAL.matches(h.metric) and h.metric.endswith("/" + M.EVAL_ACCURACY)]
    if not held:
        return []
    table = scores(page.runs, held[0].metric)
    slope_ci, contrasts, seeds = interaction(table)
    lines = [verdict_words(paired(table[k][OTHER], table[k][BASE]), f"lag {k}: {OTHER} - {BASE}")
             for k in sorted(table) if OTHER in table[k] and BASE in table[k]]
    lines.append(verdict_words(slope_ci, f"interaction: the slope of {OTHER} - {BASE} per update of lag, over "
                                          f"{len(seeds)} seed(s) that ran every lag"))
    lines += [verdict_words(ci, f"interaction: ({OTHER} - {BASE}) at lag {k} minus at lag {min(table)}")
              for k, ci in contrasts.items()]
    return [Block("h2", "Staleness: the verdict at each lag"),
            Block("p", f"The score: {held[0].metric} (final). Within a lag each difference is paired over seeds (the "
                       "arms of a seed share the start model, prompts and sampling seeds), mean and 95% t interval. "
                       "The interaction: for each seed, the least-squares slope of its GSPO - GRPO difference on the "
                       "lag, then a t interval across seeds; and each lag's difference minus lag 0's, paired over seeds. "
                       "No multiplicity adjustment across lags (Results applies Holm to the page's comparisons)."),
            Block("list", items=tuple(lines)),
            Block("table", table=lag_table(table)),
            Block("p", "How far behind each batch was and how often each correction or mask acted (means over steps, "
                       "then seeds): lag/updates_behind, the sampler-trainer log-prob gap (mismatch/*), TIS truncation "
                       "and masking (correction/*), OPSM's mask, the clip."),
            Block("table", table=activity(page.runs))]


register_section("staleness", staleness, before="results")
