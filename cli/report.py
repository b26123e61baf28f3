"""`gspo report RUNS_OR_SWEEPS... --out DIR`: the comparison of finished (or running, failed, killed) runs."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gspo.cli.errors import user_errors
from gspo.conf.errors import GspoError
from gspo.conf.schema import VerdictConfig
from gspo.conf.verdict import check_effect

if TYPE_CHECKING:
    from gspo.report import Report


@user_errors
def report_cmd(
    paths: list[Path] = typer.Argument(None, help="Run directories and/or sweep directories (results/sweeps/<stamp>)."),
    out: Path = typer.Option(None, "--out", help="Output folder; default: <sweep>/report for one sweep, "
                             "else results/reports/<time>."),
    wandb: str = typer.Option("runs", "--wandb", help="auto|online|offline|disabled, or runs: as the runs' "
                              "logger.wandb. Logs the plots and the summary table in the runs' W&B group."),
    smooth: int = typer.Option(5, "--smooth", help="Moving-average window (steps) of the training reward "
                               "in the key curves; 1 or less: none."),
    separate: bool = typer.Option(False, "--separate", help="Runs that differ in what defines the experiment (a "
                                  "task setting, the model or its cold start, train.steps) are refused; with this, "
                                  "each group of like runs gets its own report in <out>/group-<i>."),
    effect: float = typer.Option(VerdictConfig.effect, "--effect", help="The smallest effect of interest of a "
                                 "score (held-out accuracy, reward), in its own units: equivalence within +-effect "
                                 "and the seeds per arm that would resolve it (verdict.effect of gspo compare)."),
    primary: str = typer.Option(None, "--primary", help="The page's one primary score, a metric the runs logged "
                                "(reward/mean), or auc:<held-out metric> (auc:eval/arith/accuracy: the area under its curve over "
                                "training, paired as the final score); the verdict tests only its comparisons, the "
                                "other scores are exploratory (verdict.primary of gspo compare). Default: the one the "
                                "sweep's plan registered, else held-out accuracy; another is marked post hoc, never resolved."),
) -> None:
    """Plots, report.md, a self-contained report.html and summary.csv comparing runs: arms are what differs
    in the runs' configs, seeds are replicates, intervals are 95% Student-t across seeds; arms that share their
    seeds are compared seed by seed (paired t), others by Welch's interval, each verdict naming its method."""
    check_effect(effect)
    from gspo.report import (  # pandas, matplotlib: once the arguments are checked
        write_groups,
        write_report,
    )
    from gspo.trainer.run.sweepdir import report_plan

    paths = _until_named(list(paths or []))
    rounds: dict = {}
    if out is None:  # one sweep (its rounds, an until's rounds too): <sweep>/report
        one = len(paths) == 1 and ((paths[0] / "runs").is_dir() or (paths[0] / "sequential.json").is_file())
        out = paths[0] / "report" if one else Path("results/reports") / time.strftime("%Y%m%d-%H%M%S")
    if len(paths) == 1 and (paths[0] / "sequential.json").is_file():  # an until=resolved experiment: its page
        from gspo.study.until import page

        paths, lines, sequential, answered = page(paths[0])
        registered, rounds = (answered,), {"rounds": lines, "sequential": sequential}
    else:
        paths, registered = report_plan(paths)
    command = (f"gspo report {' '.join(map(str, paths))} --out {out}" + (" --separate" if separate else "")
               + (f" --primary {primary}" if primary else ""))
    # the registered primary unless --primary names another: that one is post hoc on the page, never resolved (an
    # until's too: its looks' levels stay with the score its rounds answered)
    primary = primary if primary is not None or not registered else registered[0]
    kwargs = {"command": command, "wandb": wandb, "progress": sys.stderr.isatty(), "smooth": smooth,
              "say": lambda m: typer.echo(m, err=True), "effect": effect, "primary": primary, "registered": registered}
    if not separate:
        kwargs |= rounds
        print_report(write_report(paths, out, **kwargs))
        return
    for name, report in write_groups(paths, out, **kwargs):
        typer.echo(f"== {name}")
        print_report(report)


_ROUND = re.compile(r"round-\d+")


def _until_of(path: Path) -> Path | None:
    """The until=resolved experiment `path` is, or is a round folder of (None: neither)."""
    if (path / "sequential.json").is_file():
        return path
    if _ROUND.fullmatch(path.name) and (path.parent / "sequential.json").is_file():
        return path.parent
    return None


def _until_named(paths: list[Path]) -> list[Path]:
    """An until=resolved experiment is reported whole, with its repeated looks' interval: its folder, or all its round
    folders (read as the folder); named beside other runs, or some of its rounds alone, it is one line (the plain
    95% interval would read its runs as one fixed look, which the rounds were not)."""
    outers = {_until_of(p) for p in paths}
    if not any(outers) or (len(paths) == 1 and _until_of(paths[0]) == paths[0]):
        return paths
    outer = next(o for o in outers if o is not None)
    rounds = sorted(outer.glob("round-*"))
    if outers == {outer} and all(p != outer for p in paths) and sorted(set(paths)) == rounds:
        return [outer]
    raise GspoError(f"{outer} is an until=resolved experiment (seeds added in rounds, each look at its own level): "
                    f"report it alone, gspo report {outer}, which gives the interval its repeated looks need; "
                    "with other runs, or some of its rounds, the plain 95% interval would be wrong for it")


def print_report(report: Report) -> None:
    from gspo.report import fmt

    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"report: {report.out_dir / 'report.html'} (also report.md, summary.csv, {len(report.files) - 3} plots)")
    if report.wandb_note:
        typer.echo(report.wandb_note, err=True)
    if report.verdict:
        typer.echo("verdict:")
        for line in report.verdict:
            typer.echo(f"  {line}")
    if len(report.headline):
        typer.echo(f"{report.headline_title}:")
        for row in report.headline.itertuples(index=False):
            ci = "no interval (one seed)" if row.n < 2 else f"95% CI {fmt(row.ci_low)} to {fmt(row.ci_high)}"
            typer.echo(f"  {row.arm:<28} {fmt(row.mean):>8}  {ci}  n={row.n}")
