"""`gspo report`: read runs, group them into arms, write plots, report.md, report.html and summary.csv.

The page gives the answer first: a title naming the experiment, one verdict line per comparison in plain
words (the difference, its method, paired by seed or Welch's, its 95% interval or Holm's where several
comparisons share the metric, resolved or not; for one not resolved the minimum detectable effect, the
equivalence bound against the smallest effect of interest and the seeds per arm that effect needs), the
forest plot of those differences, the grid of key curves, and
for a sweep over a numeric key the sensitivity plot with the share of seeds that collapsed at each value.
Then the experiment's defining settings and what differs between arms (every other setting folded away),
the tables, the runs, and every plot.

Everything is checked before anything is written: a bad path, no runs, or runs that are not one experiment
(another task setting, model, cold start or length: report/comparable.py) stop the report with one error
and leave the output folder untouched. Runs still going or stopped early are read at their common step
(comparable.py, said in the verdict's first line); per-step times of runs under a high load are left out
(load.py); where a run collapsed the verdict tests the collapse counts (collapse.py, Boschloo's exact test).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

import gspo.report.collapse as collapse
import gspo.report.staleness  # noqa: F401  (registers the staleness section)
import gspo.vocab.metrics as M
from gspo.conf.errors import GspoError, disk_error
from gspo.conf.schema import VerdictConfig
from gspo.report.arms import (
    Arm,
    check_comparable,
    group_arms,
    label_keys,
    legend_note,
    numeric_keys,
    once_per_seed,
    pairs,
)
from gspo.report.comparable import at_common_step, seeds_used
from gspo.report.family import confirmatory, page_words
from gspo.report.inactive import never_acted
from gspo.report.lines import also_excluding, summary_line, verdict_line
from gspo.report.load import without_loaded_times
from gspo.report.noise import which_objective
from gspo.report.outcomes import write_outcomes
from gspo.report.page import Block, to_html, to_markdown
from gspo.report.plots import forest, key_grid, sensitivity, time_note, write_plots
from gspo.report.runs import Run, load_runs, unread_steps
from gspo.report.sections import Page, sections
from gspo.report.stats import mean_ci
from gspo.report.tables import (
    AUC,
    EXPLORATORY,
    MECHANISM,
    POST_HOC,
    PRIMARY,
    SCORE,
    Difference,
    Headline,
    adjust,
    arm_table,
    arm_values,
    auc_headline,
    difference,
    final_notes,
    headlines,
    summary_frame,
    valid_range,
)
from gspo.report.tracker import log_report, report_wandb_mode
from gspo.trainer.run.rundir import STATUS_UNREADABLE
from gspo.vocab.choices import Wandb

VERDICT_REDUCE = 2  # with more comparisons than this, the verdict keeps to the first headline metric
@dataclass
class Report:
    out_dir: Path
    headline: pd.DataFrame  # the first headline metric's arm table
    headline_title: str
    files: list[Path]
    notes: list[str]  # what the report left out or could not use, also written into the report
    wandb_note: str | None = None  # where the report's offline W&B run is and the `wandb sync` command
    verdict: list[str] = field(default_factory=list)  # the page's opening lines (what `gspo compare` prints)


def write_report(paths: list, out_dir: Path, command: str = "", wandb: str = "runs", progress: bool = False,
                 smooth: int = 5, effect: float = VerdictConfig.effect, rounds: list[str] = (),
                 sequential: dict[str, float] | None = None, primary: str | None = None,
                 registered: tuple[str | None, ...] = (), say=None) -> Report:
    """`wandb`: a W&B mode, or "runs" to follow the runs' own logger.wandb (see tracker.py); `progress`: a
    bar over the plots, the long part; `smooth`: the moving-average window of the training reward in the
    key curves (0 or 1: none); `effect`: the smallest effect of interest of a score; `rounds`: lines on the
    rounds of a sequential compare (verdict.until=resolved), shown under the verdict; `sequential`: metric ->
    the nominal level of its comparisons at the design's last look (their intervals are read at it); `primary`:
    the page's one confirmatory score (verdict.primary; None: held-out accuracy); `registered`: (the primary the
    experiment's plan registered, *its comparisons), empty without a plan: another `primary` is post hoc, never a
    finding, and fewer comparisons than registered are said; `say`:
    where a line per stage goes (runs read, statistics, plots, page), so a report without a bar is not silent for
    minutes (None: nowhere)."""
    say = say or (lambda _message: None)
    runs, notes = load_runs(paths)
    runs, copies = once_per_seed(runs)
    check_comparable(runs)
    runs, common = at_common_step(runs)
    runs, timing = without_loaded_times(runs)
    arms = group_arms(runs)
    say(f"report: {len(runs)} runs read, {len(arms)} arms; statistics ...")
    task = runs[0].config.get("task.name", "arith")
    heads = [h for h in headlines(task) if any(h.metric in r.metrics for r in runs)]
    keys = label_keys(runs)
    _make_out(out_dir)
    compared = pairs(arms)
    first = primary_head(heads, primary)
    heads += [first] if first is not None and first not in heads else []  # an area under the curve: its own row
    post_hoc = bool(registered) and first is not None and first.metric != _planned(heads, registered[0])
    diffs, levels, family = _differences(heads, compared, runs, effect, first, post_hoc, sequential or {})
    chosen = _verdict_heads(heads, compared, first)
    common += [f"Runs used per arm: {seeds_used(arms)}."] if common else []
    many = len(compared) > VERDICT_REDUCE
    # an arm whose mask, filter or correction never acted is its baseline: said before any verdict on it
    verdict = common + never_acted(arms) + _verdict(arms, [d for h in chosen[: 1 if many else None] for d in diffs[h.metric]])
    verdict += [summary_line(h, diffs[h.metric]) for h in chosen[1:] if many and diffs[h.metric]]
    verdict += also_excluding(heads, chosen, diffs) + collapse.verdict(compared, arms, levels) + list(rounds)
    verdict += _unplanned(registered[1:], compared, arms)
    front: list[Block] = [Block("h1", _title(runs, arms, task)),
                          Block("p", _experiment(runs, arms, keys, effect, first, post_hoc) + " " + family),
                          Block("list", items=tuple(verdict), id="verdict")]
    shown = [d for h in chosen[: 1 if many else None] for d in diffs[h.metric] if d.role != EXPLORATORY]
    figures, front_files = _figures(arms, heads, diffs, shown, first, compared, out_dir, smooth)
    front += figures
    say(f"report: verdict ready ({len(compared)} comparison(s)); plots ...")
    plots = write_plots(arms, task, out_dir, progress)
    say(f"report: {len(plots) + len(front_files)} plots drawn; writing the page ...")
    notes = _notes(runs, notes + copies + final_notes(runs, heads)) + timing + [n for n in [time_note(arms)] if n]
    blocks = front + sections(Page(runs, arms, heads, diffs, keys, command, notes, plots))
    (out_dir / "report.md").write_text(to_markdown(blocks, out_dir))
    (out_dir / "report.html").write_text(to_html(blocks, "gspo report"))
    say(f"report: page written: {out_dir / 'report.html'}")
    summary, outcomes = _data_files(out_dir, arms, keys, heads, diffs, task)
    mode = report_wandb_mode(wandb, runs)
    all_plots = [(p.stem.replace("_", " "), p) for p in front_files] + plots
    wandb_note = log_report(mode, runs, out_dir, all_plots, summary) if mode != Wandb.DISABLED else None
    files = [out_dir / "report.md", out_dir / "report.html", out_dir / "summary.csv", *([outcomes] if outcomes else []),
             *front_files, *(p for _, p in plots)]
    first = heads[0] if heads else None
    table = arm_table(arms, first, valid_range(first.metric, runs)) if first else pd.DataFrame()
    return Report(out_dir, table, first.title if first else "", files, notes, wandb_note, verdict)


def _data_files(out_dir: Path, arms: list[Arm], keys: list[str], heads: list[Headline],
                diffs: dict[str, list[Difference]], task: str) -> tuple[pd.DataFrame, Path | None]:
    """summary.csv (one row per run) and outcomes.csv.gz (every run's per-problem held-out outcomes, from which
    report/recompute.py recomputes the noise tables): (the summary, the outcomes file or None)."""
    summary = summary_frame(arms, keys, heads, diffs)
    summary.to_csv(out_dir / "summary.csv", index=False)
    acc = M.EVAL.format(task, M.EVAL_ACCURACY)
    return summary, write_outcomes(out_dir, arms, diffs.get(acc, []), acc)


def _differences(heads: list[Headline], compared: list, runs: list[Run], effect: float, first: Headline | None,
                 post_hoc: bool, sequential: dict[str, float]) -> tuple[dict[str, list[Difference]], list[float], str]:
    """(each headline metric's differences, Holm within the metric, the primary score's held to their levels in
    the page's confirmatory family or the rounds' design; each collapse test's level; the family in words)."""
    diffs = {h.metric: adjust([_framed(difference(h, a, b, effect), first, runs, post_hoc) for a, b in compared])
             for h in heads}
    for metric, level in sequential.items():
        diffs[metric] = [replace(d, alpha=level, m=len(diffs[metric]), adjusted_by="group-sequential")
                         for d in diffs.get(metric, [])]
    rounds = first is not None and first.metric in sequential
    primary = diffs[first.metric] if first is not None else []
    held, levels = confirmatory(primary, compared, rounds)
    if first is not None:
        diffs[first.metric] = held
    return diffs, levels, page_words(len(primary), len(compared), rounds) if compared else ""


def _figures(arms: list[Arm], heads: list[Headline], diffs: dict[str, list[Difference]], shown: list[Difference],
             first: Headline | None, compared: list, out_dir: Path, smooth: int) -> tuple[list[Block], list[Path]]:
    """The first screen's figures and tables, and the files written for them: the forest of the `shown` differences
    (the primary score's and the mechanism's; the exploratory scores' intervals are in the verdict), which objective
    (over two arms), the key curves, and a sensitivity plot per numeric key the arms differ in."""
    task = arms[0].runs[0].config.get("task.name", "arith")
    front, files = [], []
    if forest(shown, out_dir / "forest.png"):
        front.append(Block("img", "forest plot: the primary score's and the mechanism's differences to the baseline with "
                                  "their 95% intervals",
                           image=out_dir / "forest.png", id="forest"))
        files.append(out_dir / "forest.png")
    if len(arms) > 2 and first is not None:
        front += [Block("h2", "Which objective"),
                  Block("p", f"{first.title}: each arm's mean with its 95% interval across seeds, best first, and "
                             "its clipped-token share (mean over steps); 'no claim' where the difference to the "
                             "baseline is not resolved (at Holm's level)."),
                  Block("table", table=which_objective(arms, first, diffs[first.metric], M.CLIP_TOKEN_FRAC),
                        id="which")]
    if key_grid(arms, task, out_dir / "key_curves.png", smooth):
        front += [Block("h2", "Key curves"), Block("img", "key curves by step", image=out_dir / "key_curves.png",
                                                   id="curves")]
        files.append(out_dir / "key_curves.png")
    for key in numeric_keys(arms):
        front += _sensitivity(arms, key, heads, out_dir, files, compared)
    return front, files


def _make_out(out_dir: Path) -> None:
    """The output folder, made if needed; a path that is a file or a symlink loop is one line."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if disk_error(e) is not None:
            raise
        what = "is a symlink to no folder (a loop or a file)" if out_dir.is_symlink() else {
            errno.EEXIST: "is a file, not a folder", errno.ENOTDIR: "lies under a file, not a folder",
            errno.ELOOP: "is a symlink loop"}.get(e.errno, f"cannot be made ({e.strerror})")
        raise GspoError(f"--out {out_dir} {what}: name a folder (new or existing) for the report") from None


def _title(runs: list[Run], arms: list[Arm], task: str) -> str:
    model = runs[0].config.get("model.name", "?")
    names = ", ".join(a.label for a in arms[:6]) + (f" and {len(arms) - 6} more" if len(arms) > 6 else "")
    return f"gspo report: {names} on {task} ({model})"


def _experiment(runs: list[Run], arms: list[Arm], keys: list[str], effect: float, first: Headline | None,
                post_hoc: bool = False) -> str:
    seeds = sorted({len(a.runs) for a in arms})
    n = "-".join(map(str, seeds))
    steps = sorted({r.config.get("train.steps") for r in runs}, key=str)
    note = legend_note(keys)
    return (f"{len(runs)} runs: {len(arms)} arms x {n} seed(s), {', '.join(map(str, steps))} steps"
            + (f"; {note}" if note else "") + ". Differences are each arm minus its baseline (the first arm "
            "of its group): arms that share their seeds are compared seed by seed (paired t on the per-seed "
            "differences, with the exact sign-flip p beside it at small n), others by Welch's interval; each line "
            "names its method. "
            + (f"The primary score is {first.info.label}, chosen at report time (--primary), not the one the "
               "experiment's plan registered: post hoc, so its comparisons are leads, never findings; other scores "
               "are exploratory. " if first is not None and post_hoc else "")
            + (f"The primary score is {first.info.label} (verdict.primary): only its comparisons are tested as "
               "findings; other scores are exploratory (not adjusted across scores: an interval excluding zero is a "
               "lead, not a finding) and mechanism metrics are described. " if first is not None and not post_hoc
               else "")
            + "Resolved = the primary score's interval "
            "excludes zero at its level in the page's confirmatory family (below) and, paired, its exact sign-flip p is "
            "within that level too; seeds that tied are no test. "
            "Not resolved (no claim): TOST, the "
            "interval outside which differences are ruled out at 5%, against the smallest effect of interest "
            f"(+-{effect:g}, verdict.effect); MDE, the smallest true difference these seeds resolve with 80% power; "
            "the seeds per arm that would resolve the effect of interest with 80% power at the sd's 80% upper "
            "confidence bound.")


def primary_head(heads: list[Headline], metric: str | None) -> Headline | None:
    """The page's one primary score: `metric` (verdict.primary, gspo report --primary), default held-out accuracy (the first score when
    the runs have no held-out eval), or `auc:<held-out metric>`, the area under its curve (tables.auc_headline); a
    `metric` that is no score of these runs is one line."""
    scores = [h for h in heads if h.info.kind == SCORE]
    if (area := auc_headline(metric or "")) is not None:
        if not any(h.metric == area.metric.removeprefix(AUC) for h in scores):
            raise GspoError(f"primary score {metric}: these runs logged no {area.metric.removeprefix(AUC)}")
        return area
    if metric is not None:
        found = next((h for h in scores if h.metric == metric), None)
        if found is None:
            raise GspoError(f"primary score {metric}: not a score these runs logged "
                            f"({', '.join(h.metric for h in scores) or 'none'})")
        return found
    return next((h for h in scores if h.metric.endswith("/" + M.EVAL_ACCURACY)), scores[0] if scores else None)


def _unplanned(planned: tuple[str, ...], compared: list, arms: list) -> list[str]:
    """The line a page gives when its runs make fewer comparisons than the plan registered: its alpha is then split
    over the page's comparisons, not the registered ones. Either an arm has no runs (the registered comparisons
    name more arms than the page has), or every arm is here and the plan paired them otherwise (a plan.json of a
    gspo whose pairing read override strings, not configs: study/plan.py `comparisons`)."""
    if not planned or len(planned) <= len(compared):
        return []
    named = {a for c in planned for a in c.split(" vs ")}
    head = (f"The experiment's plan registered {len(planned)} comparisons ({'; '.join(planned)}); these runs give "
            f"{len(compared)}, so the alpha is split over {len(compared)}, not the registered {len(planned)}: ")
    if len(named) > len(arms):
        return [head + "an arm's runs are missing; rerun the compare in its folder to run them before reading a claim."]
    return [head + f"all {len(arms)} registered arms have runs, and the page pairs them as their configs differ (each "
            "arm against its stratum's first), where this plan.json's gspo paired them otherwise."]


def _planned(heads: list[Headline], metric: str | None) -> str | None:
    """The metric of the primary score a plan registered (None: not one these runs logged)."""
    try:
        found = primary_head(heads, metric)
    except GspoError:
        return None
    return found.metric if found else None


def _framed(d: Difference, first: Headline | None, runs: list[Run], post_hoc: bool = False) -> Difference:
    """The difference with its role (primary, post hoc, exploratory, or none for a mechanism) and its setting."""
    primary = POST_HOC if post_hoc else PRIMARY
    role = "" if d.head.info.kind != SCORE else primary if first is not None and d.head == first else EXPLORATORY
    return replace(d, role=role, setting=setting_words(runs, d))


SETTING_KEYS = ("train.lr",)  # a shared setting that changes which arm is ahead (results/lr-sensitivity)


def setting_words(runs: list[Run], d: Difference) -> str:
    """`at train.lr=0.0001`: the setting a difference holds at, where all runs share it and no arm label says it."""
    values = {k: {str(r.config.get(k)) for r in runs} for k in SETTING_KEYS}
    shared = [f"{k}={next(iter(v))}" for k, v in values.items() if len(v) == 1 and "None" not in v]
    return f"at {', '.join(shared)}" if shared else ""


def _verdict_heads(heads: list[Headline], compared: list, first: Headline | None) -> list[Headline]:
    """The primary score first, then the other scores and mechanism lines the verdict speaks of."""
    sections = (M.section(M.EVAL.name), M.section(M.REWARD_MEAN), M.CLIP)
    wanted = [h for h in heads if h.info.kind in (SCORE, MECHANISM) and M.section(h.metric) in sections
              and h.metric != M.CLIP_SEQ_FRAC]
    if first is not None:
        wanted = [first] + [h for h in wanted if h != first]
    if len(compared) > VERDICT_REDUCE:  # many comparisons: the other lines are one summary line per metric
        wanted = wanted[:1] + [h for h in wanted[1:] if h.metric in (M.REWARD_MEAN, M.CLIP_TOKEN_FRAC)]
    return wanted


def _verdict(arms: list[Arm], diffs: list[Difference]) -> list[str]:
    if len(arms) < 2:
        return [f"One arm ({len(arms[0].runs)} runs): nothing to compare; the tables give each metric's spread "
                "across seeds."]
    lines = [verdict_line(d) for d in diffs]
    n = min(len(a.runs) for a in arms)
    if n < 3:
        lines.append(f"With {n} seed(s) per arm the intervals say little: bands in the plots are the seeds' min-max, "
                     "not a 95% interval; run seed=0,1,2 (or more) before drawing a conclusion.")
    return lines


def _sensitivity(arms: list[Arm], key: str, heads: list[Headline], out_dir: Path, files: list[Path],
                 compared: list) -> list[Block]:
    """The final score against `key`, beside it the share of seeds that collapsed at each value with Boschloo's
    exact test against the baseline at that value (and pooled over the values), then the greedy score."""
    blocks = [Block("h2", f"Sensitivity to {key}")]
    base_of = {id(arm): base for arm, base in compared}
    rows = []
    score = next((h for h in heads if h.info.kind == SCORE), None)
    for arm in sorted(arms, key=lambda a: (str(a.values.get("algo.name", "")), a.values[key])):
        row = {"arm": arm.label, key: arm.values[key], **collapse.row(arm, base_of.get(id(arm)))}
        if score:
            row[f"{score.info.label} (final, mean)"] = mean_ci(arm_values(arm, score)).mean
        rows.append(row)
    table = [Block("table", table=pd.DataFrame(rows), id="collapse"),
             Block("p", "Collapsed: runs whose collapse detector fired (run.json `collapsed`: the training reward's "
                        "moving average or held-out accuracy fell far below its best, or entropy or length broke "
                        "down; trainer/run/collapse.py); p: Boschloo's exact test (two-sided) of the arm's collapsed share "
                        "against its baseline's, unadjusted (the verdict holds each to its level in the page's "
                        "family). " + " ".join(collapse.pooled_lines(compared)))]
    placed = False
    for h in [h for h in heads if h.info.kind == SCORE][:2]:
        path = out_dir / f"sensitivity_{key.replace('.', '_')}_{h.metric.replace('/', '_')}.png"
        if sensitivity(arms, key, h, path):
            blocks.append(Block("img", f"{h.info.label} against {key}", image=path, id=f"sensitivity-{len(files)}"))
            files.append(path)
        if not placed:  # beside the first plot
            blocks, placed = blocks + table, True
    return blocks if placed else blocks + table


def _notes(runs: list[Run], notes: list[str]) -> list[str]:
    torn = [f"{r.run_id}: metrics.jsonl has {r.torn_lines} line(s) that are not whole rows (a run killed mid-write); "
            f"the report uses its {len(r.metrics)} whole rows" for r in runs if r.torn_lines]
    torn += [f"{r.run_id}: no readable metrics row for step(s) {', '.join(map(str, steps))}: its values there are "
             "missing from the tables and plots" for r in runs if (steps := unread_steps(r))]
    torn += [f"{r.run_id}: {r.status['error']}" for r in runs if r.status.get("status") == STATUS_UNREADABLE]
    unfinished = [r for r in runs if r.status.get("status") != "finished"]
    if unfinished:
        torn.append(f"{len(unfinished)} run(s) not finished: their final values are from their last step "
                    "(see the table of runs) or the common step the verdict names, not from the configured end")
    return torn + notes
