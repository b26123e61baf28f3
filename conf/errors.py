"""The one exception type that means "the user gave us something we cannot use".

The CLI catches it and prints its message as a single line, exit code 2, no traceback. Raise it with a
message that names the offending thing (file, key, row number) and, where possible, what would work.

OS errors that are the machine's state rather than a bug (a full disk, a read-only mount, a permission, a
name too long) become one such line too (`disk_error`), naming the path and the cause.
"""

from __future__ import annotations

import errno
import os


class GspoError(Exception):
    """A user-facing error: one clear line, non-zero exit."""


# OS errors that are the machine's state, not a bug: each becomes one `error:` line naming the path
DISK_ERRORS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
               errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted", errno.ENAMETOOLONG: "the file name is too long"}


def disk_error(e: BaseException) -> GspoError | None:
    """The one-line GspoError for an OSError of DISK_ERRORS, `e` itself or what caused it (torch's writer
    raises a RuntimeError over the OSError of a full disk), naming its path; None for any other error."""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, OSError) and e.errno in DISK_ERRORS:
            where = f"{e.filename}: " if e.filename else ""
            return GspoError(f"{where}{DISK_ERRORS[e.errno]} ({e.strerror or os.strerror(e.errno)}); free space or "
                             "fix the permissions and run the command again (a run resumes with resume=<run dir>)")
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None
