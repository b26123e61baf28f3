"""The one place a user error becomes one line: `error: <message>` on stderr and exit code 2, no traceback.
So does an OSError of the machine's state (disk full, read-only, permission, name too long; conf/errors.py),
naming the path and the cause.

Every command runs inside it (the console script's `main`, each `gspo grade` command, and each Hydra job of
a sweep, which Hydra would otherwise report with its own traceback and exit code 1). Under several processes
only rank 0 prints the line; every rank exits 2. In-process callers
(Typer's CliRunner in the tests) see the GspoError itself, as `main` is not in their path.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import typer

from gspo.conf.errors import GspoError, disk_error

F = TypeVar("F", bound=Callable)


@contextmanager
def one_line_errors() -> Iterator[None]:
    try:
        yield
    except GspoError as e:
        if is_rank0():
            typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except Exception as e:  # a full disk, a read-only folder, a permission, a name too long, a size limit (any library's wording)
        error = disk_error(e)
        if error is None:
            raise
        if is_rank0():
            typer.echo(f"error: {error}", err=True)
        sys.exit(2)


def is_rank0() -> bool:
    """Under torchrun (or a Slurm job made a data-parallel run), rank 0 alone speaks for the job: every rank
    exits 2, one `error:` line is printed. RANK is torchrun's variable (export_slurm_world sets it too)."""
    return os.environ.get("RANK", "0") == "0"


def user_errors(fn: F) -> F:
    """`one_line_errors` around a command function (for commands a CliRunner also calls directly)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_line_errors():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
