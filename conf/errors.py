"""The one exception type that means "the user gave us something we cannot use".

The CLI catches it and prints its message as a single line, exit code 2, no traceback. Raise it with a
message that names the offending thing (file, key, row number) and, where possible, what would work.

OS errors that are the machine's state rather than a bug (a full disk, a read-only mount, a permission, a
name too long) become one such line too (`disk_error`), naming the path and the cause.
"""

from __future__ import annotations

import errno
import os
import re


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
