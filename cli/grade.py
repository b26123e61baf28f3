"""`gspo grade math|code FILE.jsonl`: regrade saved responses without a model (thin: parse, call evals)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from gspo.conf.errors import GspoError
from gspo.evals import regrade

grade_app = typer.Typer(
    help="Regrade saved responses without a model; verdicts go to FILE.graded.jsonl next to FILE.",
    no_args_is_help=True,
)

F = TypeVar("F", bound=Callable)


def user_errors(fn: F) -> F:
    """A GspoError becomes `error: <msg>` on stderr and exit code 2, with no traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except GspoError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


@grade_app.command("math")
@user_errors
def grade_math_cmd(
    file: Path = typer.Argument(..., help="JSONL rows with `response` (or `completion`) and `gold` (or `answer`): "
                              "also a run's samples.jsonl and eval_samples.jsonl."),
    workers: int = typer.Option(1, "--workers", min=1, help="Grading processes."),
) -> None:
    """Grade math answers with math-verify (boxed or 'the answer is' answers)."""
    summary = regrade.regrade_math(file, workers=workers)
    _print_summary(summary, "accuracy")


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
    summary = regrade.regrade_code(
        file, timeout_s=timeout, memory_mb=memory_mb, workers=workers, progress=sys.stderr.isatty()
    )
    _print_summary(summary, "pass rate")


def _print_summary(summary: regrade.RegradeSummary, label: str) -> None:
    counts = " ".join(f"{name}={n}" for name, n in summary.verdicts.items())
    typer.echo(f"graded {summary.n} rows -> {summary.output}")
    typer.echo(f"{label}: {summary.accuracy:.4f} ({summary.n_correct}/{summary.n})")
    typer.echo(f"verdicts: {counts}")
