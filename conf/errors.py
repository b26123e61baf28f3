"""The one exception type that means "the user gave us something we cannot use".

`one_line_errors` catches it and prints its message as a single line, exit code 2, no traceback: around every
command (cli/), each `gspo grade` command and each Hydra job of a sweep (study/job.py), which Hydra would otherwise
report with its own traceback and exit code 1. Under several processes only rank 0 prints the line; every rank
exits 2. In-process callers (Typer's CliRunner in the tests) see the GspoError itself. Raise it with a
message that names the offending thing (file, key, row number) and, where possible, what would work.

OS errors that are the machine's state rather than a bug (a full disk, a read-only mount, a permission, a
name too long) become one such line too (`disk_error`), naming the path and the cause.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager


class GspoError(Exception):
    """A user-facing error: one clear line, non-zero exit."""


# OS errors that are the machine's state, not a bug: each becomes one `error:` line naming the path
DISK_ERRORS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
               errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted", errno.ENAMETOOLONG: "the file name is too long",
               errno.EFBIG: "the file is larger than this process may write (ulimit -f, or the file system's limit)",
               errno.EIO: "an input/output error (the disk or its mount failed)"}
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)|Os \{ code: (\d+)")  # a Rust writer's (safetensors') OSError in its own


def disk_error(e: BaseException) -> GspoError | None:
    """The one-line GspoError for an OSError of DISK_ERRORS, `e` itself or what caused it (torch's writer
    raises a RuntimeError over the OSError of a full disk), naming its path; None for any other error."""
    seen = 0
    while e is not None and seen < 10:
        code = e.errno if isinstance(e, OSError) else _rust_errno(e)
        if code in DISK_ERRORS:
            where = f"{e.filename}: " if isinstance(e, OSError) and e.filename else ""
            said = e.strerror if isinstance(e, OSError) and e.strerror else os.strerror(code)
            return GspoError(f"{where}{DISK_ERRORS[code]} ({said}); free space or "
                             "fix the permissions and run the command again (a run resumes with resume=<run dir>)")
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def _rust_errno(e: BaseException) -> int | None:
    """The errno a Rust library's error names in its message (safetensors' SafetensorError: `I/O error: File too
    large (os error 27)`, or `Os { code: 27, ... }`), else None."""
    found = _RUST_OS_ERROR.search(str(e))
    return int(found.group(1) or found.group(2)) if found else None


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A GspoError, or an OSError of the machine's state (`disk_error`), as `error: <message>` on stderr (rank 0
    alone) and exit code 2."""
    try:
        yield
    except GspoError as e:
        _say_error(str(e))
    except Exception as e:  # a full disk, a read-only folder, a permission, a name too long, a size limit (any library's wording)
        error = disk_error(e)
        if error is None:
            raise
        _say_error(error)


def _say_error(message: str) -> None:
    if is_rank0():
        print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def interrupt_said(e: BaseException, *, mark: bool = False) -> bool:
    """Whether the interrupt `e`'s one line is out already (the trainer's or a sweep's, naming what is kept and how
    to continue): the console entry point then adds none. `mark`: say that it is."""
    if mark:
        e.gspo_said = True  # type: ignore[attr-defined]
    return bool(getattr(e, "gspo_said", False))


_SIGINT = {"seen": False}


def watch_sigint() -> None:
    """Record a Ctrl-C (then raise KeyboardInterrupt, as Python's own handler does), so that an exception escaping
    after it is read as the interrupt's (`sigint_seen`). Only over Python's own handler: one a caller set stays."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def _on_sigint(signum, frame):
    _SIGINT["seen"] = True
    raise KeyboardInterrupt


def sigint_seen() -> bool:
    """Whether the user pressed Ctrl-C in this process (under `watch_sigint`): an exception that escapes after it
    is the interrupt's, seen through a library it broke mid-import (with accelerate installed, a KeyboardInterrupt
    inside numpy's lazy `numpy.dtypes` import became a RecursionError that transformers re-raised as its own error:
    a 60-line traceback where the interrupt's one line belongs)."""
    return _SIGINT["seen"]


def is_rank0() -> bool:
    """Under torchrun (or a Slurm job made a data-parallel run), rank 0 alone speaks for the job: every rank
    exits 2, one `error:` line is printed. RANK is torchrun's variable (export_slurm_world sets it too)."""
    return os.environ.get("RANK", "0") == "0"
