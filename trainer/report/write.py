"""`gspo report`: read runs, group them into arms, write plots, report.md, report.html and summary.csv.

Everything is checked before anything is written: a bad path, no runs, or runs on different tasks or
models stop the report with one error and leave the output folder untouched.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gspo.trainer.report.arms import Arm, group_arms, label_keys, shared_config
from gspo.trainer.report.page import Block, fmt, to_html, to_markdown
from gspo.trainer.report.plots import write_plots
from gspo.trainer.report.runs import Run, load_runs, unread_steps
from gspo.trainer.report.stats import Interval, excludes_zero
from gspo.trainer.report.tables import Headline, arm_table, diff_table, headlines, status_table, summary_frame
from gspo.trainer.report.tracker import log_report, report_wandb_mode
from gspo.trainer.rundir import STATUS_UNREADABLE


@dataclass
class Report:
    out_dir: Path
    headline: pd.DataFrame  # the first headline metric's arm table (what `gspo compare` prints)
    headline_title: str
    files: list[Path]
    notes: list[str]  # what the report left out or could not use, also written into the report
    wandb_note: str | None = None  # where the report's offline W&B run is and the `wandb sync` command


def write_report(paths: list, out_dir: Path, command: str = "", wandb: str = "runs", progress: bool = False) -> Report:
    """`wandb`: a W&B mode, or "runs" to follow the runs' own logger.wandb (see tracker.py); `progress`: a
    bar over the plots, the long part."""
    runs, notes = load_runs(paths)
    arms = group_arms(runs)
    task = runs[0].config.get("task.name", "arith")
    heads = [h for h in headlines(task) if any(h.metric in r.metrics for r in runs)]
    keys = label_keys(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(arms, task, out_dir, progress)
    notes = _notes(runs, notes)
    blocks = _setup(runs, arms, keys, command) + _results(arms, heads)
    blocks += [Block("h2", "Runs"), Block("table", table=status_table(arms))] + [Block("p", n) for n in notes]
    blocks += [Block("h2", "Plots")] + [b for cap, path in plots for b in (Block("p", cap), Block("img", cap, image=path))]
    (out_dir / "report.md").write_text(to_markdown(blocks, out_dir))
    (out_dir / "report.html").write_text(to_html(blocks, "gspo report"))
    summary = summary_frame(arms, keys, heads)
    summary.to_csv(out_dir / "summary.csv", index=False)
    mode = report_wandb_mode(wandb, runs)
    wandb_note = log_report(mode, runs, out_dir, plots, summary) if mode != "disabled" else None
    files = [out_dir / "report.md", out_dir / "report.html", out_dir / "summary.csv", *(p for _, p in plots)]
    first = heads[0] if heads else None
    table = arm_table(arms, first) if first else pd.DataFrame()
    return Report(out_dir, table, first.title if first else "", files, notes, wandb_note)


def _setup(runs: list[Run], arms: list[Arm], keys: list[str], command: str) -> list[Block]:
    hosts = sorted({f"{r.status.get('host', '?')} ({r.status.get('cpus', '?')} CPUs, {r.status.get('platform', '?')}, torch "
                    f"{r.status.get('versions', {}).get('torch', '?')}, device {r.config.get('device')})" for r in runs})
    shared = shared_config(runs)
    arms_df = pd.DataFrame([{"arm": a.label, "seeds": ", ".join(map(str, a.seeds)), "runs": len(a.runs)} for a in arms])
    blocks = [Block("h1", "gspo report"), Block("h2", "Setup")]
    if command:
        blocks.append(Block("pre", command))
    blocks += [
        Block("p", f"{len(runs)} runs in {len(arms)} arms. Arms differ in: {', '.join(keys) or 'nothing (one arm)'}; "
                   "seeds are replicates. Machine(s): " + "; ".join(hosts) + f". Report written on {platform.node()}."),
        Block("table", table=arms_df),
        Block("p", "Shared config (every run has these values):"),
        Block("table", table=pd.DataFrame({"key": list(shared), "value": [str(v) for v in shared.values()]})),
    ]
    return blocks


def _ci_text(ci: Interval) -> str:
    if ci.n < 2:
        return f"{fmt(ci.mean)} (n={ci.n}: no interval from one seed)"
    return f"{fmt(ci.mean)} (95% CI {fmt(ci.low)} to {fmt(ci.high)}, n={ci.n})"


def _results(arms: list[Arm], heads: list[Headline]) -> list[Block]:
    blocks = [Block("h2", "Results"), Block("p", "Mean over seeds with a 95% Student-t interval across seeds; "
                                               "'-' where one seed gives no interval.")]
    findings = []
    for h in heads:
        table = arm_table(arms, h).rename(columns={"ci_low": "95% CI low", "ci_high": "95% CI high"})
        blocks += [Block("p", f"{h.title} [{h.metric}]"), Block("table", table=table)]
        diffs = diff_table(arms, h)
        if len(diffs):
            blocks.append(Block("table", table=diffs.rename(columns={"ci_low": "95% CI low", "ci_high": "95% CI high"})))
        for row in diffs.itertuples(index=False):
            findings.append(_finding(h, row.difference, Interval(row.mean, row.ci_low, row.ci_high, row.n)))
    blocks += [Block("h2", "What the data shows"), Block("p", _summary_sentence(arms, findings))]
    return blocks


def _finding(h: Headline, name: str, ci: Interval) -> tuple[bool, str]:
    return excludes_zero(ci), f"{h.metric} ({h.reduce}), {name}: {_ci_text(ci)}"


def _summary_sentence(arms: list[Arm], findings: list[tuple[bool, str]]) -> str:
    if len(arms) < 2:
        return (f"One arm ({len(arms[0].runs)} runs): there is nothing to compare; the tables give each metric's "
                "spread across seeds.")
    n = min(len(a.runs) for a in arms)
    if n < 2:
        return ("An arm has a single seed, so there are no intervals and this data supports no claim that the arms "
                "differ; run more seeds (seed=0,1,2) for intervals.")
    supported = [text for ok, text in findings if ok]
    head = (f"With {n} seeds in the smallest arm, on this one configuration, the 95% interval of the difference "
            f"excludes zero for {len(supported)} of {len(findings)} comparisons")
    rest = (f"; for the other {len(findings) - len(supported)} it includes zero, so the data shows no difference "
            "there (nor that there is none). The intervals are not corrected for making several comparisons.")
    return head + (": " + "; ".join(supported) if supported else "") + rest


def _notes(runs: list[Run], notes: list[str]) -> list[str]:
    torn = [f"{r.run_id}: metrics.jsonl has {r.torn_lines} line(s) that are not whole rows (a run killed mid-write); "
            f"the report uses its {len(r.metrics)} whole rows" for r in runs if r.torn_lines]
    torn += [f"{r.run_id}: no readable metrics row for step(s) {', '.join(map(str, steps))}: its values there are "
             "missing from the tables and plots" for r in runs if (steps := unread_steps(r))]
    torn += [f"{r.run_id}: {r.status['error']}" for r in runs if r.status.get("status") == STATUS_UNREADABLE]
    unfinished = [r for r in runs if r.status.get("status") != "finished"]
    if unfinished:
        torn.append(f"{len(unfinished)} run(s) not finished: their final values are from their last step "
                    "(see the table of runs), not from the configured end")
    return torn + notes
