"""One look of a sequential compare (`gspo compare verdict.until=resolved`): the runs so far, each comparison
of the primary metric with its repeated confidence interval at the look's group-sequential level
(report/sequential.py: levels calibrated to the t at these seeds, resolved only where the exact sign-flip p is
within the level too), and the words the page says about the rounds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import gspo.vocab.metrics as M
from gspo.conf.errors import GspoError
from gspo.report.arms import group_arms, pairs
from gspo.report.runs import load_runs
from gspo.report.sequential import Decision, decide, t_levels
from gspo.report.stats import LEVEL
from gspo.report.tables import Difference, Headline, difference, headlines
from gspo.vocab.choices import SPENDING_TITLES

STOP_SETTLED, STOP_SEEDS, STOP_TIME = "settled", "seeds", "time"


@dataclass(frozen=True)
class Look:
    seeds: int  # seeds per arm so far
    level: float  # each comparison's nominal two-sided level at this look (Bonferroni share of alpha spent)
    diffs: list[Difference]
    decisions: list[Decision]

    @property
    def settled(self) -> bool:
        return bool(self.decisions) and all(d.settled for d in self.decisions)


def primary(task: str, metric: str | None) -> Headline:
    """The headline the rounds answer: `metric`, default the task's held-out accuracy."""
    metric = metric or M.EVAL.format(task, M.EVAL_ACCURACY)
    for h in headlines(task):
        if h.metric == metric:
            return h
    known = ", ".join(h.metric for h in headlines(task))
    raise GspoError(f"verdict.metric={metric}: not a headline metric of task {task} ({known})")


def look(paths: list[Path], metric: str | None, effect: float, seeds: list[int], max_seeds: int,
         kind: str, final: bool) -> Look:
    """The look after the rounds whose cumulative seeds per arm are `seeds` (this one last)."""
    runs, _ = load_runs(paths)
    arms = group_arms(runs)
    head = primary(runs[0].config.get("task.name", "arith"), metric)
    diffs = [difference(head, a, b, effect) for a, b in pairs(arms)]
    alpha = (1 - LEVEL) / max(len(diffs), 1)  # Bonferroni over the comparisons of the primary metric
    level = t_levels(seeds, max_seeds, alpha, kind, final)[-1]  # calibrated to the t statistic at these seeds
    return Look(seeds[-1], level, diffs, [decide(d.ci, level, effect, d.flip_p) for d in diffs])


def round_lines(looks: list[Look], stop: str, max_seeds: int, kind: str, effect: float) -> list[str]:
    """What the page says about the rounds: how many, why they stopped, each look's level."""
    name = SPENDING_TITLES[kind]
    why = {STOP_SETTLED: f"every comparison was resolved or shown equivalent within +-{effect:g}",
           STOP_SEEDS: f"the seed budget ({max_seeds} per arm) was spent",
           STOP_TIME: "the time budget (verdict.max_minutes) was spent"}[stop]
    m = len(looks[-1].diffs)
    lines = [f"Seeds were added in rounds until the answer was known: {len(looks)} round(s), {looks[-1].seeds} seeds per "
             f"arm (at most {max_seeds}); stopped because {why}. Group-sequential design: {name} alpha spending "
             f"(Lan & DeMets 1983) over information n / {max_seeds}"
             + (f", alpha split over {m} comparisons (Bonferroni)" if m > 1 else "")
             + "; each look's level calibrated to the t statistic at its seeds, and a look resolves a comparison only "
             "where the exact sign-flip p is within the level too (so a look of n seeds whose level is below 2/2^n "
             "claims nothing); the verdict above reads the last look's repeated confidence interval, valid after any "
             "number of looks."]
    for i, lk in enumerate(looks, 1):
        spans = [f"{d.arm.label} - {d.base.label} " + (f"{c.interval.low:+.3g} to {c.interval.high:+.3g}"
                                                       if math.isfinite(c.interval.low) and d.ci.tested
                                                       else "no claim yet")
                 for d, c in zip(lk.diffs, lk.decisions, strict=True)]
        level = (f"level {lk.level:.2g} per comparison" if lk.level > 0 else
                 f"no claim possible at this look (its level is below the sign-flip floor 2/2^{lk.seeds})")
        lines.append(f"Round {i} ({lk.seeds} seeds per arm): {level}; " + "; ".join(spans))
    return lines
