"""A memory cgroup per sandbox, where the machine lets the grader make one (as root: cgroup v1's memory
controller, or a cgroup v2 whose memory controller is enabled for children).

RLIMIT_AS binds one process; a program's forked workers, its files in tmpfs, its pipes and the kernel
memory of its inodes are memory no address-space limit sees. The cgroup holds the whole sandbox (the root
shim joins it before it starts anything, so nothing escapes by starting early), kernel memory included,
and each job gets a fresh one (issue 46): the grader makes it with the job's own budget as its limit and
moves the sandbox's processes into it, so what earlier jobs left charged (a deferred tmpfs unmount, an IPC
namespace freed late, page cache) stays with the old cgroup and neither counts against nor raises the
next job's limit (moving a process moves none of its charges, v1 and v2 alike). Where no cgroup can be
made, the sandbox relies on the fallback: memfd_create and System V memory (shmget, msgget, semget)
denied (seccomp.py), tmpfs capped in bytes and inodes, and nproc * memory_mb as the bound. An OOM kill
inside the cgroup is the job's memory_limit.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("gspo.evals.sandbox")

_ROOT = Path("/sys/fs/cgroup")
_V1 = {"limit": "memory.limit_in_bytes", "usage": "memory.usage_in_bytes", "events": "memory.oom_control",
       "empty": "memory.force_empty"}
_V2 = {"limit": "memory.max", "usage": "memory.current", "events": "memory.events", "empty": "memory.reclaim"}


class MemoryCgroup:
    """One sandbox's memory cgroup (a folder under the grader's own); `create` gives None where the machine
    does not allow one."""

    def __init__(self, path: Path, files: dict[str, str]) -> None:
        self.path = path
        self._files = files

    @classmethod
    def create(cls, name: str) -> MemoryCgroup | None:
        for parent, files in _parents():
            try:
                path = parent / name
                path.mkdir()
            except OSError:
                continue
            if all((path / f).exists() for f in files.values()):
                cg = cls(path, files)
                if files is _V2:
                    cg._write("memory.swap.max", "0")
                return cg
            path.rmdir()
        return None

    @property
    def procs(self) -> str:
        """The file a process writes its pid to, to join."""
        return str(self.path / "cgroup.procs")

    def usage(self) -> int:
        return int((self.path / self._files["usage"]).read_text())

    def limit(self, n_bytes: int) -> None:
        self._write(self._files["limit"], str(n_bytes))

    def limit_bytes(self) -> int:
        text = (self.path / self._files["limit"]).read_text().strip()
        return -1 if text == "max" else int(text)

    def join(self, pid: int) -> None:
        """Move process `pid` here (nothing when it has ended)."""
        try:
            self._write("cgroup.procs", str(pid))
        except OSError as e:
            if e.errno != errno.ESRCH:
                raise

    def adopt(self, old: MemoryCgroup) -> None:
        """Move every process of `old` here (none is starting: the sandbox is between jobs); their charges
        stay with `old`."""
        for _ in range(100):
            try:
                pids = (old.path / "cgroup.procs").read_text().split()
            except FileNotFoundError:
                return
            live = [int(pid) for pid in pids if not _ended(int(pid))]
            if not live:  # an ended job server stays listed until the runner reaps it
                return
            for pid in live:
                self.join(pid)
        raise OSError(errno.EBUSY, f"processes keep appearing in {old.path}")

    def oom_kills(self) -> int:
        """Processes the kernel killed in this cgroup for its limit, so far."""
        for line in (self.path / self._files["events"]).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def empty(self) -> int:
        """Reclaim what the cgroup holds (page cache, freed tmpfs, slab), so that no charge keeps it alive once
        removed (a dying cgroup, issue 58) and nothing left counts against its next job; the bytes still
        charged (what no reclaim frees: live processes' anonymous pages without swap)."""
        try:
            self._write(self._files["empty"], "0" if self._files is _V1 else str(1 << 40))
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EBUSY):  # v2: not all of it could be reclaimed
                raise
        return self.usage()

    def remove(self, wait: bool = True) -> bool:
        """Remove the (emptied) cgroup, its pages reclaimed first; its last processes may take a moment to
        leave it (`wait`: up to 2 s, else one try). Whether it is gone."""
        try:
            self.empty()
        except OSError:
            pass  # gone, or processes still leaving: rmdir says which
        for _ in range(2000 if wait else 1):
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as e:
                error = e
                if wait:
                    time.sleep(0.001)
        if wait:
            log.warning("sandbox cgroup %s left behind: %s", self.path, error)
        return False

    def _write(self, name: str, value: str) -> None:
        try:
            (self.path / name).write_text(value)
        except OSError as e:
            raise OSError(e.errno, f"cgroup {self.path / name}: {e.strerror}") from None  # errno kept


def _ended(pid: int) -> bool:
    """Exiting (PF_EXITING: the kernel moves no such task; it only frees now), a zombie (not yet reaped) or
    gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[0] in "ZX" or bool(int(fields[6]) & 0x4)  # state; flags & PF_EXITING


def _parents() -> list[tuple[Path, dict[str, str]]]:
    """Where this process may make a memory cgroup: its own v1 memory cgroup, or its own v2 cgroup's
    parent where memory is delegated to children (a v2 cgroup with processes cannot have children)."""
    if os.geteuid() != 0:
        return []
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            found.append((_ROOT / "memory" / path.lstrip("/"), _V1))
        elif controllers == "" and (_ROOT / "cgroup.controllers").exists():
            parent = (_ROOT / path.lstrip("/")).parent if path != "/" else _ROOT
            try:
                if "memory" in (parent / "cgroup.subtree_control").read_text().split():
                    found.append((parent, _V2))
            except OSError:
                continue
    return found
