"""A root grader's sandbox uids: each running sandbox holds a host uid of its own, leased from a range that
no one else uses, so the kernel's per-user quotas are its own (issue 46).

The kernel counts some quotas per user, not per process: RLIMIT_NPROC's task count, pipe buffer pages
(fs.pipe-user-pages-soft), inotify instances and watches, POSIX message queue bytes (RLIMIT_MSGQUEUE),
pending signals (RLIMIT_SIGPENDING), locked memory. Under one shared uid (65534 before) a program that spends
them spends them for every other sandbox: a neighbour holding the pipe pages made every other sandbox's pipes
8 KiB and refused their F_SETPIPE_SZ; a neighbour's forks made the plain backend's fork() fail with EAGAIN
(on Linux >= 5.14 a user namespace's tasks still count toward its owner's uid). A lease is an exclusive
flock on one file per uid in a root-only folder, so concurrent graders (pytest-xdist workers, grading
processes) never share a uid, and the kernel releases it when the holder exits, however it ends. The
grader releases it only after the sandbox's processes are gone (Runner.close). The files stay (empty, one
per uid ever leased at once): removing one that another grader has open would let a third lock a new file of
the same name, two holders of one uid.

The range: GSPO_SANDBOX_UIDS="first:count", by default 0x70000000 and 65536 uids (1879048192-1879113727):
systemd's uid table leaves 1879048192-2147352575 unused, above container ranges (524288-1879048191) and
the /etc/subuid ranges useradd gives (100000 + 65536 per user). The range must be one no account or
container on the machine uses: a sandbox's uid owns nothing, so the program can reach only what every
user can.
"""

from __future__ import annotations

import fcntl
import os
import stat

from gspo.conf.errors import GspoError

RANGE_ENV = "GSPO_SANDBOX_UIDS"
DEFAULT_RANGE = (0x70000000, 1 << 16)


def uid_range() -> tuple[int, int]:
    """(first, count) from GSPO_SANDBOX_UIDS, or the default; a clear error for a malformed or unsafe one."""
    text = os.environ.get(RANGE_ENV, "").strip()
    if not text:
        return DEFAULT_RANGE
    try:
        first, count = (int(part) for part in text.split(":"))
    except ValueError:
        raise GspoError(f"{RANGE_ENV}={text!r}: expected first:count, e.g. 1879048192:65536") from None
    if first < 65536 or count < 1 or first + count > (1 << 32) - 1:
        raise GspoError(f"{RANGE_ENV}={text!r}: the uids must lie in 65536..4294967294 (above every account "
                        f"and 'nobody')")
    return first, count


class UidLease:
    """One uid of the range, held (flock) until `release`; `lease()` makes one."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def lease() -> UidLease:
    """The lowest uid of the range no other sandbox on this machine holds now (so the lease files, one per uid,
    number only the most sandboxes ever run at once: /run is a small tmpfs); OSError when every uid is held."""
    first, count = uid_range()
    folder = _lock_folder()
    for uid in range(first, first + count):
        fd = os.open(os.path.join(folder, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise OSError(f"all {count} sandbox uids from {first} are held ({RANGE_ENV} sets the range)")


def _lock_folder() -> str:
    """The leases' folder: root's own, mode 0700 (no one else can hold or block a lease)."""
    places = ("/run/gspo-sandbox-uids", f"/tmp/gspo-sandbox-uids-{os.geteuid()}")  # the first we can make and own
    for folder in places:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError:
            continue
        st = os.lstat(folder)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
            return folder
    raise OSError(f"no folder for sandbox uid leases: {' or '.join(places)} must be a directory of this "
                  f"user's, mode 0700")
