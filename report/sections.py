"""The report page's sections below its first screen, in order: a registry, so a new section is one function
(`Page -> list[Block]`) and one `register_section` line, in this file or any module imported before the report is
written. The first screen (title, verdict, forest, key curves, sensitivity) is write.py's."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

import gspo.vocab.metrics as M
from gspo.report.arms import Arm, differing_keys, shared_config
from gspo.report.noise import crossed_table, noise_text, paired_noise_table, split_table
from gspo.report.page import Block
from gspo.report.runs import Run
from gspo.report.tables import (
    MECHANISM,
    SCORE,
    Difference,
    Headline,
    arm_table,
    diff_table,
    status_table,
    valid_range,
)
from gspo.trainer.run.rundir import ESTIMATOR_CARD

# the settings that define an experiment, shown above the fold (what differs between arms is shown too)
DEFINING = ("model.name", "model.start", "task.name", "train.steps", "train.prompts_per_step", "train.group_size",
            "train.minibatches", "train.epochs", "train.lr", "algo.clip_low", "algo.clip_high",
            "rollout.max_new_tokens", "task.eval_size", "rollout.temperature")


@dataclass(frozen=True)
class Page:
    """What a section reads: the runs and their arms, the headline metrics and each one's differences, the keys the
    arm labels name, the command that made the runs, the notes on what was left out, the plots written."""

    runs: list[Run]
    arms: list[Arm]
    heads: list[Headline]
    diffs: dict[str, list[Difference]]
    keys: list[str]
    command: str
    notes: list[str]
    plots: list[tuple[str, Path]]


Section = Callable[[Page], list[Block]]
SECTIONS: list[tuple[str, Section]] = []


def register_section(name: str, build: Section, before: str | None = None) -> None:
    """Add a section at the end of the page, or `before` the one so named."""
    if any(n == name for n, _ in SECTIONS):
        raise ValueError(f"report section {name} is registered already")
    at = next((i for i, (n, _) in enumerate(SECTIONS) if n == before), len(SECTIONS))
    SECTIONS.insert(at, (name, build))


def sections(page: Page) -> list[Block]:
    """Every registered section of `page`, in order."""
    return [block for _, build in SECTIONS for block in build(page)]


def setup(page: Page) -> list[Block]:
    """How the runs were made: the command, the arms and what they differ in, the machines, the defining settings."""
    runs, arms, keys, command = page.runs, page.arms, page.keys, page.command
    hosts = sorted({f"{r.status.get('host', '?')} ({r.status.get('cpus', '?')} CPUs, {r.status.get('platform', '?')}, torch "
                    f"{r.status.get('versions', {}).get('torch', '?')}, device {r.config.get('device')})" for r in runs})
    shared = shared_config(runs)
    differ = differing_keys(runs)  # the label's keys and those they imply (each algorithm's clip range)
    arms_df = pd.DataFrame([{"arm": a.label, **{k: a.runs[0].config.get(k) for k in differ},
                             "seeds": ", ".join(map(str, a.seeds)), "runs": len(a.runs)} for a in arms])
    defining = {k: shared[k] for k in DEFINING if k in shared}
    rest = {k: v for k, v in shared.items() if k not in defining}
    blocks = [Block("h2", "Setup")]
    if command:
        blocks.append(Block("pre", command))
    blocks += [
        Block("p", f"{len(runs)} runs in {len(arms)} arms. Arms differ in: {', '.join(keys) or 'nothing (one arm)'}"
                   + (f" (and what follows from it: {', '.join(k for k in differ if k not in keys)})"
                      if set(differ) - set(keys) else "") + "; seeds are replicates. Machine(s): " + "; ".join(hosts) + f". Report written on {platform.node()}."),
        Block("table", table=arms_df),
        Block("p", "The settings that define the experiment (every run has these values):"),
        Block("table", table=pd.DataFrame({"key": list(defining), "value": [str(v) for v in defining.values()]})),
        Block("details", f"Every other shared setting ({len(rest)} keys)",
              table=pd.DataFrame({"key": list(rest), "value": [str(v) for v in rest.values()]})),
    ]
    return blocks


def cards(page: Page) -> list[Block]:
    """What each arm's update computes (its runs' estimator.txt, the card `gspo explain` prints): the ratio, clip
    or mask, advantage, aggregation and normaliser, pi_old's source and the correction. An arm whose seeds wrote
    different cards shows each; runs of versions before the card show none."""
    blocks = []
    for arm in page.arms:
        cards = []
        for run in arm.runs:
            path = run.path / ESTIMATOR_CARD
            text = path.read_text(errors="replace").rstrip() if path.is_file() else ""
            if text and text not in cards:
                cards.append(text)
        for i, card in enumerate(cards):
            blocks += [Block("p", f"**{arm.label}**" + (f" (card {i + 1} of {len(cards)}: its seeds differ)"
                                                          if len(cards) > 1 else "")), Block("pre", card)]
    if not blocks:
        return []
    return [Block("h2", "What each arm computes"),
            Block("p", f"Each arm's estimator as its runs wrote it ({ESTIMATOR_CARD}, the card `gspo explain` prints for "
                       "the same config)."), *blocks]


def noise(page: Page) -> list[Block]:
    """Held-out accuracy: the variance split (eval sampling vs training seed) per arm and per paired difference,
    the eval's cost, and each difference's crossed-design interval (new seeds and new problems); nothing when the
    runs did not record per-problem outcomes."""
    arms, heads, diffs = page.arms, page.heads, page.diffs
    held = [h for h in heads if M.EVAL.matches(h.metric) and h.metric.endswith("/" + M.EVAL_ACCURACY)]
    if not held:
        return []
    split = split_table(arms, held[0])
    if not len(split):
        return []
    blocks = [Block("h2", "Held-out accuracy: noise and cost"), Block("p", noise_text(arms)),
              Block("table", table=split, id="noise")]
    for table in (paired_noise_table(diffs.get(held[0].metric, [])), crossed_table(diffs.get(held[0].metric, []))):
        if len(table):
            blocks.append(Block("table", table=table))
    return blocks


def results(page: Page) -> list[Block]:
    """Every headline metric: each arm's mean and interval, and each difference with its method."""
    arms, heads, diffs = page.arms, page.heads, page.diffs
    blocks = [Block("h2", "Results"), Block("p", "Mean over seeds with a 95% Student-t interval across seeds, cut to the "
                                               "metric's valid range (how: t, or clipped where it was cut); '-' where "
                                               "one seed gives no interval. Differences: the method (paired t on the "
                                               "per-seed differences where the arms share their seeds, model, prompts "
                                               "and held-out problems; Welch's otherwise), its 95% interval, Holm's "
                                               "level and interval where several comparisons share the metric, "
                                               "Welch's interval for comparison, the minimum detectable effect (the "
                                               "smallest true difference these seeds resolve with 80% power), the "
                                               "TOST interval (differences outside it are ruled out at 5%) and the "
                                               "seeds per arm that would resolve the smallest effect of interest "
                                               "with 80% power; P(better), the share of seed pairs in which the arm "
                                               "is higher; IQM: the interquartile mean across seeds (rliable).")]
    runs = [r for a in arms for r in a.runs]
    for h in heads:
        table = arm_table(arms, h, valid_range(h.metric, runs)).rename(
            columns={"ci_low": "95% CI low", "ci_high": "95% CI high"})
        kind = {SCORE: "a score: higher is better", MECHANISM: "a mechanism: what the algorithm does, neither "
                "better nor worse"}.get(h.info.kind, "a cost")
        blocks += [Block("p", f"{h.title} [{h.metric}]: {kind}"), Block("table", table=table)]
        if diffs.get(h.metric):
            table = diff_table(diffs[h.metric]).rename(columns={"ci_low": "95% CI low", "ci_high": "95% CI high"})
            blocks.append(Block("table", table=table))
    return blocks


def runs_table(page: Page) -> list[Block]:
    """Each run's state, then what the report left out or could not use."""
    return [Block("h2", "Runs"), Block("table", table=status_table(page.arms))] + [Block("p", n) for n in page.notes]


def plots(page: Page) -> list[Block]:
    return [Block("h2", "Plots")] + [b for cap, path in page.plots for b in (Block("p", cap), Block("img", cap, image=path))]


for _name, _build in (("setup", setup), ("cards", cards), ("noise", noise), ("results", results), ("runs", runs_table),
                      ("plots", plots)):
    register_section(_name, _build)
