"""`gspo grade arith|math|code FILE.jsonl`: regrade saved responses without a model (thin: parse, call evals)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from gspo.cli.errors import user_errors
from gspo.evals import regrade

grade_app = typer.Typer(
    help="Regrade saved responses without a model; verdicts go to FILE.graded.jsonl next to FILE. A run's "
    "samples.jsonl and eval_samples.jsonl rows are graded by the task or benchmark that produced them; the "
    "command's grader is for rows that do not say.",
    no_args_is_help=True,
)
FILE_HELP = ("JSONL rows with `response` (or `completion`) and `gold` (or `answer`): also a run's samples.jsonl "
             "and eval_samples.jsonl.")


@grade_app.command("arith")
@user_errors
def grade_arith_cmd(file: Path = typer.Argument(..., help=FILE_HELP)) -> None:
    """Grade the embedded arithmetic task's answers (the last integer of the response)."""
    _print_summary(regrade.regrade(file, "arith"), "accuracy")


@grade_app.command("math")
@user_errors
def grade_math_cmd(
    file: Path = typer.Argument(..., help=FILE_HELP),
    workers: int = typer.Option(1, "--workers", min=1, help="Grading processes."),
) -> None:
    """Grade math answers with math-verify (boxed or 'the answer is' answers)."""
    _print_summary(regrade.regrade(file, "math", workers=workers), "accuracy")


@grade_app.command("code")
@user_errors
def grade_code_cmd(
    file: Path = typer.Argument(
        ...,
        help="JSONL rows with `code` or `response`, tests as `tests`, `gold` (a run's eval_samples.jsonl) or "
        "public_test_cases/private_test_cases, optional `fn_name` or metadata.func_name.",
    ),
    timeout: float = typer.Option(regrade.TIMEOUT_S, "--timeout", min=0.1, help="Seconds per test."),
    memory_mb: int = typer.Option(regrade.MEMORY_MB, "--memory-mb", min=16, help="Memory limit per run."),
    workers: int = typer.Option(1, "--workers", min=1, help="Programs run at once."),
) -> None:
    """Run code in the sandbox on its tests; a row passes only if every test passes."""
    summary = regrade.regrade(file, "code", timeout_s=timeout, memory_mb=memory_mb, workers=workers,
                              progress=sys.stderr.isatty())
    _print_summary(summary, "pass rate")


def _print_summary(summary: regrade.RegradeSummary, label: str) -> None:
    counts = " ".join(f"{name}={n}" for name, n in summary.verdicts.items())
    typer.echo(f"graded {summary.n} rows -> {summary.output}")
    for source, (correct, n) in summary.by_source.items():  # one figure over arith and AIME rows would mean nothing
        typer.echo(f"{source}: {label} {correct / n:.4f} ({correct}/{n})")
    typer.echo(f"verdicts: {counts}")
    for reason, n in summary.skipped.items():
        typer.echo(f"warning: {n} rows not graded: {reason}", err=True)
    if summary.disagree:
        rows = ", ".join(map(str, summary.disagree[:10])) + (", ..." if len(summary.disagree) > 10 else "")
        typer.echo(f"warning: {len(summary.disagree)} of {summary.n_stored} regraded rows disagree with their "
                   f"stored verdict (rows {rows})", err=True)
