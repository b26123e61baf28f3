"""The rounds of `gspo compare verdict.until=resolved`: the seeds of each round (`plan_rounds`), a look after each
(the runs so far, each comparison of the primary metric with its repeated confidence interval at the look's
group-sequential level: report/sequential.py, levels calibrated on the rule as it decides, resolved only where the
t p and the sign-flip p are both within the level; the runs read at the common step, as the page reads them), the
stopping rules, and the words the page says about the rounds.

A stopping rule is one `register_stop(StopRule(...))`: its name (sequential.json's `stop`), its words on the page,
and when it fires: `last` before a look (this look is the design's last, so it spends what is left of alpha: a
budget of seeds or time) or `known` after it (the answer is in: every comparison settled). The rules are asked in
the order registered; the first to fire ends the rounds."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gspo.vocab.metrics as M
from gspo.conf.errors import GspoError
from gspo.conf.schema import VerdictConfig
from gspo.report.arms import group_arms, once_per_seed, pairs
from gspo.report.comparable import at_common_step
from gspo.report.runs import load_runs
from gspo.report.sequential import Decision, decide, plan_levels
from gspo.report.stats import LEVEL, SIGN_FLIP_MAX, sign_flip_error
from gspo.report.tables import PAIRED, SCORE, Difference, Headline, difference, headlines
from gspo.study.plan import Plan
from gspo.vocab.choices import SPENDING_TITLES


@dataclass(frozen=True)
class Progress:
    """Where the rounds stand before a look: round `round` of `rounds` planned, `seconds` since the first began."""

    round: int
    rounds: int
    seconds: float
    verdict: VerdictConfig


@dataclass(frozen=True)
class StopRule:
    """`last`: before a look, whether it is the design's last (a budget spent: it spends the rest of alpha);
    `known`: after a look, whether the answer is in; `why(max_seeds, effect)`: the page's words for the stop."""

    name: str
    why: Callable[[int, float], str]
    last: Callable[[Progress], bool] | None = None
    known: Callable[[Look], bool] | None = None


STOPS: dict[str, StopRule] = {}


def register_stop(rule: StopRule) -> None:
    """Add a stopping rule, asked after those registered before it."""
    if rule.name in STOPS:
        raise ValueError(f"stopping rule {rule.name} is registered already")
    STOPS[rule.name] = rule


register_stop(StopRule("settled", lambda _, effect: f"every comparison was resolved or shown equivalent within +-{effect:g}",
                       known=lambda lk: lk.settled))
register_stop(StopRule("time", lambda *_: "the time budget (verdict.max_minutes) was spent",
                       last=lambda p: p.verdict.max_minutes is not None and p.seconds >= 60 * p.verdict.max_minutes))
register_stop(StopRule("seeds", lambda max_seeds, _: f"the seed budget ({max_seeds} per arm) was spent",
                       last=lambda p: p.round == p.rounds))


@dataclass(frozen=True)
class Look:
    seeds: int  # seeds per arm so far
    level: float  # each paired comparison's nominal two-sided level at this look (the rule: t and sign-flip gate)
    diffs: list[Difference]
    decisions: list[Decision]
    unpaired: float = 0.0  # the level of a comparison the pairing does not hold for (the t alone)
    spent: float = 0.0  # the A/A probability the paired rule has spent by this look, per comparison (simulated)
    error: float = 0.0  # its Monte Carlo error

    @property
    def settled(self) -> bool:
        return bool(self.decisions) and all(d.settled for d in self.decisions)


def primary(task: str, metric: str | None) -> Headline:
    """The score the verdict and the rounds answer: `metric` (verdict.primary), default the task's held-out
    accuracy; one that is no score of the task's page (a mechanism such as a clip fraction stays descriptive) is
    one line, said before any run starts."""
    metric = metric or M.EVAL.format(task, M.EVAL_ACCURACY)
    scores = [h for h in headlines(task) if h.info.kind == SCORE]
    for h in scores:
        if h.metric == metric:
            return h
    raise GspoError(f"verdict.primary={metric}: not a score of task {task}'s page "
                    f"({', '.join(h.metric for h in scores)})")


def look(paths: list[Path], metric: str | None, effect: float, seeds: list[int], max_seeds: int,
         kind: str, final: bool) -> Look:
    """The look after the rounds whose cumulative seeds per arm are `seeds` (this one last)."""
    runs, _ = load_runs(paths)
    runs, _ = at_common_step(once_per_seed(runs)[0])  # the step the page compares them at
    arms = group_arms(runs)
    head = primary(runs[0].config.get("task.name", "arith"), metric)
    diffs = [difference(head, a, b, effect) for a, b in pairs(arms)]
    alpha = (1 - LEVEL) / max(len(diffs), 1)  # Bonferroni over the comparisons of the primary metric
    plan = plan_levels(seeds, max_seeds, alpha, kind, final)  # calibrated on the rule as it decides
    paired, unpaired = plan.paired[-1], plan.unpaired[-1]
    decisions = [decide(d.ci, paired if d.method == PAIRED else unpaired, effect, d.flip_p) for d in diffs]
    return Look(seeds[-1], paired, diffs, decisions, unpaired, plan.spent[-1], plan.error)


def _span(d: Difference, c: Decision) -> str:
    """One comparison at one look: its repeated interval, and why no claim where it excludes zero (the gate)."""
    span = f"{d.arm.label} - {d.base.label} " + (f"{c.interval.low:+.3g} to {c.interval.high:+.3g}"
                                                 if math.isfinite(c.interval.low) and d.ci.tested else "no claim yet")
    if d.method != PAIRED:
        span += f" (unpaired: the t alone, level {c.level:.3g})"
    if c.refused:
        n = d.ci.n
        mc = (f", Monte Carlo over {2**SIGN_FLIP_MAX - 1:,} seeded sign patterns, se {sign_flip_error(n, c.flip_p):.1g}"
              if n > SIGN_FLIP_MAX else "")
        span += (f" (the interval excludes zero, but the sign-flip p of its {n} seeds is {c.flip_p:.3g}{mc}, above the "
                 f"look's level {c.level:.3g}: no claim)")
    return span


def round_lines(looks: list[Look], stop: str, max_seeds: int, kind: str, effect: float) -> list[str]:
    """What the page says about the rounds: how many, why they stopped, each look's level."""
    name = SPENDING_TITLES[kind]
    why = STOPS[stop].why(max_seeds, effect)
    last = looks[-1]
    m = len(last.diffs)
    lines = [f"Seeds were added in rounds until the answer was known: {len(looks)} round(s), {last.seeds} seeds per "
             f"arm (at most {max_seeds}); stopped because {why}. Group-sequential design: {name} alpha spending "
             f"(Lan & DeMets 1983) over information n / {max_seeds}"
             + (f", alpha split over {m} comparisons (Bonferroni)" if m > 1 else "")
             + "; each look's level calibrated on the rule as it decides (a comparison resolves where its t p and its "
             "sign-flip p are both within the level), simulated under A/A: the false-positive probability spent by "
             f"the last look {last.spent:.4f} +- {last.error:.4f} (Monte Carlo) of {(1 - LEVEL) / max(m, 1):.3g}"
             "; a look whose smallest claim would spend more than its share claims nothing, and its share carries on; "
             "the verdict above reads the last look's repeated confidence interval with the same gate."]
    for i, lk in enumerate(looks, 1):
        level = (f"level {lk.level:.3g} per comparison" if lk.level > 0 else
                 f"no claim possible at this look (the smallest claim at {lk.seeds} seeds would spend more than the "
                 "look's share of alpha)")
        lines.append(f"Round {i} ({lk.seeds} seeds per arm): {level}; "
                     + "; ".join(_span(d, c) for d, c in zip(lk.diffs, lk.decisions, strict=True)))
    return lines


def plan_rounds(plan: Plan, verdict: VerdictConfig) -> list[list[int]]:
    """The seeds of each round: the plan's seeds first, then `round_seeds` new ones a round up to `max_seeds` per
    arm. Refuses a single arm, a seed budget below the first round, non-integer seeds, a search sweeper (no fixed
    list of jobs)."""
    if plan.jobs is None:
        raise GspoError("verdict.until=resolved needs Hydra's basic sweeper (a fixed list of jobs), not a search sweeper")
    if len(plan.arms) < 2:
        raise GspoError("verdict.until=resolved compares arms, but this sweep has one arm: sweep algo= (or another "
                        "key) over at least two values")
    first = sorted(plan.int_seeds())
    if verdict.max_seeds < len(first):
        raise GspoError(f"verdict.max_seeds={verdict.max_seeds} is below the {len(first)} seeds per arm of the first "
                        f"round ({','.join(map(str, first))}): raise it, or give fewer seeds")
    rounds, nxt = [first], max(first) + 1
    while sum(map(len, rounds)) < verdict.max_seeds:
        size = min(verdict.round_seeds, verdict.max_seeds - sum(map(len, rounds)))
        rounds.append(list(range(nxt, nxt + size)))
        nxt += size
    return rounds


@dataclass(frozen=True)
class Outcome:
    looks: list[Look]
    dirs: list[Path]  # each round's sweep folder
    seeds: list[int]  # seeds per arm after each round looked at
    stop: str  # the stopping rule that ended the rounds (STOPS)


def run_rounds(rounds: list[list[int]], verdict: VerdictConfig, run_round: Callable[[int, list[int]], Path],
               look_at: Callable[[list[Path], list[int], bool], Look], said: Callable[[str], None] = lambda _: None,
               clock: Callable[[], float] = time.time) -> Outcome:
    """Each round's sweep (`run_round(i, seeds)` -> its folder), then a look (`look_at(folders, seeds per arm so far,
    final)`), until a stopping rule fires: a `last` rule makes the look final (it spends what is left of alpha), a
    `known` rule ends the rounds after it. The last planned round is always final (the `seeds` rule)."""
    start, looks, dirs, seen = clock(), [], [], []
    for i, seeds in enumerate(rounds, 1):
        dirs.append(run_round(i, seeds))
        seen.append(sum(map(len, rounds[:i])))
        progress = Progress(i, len(rounds), clock() - start, verdict)
        budget = next((r.name for r in STOPS.values() if r.last is not None and r.last(progress)), None)
        looks.append(look_at(dirs, seen, budget is not None))
        said(f"round {i}: {seen[-1]} seeds per arm, level {looks[-1].level:.2g}: "
             + ("settled" if looks[-1].settled else "not settled"))
        known = next((r.name for r in STOPS.values() if r.known is not None and r.known(looks[-1])), None)
        if known or budget:
            return Outcome(looks, dirs, seen, known or budget)
    return Outcome(looks, dirs, seen, "seeds")
