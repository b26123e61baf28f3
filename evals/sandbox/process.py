"""The grader's side of the sandbox: `Job`, `RunResult` and `Runner`, which launches one isolated runner
process through a given backend and talks to it.

A `Runner` executes jobs (one job = one program run on one stdin) one after another, each in a fresh job
server forked by the runner (which never reads a job): fresh pid, mount, IPC and net namespaces, /tmp and
/dev/shm (sized by the job's memory limit) and session keyring, so no job sees what an earlier one left or
held (a checker's expected output included). Layers, outermost first:

    grader thread --Popen--> [root only: drop shim] --exec--> backend --> runner (pid 1 of its namespace)
    runner --fork--> job server (reads the job; pid 1 of fresh pid, mount, IPC, net namespaces; no capabilities)
    job server --fork--> the program: own rlimits, process group and seccomp filter, stdin from memfd

The backends (bwrap, unshare, plain) and the root uid-drop shim live in `backends`, the probe that
picks one in `choose` (which runs its probe through a `Runner`); the runner, shipped into the sandbox as
source, lives in `runner`. The package's face (gspo.evals.sandbox) is `Sandbox`: a Runner on the backend
the probe chose. Language-level guards are not used: ctypes bypasses them.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import select
import signal
import site
import stat
import struct
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field

import psutil

from gspo.evals.sandbox.backends import Backend, launch_argv, sandbox_env
from gspo.evals.sandbox.cgroup import MemoryCgroup
from gspo.evals.sandbox.seccomp import seccomp_program
from gspo.evals.sandbox.uids import UidLease, lease

log = logging.getLogger("gspo.evals.sandbox")

_STARTUP_MARGIN_S = 15.0  # beyond a job's wall limit: sandbox start-up, prelude import, reply transfer
_HEADER = struct.Struct("!Q")
_META_BYTES = 1 << 16  # the reply's JSON header; stderr is kept to its last 64 KiB by the runner too
_STDERR_BYTES = 1 << 16
_CGROUP_MARGIN = 32 << 20  # a job server's own pages (copies of the runner's) and the program's interpreter
_CGROUP_LEFTOVER = 2 << 20  # charges a reused cgroup may keep (the runner's own pages), counted against the margin
_TMPFS_INODES = 4096  # files and folders in each of a job's /tmp and /dev/shm
_CHUNK = 1 << 20  # characters of a job's file encoded and sent at a time


@dataclass(frozen=True)
class Job:
    """One program run. Times in seconds, sizes in bytes unless named _mb."""

    code: str
    stdin: str = ""
    cpu_s: float = 2.0  # CPU time limit; the runner polls it, RLIMIT_CPU is the backstop
    wall_s: float | None = None  # default 2 * cpu_s + 1: catches sleeping or blocked programs
    memory_mb: int = 256  # RLIMIT_AS on top of the interpreter's own address space; also the bytes the
    # sandbox's /tmp and /dev/shm hold together (15/16 and 1/16), files given in `files` added
    fn_name: str | None = None  # functional mode: call this function/method with JSON args from stdin
    prelude: str = ""  # trusted source executed once in the runner; its names seed the program's globals
    exit_ok: bool = False  # treat SystemExit of any code as a normal end (LiveCodeBench harness does)
    recursion_limit: int = 1000
    filename: str = "solution.py"
    argv: tuple[str, ...] = ("solution.py",)
    files: dict[str, str] = field(default_factory=dict)  # written to the working dir before the run
    output_bytes: int = 16 << 20  # stdout beyond this kills the run
    fsize_bytes: int = 16 << 20  # RLIMIT_FSIZE: largest file the program may write
    nproc: int = 16  # RLIMIT_NPROC: tasks of the sandbox uid (per user namespace), runner included;
    # without a memory cgroup, (nproc + 1) * memory_mb bounds what one sandbox can take

    @property
    def wall_limit(self) -> float:
        return self.wall_s if self.wall_s is not None else 2.0 * self.cpu_s + 1.0

    def files_bytes(self) -> int:
        """The UTF-8 size of the job's files, encoded a chunk at a time (no copy of a 16 MiB file: 48 MiB for
        one of U+FFFD, the decoded form of invalid bytes)."""
        return sum(len(text[i:i + _CHUNK].encode()) for text in self.files.values() for i in range(0, len(text), _CHUNK))

    def tmpfs_bytes(self) -> dict[str, int]:
        """Sizes of the sandbox's writable tmpfs mounts: memory_mb in all, plus the job's own files."""
        mem, files = self.memory_mb << 20, self.files_bytes()
        return {"/tmp": mem - mem // 16 + files + (1 << 20), "/dev/shm": max(mem // 16, 1 << 20)}


@dataclass(frozen=True)
class RunResult:
    """What happened to one job. `limit` is "cpu", "wall" or "output" when the runner killed it, "memory"
    when the kernel did, for the sandbox's memory cgroup (where there is one). cpu_s
    counts every process the program started; stdout and stderr came as bytes, capped, decoded once."""

    exit_code: int | None = None
    signal: int | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    max_rss_mb: float = 0.0
    server_cpu_s: float = 0.0  # what the job server spent reading the program's output: charged to no one
    stdout: str = ""
    stderr: str = ""
    limit: str | None = None
    compiled: bool = False
    error: str | None = None  # the sandbox itself failed (runner gone, no reply in time)


# ---------------------------------------------------------------------------------------------------
# Grader side: launching the runner, talking to it, choosing the backend once per process.

SESSION_TAG = secrets.token_hex(4)  # this grader process's sandboxes' ids start with it (GSPO_SANDBOX_ID)


class _SandboxDied(Exception):
    pass


class Runner:
    """An isolated runner on the backend `choice` that executes `Job`s one after another; a context
    manager. Code outside the sandbox package uses `Sandbox`, which picks the backend."""

    def __init__(self, choice: Backend, *, watch_uids: bool = False) -> None:
        self._choice = choice
        self._watch_uids = watch_uids
        self.host_uids: set[int] = set()  # watch_uids: real uids, seen from here, of the last run's processes
        self.uid: UidLease | None = None  # root: the host uid this sandbox runs as, its own while it lives
        self.cgroup: MemoryCgroup | None = None  # root, where the machine allows one: the job's (fresh for each)
        self._spare: MemoryCgroup | None = None  # the job before's, reused for the next job once reclaimed
        self._old_cgroups: list[MemoryCgroup] = []  # replaced ones (emptied), removed as soon as the kernel lets
        self._proc: subprocess.Popen | None = None
        self._workdir: str | None = None
        self._stderr = None
        self.session_id = ""

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, job: Job) -> RunResult:
        """Run one job (in a fresh job server); a dead or stuck runner gives `RunResult.error` and a fresh
        runner next time."""
        if self._proc is None:
            try:
                self._start(job.prelude)
            except OSError as e:
                self.close()
                return RunResult(error=f"cannot start the sandbox: {e}")
        # the job's files (a checker's copy of the program's output among them) follow it as raw byte frames,
        # encoded a chunk at a time: no copy of a file in the grader (before: UTF-8, base64 and JSON copies of
        # 16 MiB of invalid UTF-8 grew it by 224 MiB; issue 58)
        payload = json.dumps({**asdict(job), "wall_s": job.wall_limit, "tmpfs": job.tmpfs_bytes(),
                              "files": list(job.files)}).encode()
        try:
            ooms = self._limit_memory(job)
            _write_all(self._proc.stdin.fileno(), _HEADER.pack(len(payload)))
            _write_all(self._proc.stdin.fileno(), payload)
            for text in job.files.values():
                _write_text(self._proc.stdin.fileno(), text)
            deadline = time.monotonic() + job.wall_limit + _STARTUP_MARGIN_S
            fd = self._proc.stdout.fileno()
            meta, out, err = (_read_frame(fd, deadline, cap) for cap in (_META_BYTES, job.output_bytes, _STDERR_BYTES))
        except (OSError, _SandboxDied) as e:
            error = f"sandbox runner ended unexpectedly ({e}); {self._stderr_tail()}"
            log.warning("%s", error)  # a program can cause this only without a pid namespace
            self.close()
            return RunResult(error=error)
        if self._watch_uids:
            self.host_uids = _tree_uids(self._proc.pid)
        result = json.loads(meta)
        if self.cgroup is not None and self.cgroup.oom_kills() > ooms:
            result["limit"] = "memory"  # the cause, whatever a killed worker then made the program do
        stdout = out.decode("utf-8", "replace")  # 4 bytes a character once one is astral (CPython's str)
        del out  # the bytes go before anything compares the text
        return RunResult(**result, stdout=stdout, stderr=err.decode("utf-8", "replace"))

    def _limit_memory(self, job: Job) -> int:
        """Move the sandbox into a memory cgroup emptied for `job`, whose limit is the job's own budget: twice
        memory_mb (each process keeps its own RLIMIT_AS of memory_mb, so one-process verdicts do not change), the
        job's files and a margin for the job server's pages. Two cgroups take turns (issue 58: a fresh one per
        job left one dying cgroup per test, its page cache still charged): the one the job before last used is
        reclaimed first and reused when at most _CGROUP_LEFTOVER stays charged (the runner's own pages), else
        replaced by a fresh one; so nothing earlier jobs left raises the limit (issue 46). The OOM kills so far."""
        if self.cgroup is None:
            return 0
        target, self._spare = self._spare, None
        if target is not None and target.empty() > _CGROUP_LEFTOVER:
            self._old_cgroups.append(target)
            target = None
        if target is None:
            target = MemoryCgroup.create(f"gspo-sandbox-{secrets.token_hex(8)}")  # no pid or count: the program sees it
            if target is None:
                raise OSError("cannot make the job's memory cgroup")
        files = job.files_bytes()
        current, self.cgroup = self.cgroup, target  # (before the move: close() removes both should it fail)
        target.limit(2 * (job.memory_mb << 20) + files + _CGROUP_MARGIN)
        for old in [current, *self._old_cgroups]:  # any not yet removed too: the shim may join its first one late
            target.adopt(old)
        self._old_cgroups = [cg for cg in self._old_cgroups if not cg.remove(wait=False)]
        self._spare = current
        return target.oom_kills()

    def close(self) -> None:
        """Kill the runner and everything it started; remove the working dir and the cgroup."""
        if self._proc is not None:
            _kill_tree(self._proc)
            self._proc.stdin.close()
            self._proc.stdout.close()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._workdir is not None:
            _remove_tree(self._workdir)
            self._workdir = None
        if self.uid is not None:  # only now: nothing of the sandbox runs under it any more
            self.uid.release()
            self.uid = None
        for cgroup in [*self._old_cgroups, *(cg for cg in (self.cgroup, self._spare) if cg)]:
            cgroup.remove()
        self.cgroup, self._spare, self._old_cgroups = None, None, []

    def _start(self, prelude: str) -> None:
        self.session_id = f"{SESSION_TAG}-{secrets.token_hex(8)}"  # no pid, no count: the program sees it
        name, drop = self._choice.name, self._choice.drop_uid
        if drop:  # per-user kernel quotas then are this sandbox's alone (uids.py)
            self.uid = lease()
        if name != "bwrap":  # plain: the working dir; unshare: the empty folder its new root is mounted on
            self._workdir = tempfile.mkdtemp(prefix=f"gspo-sandbox-{os.getpid()}-")  # the pid: whose folder it is
            if drop:
                os.chown(self._workdir, self.uid.uid, self.uid.uid)
        workdir = self._workdir if name == "plain" else "/tmp/work"
        env = sandbox_env(workdir, self.session_id)
        if drop:
            self.cgroup = MemoryCgroup.create(f"gspo-sandbox-{secrets.token_hex(8)}")
        program = seccomp_program()
        cfg = {"workdir": workdir, "sys_path": [p for p in site.getsitepackages() if os.path.isdir(p)],
               "root": self._workdir, "seccomp": program.hex() if isinstance(program, bytes) else "",
               "inodes": _TMPFS_INODES, "prelude": prelude, "cgroup": self.cgroup and self.cgroup.procs}
        argv = launch_argv(self._choice, cfg, env, self.uid and self.uid.uid)
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      env=env, start_new_session=True, bufsize=0)
        if self.cgroup is not None:  # the shim starts nothing before this byte: nothing escapes the cgroup
            self.cgroup.join(self._proc.pid)
            _write_all(self._proc.stdin.fileno(), b"g")

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return "no runner output"
        self._stderr.seek(0)
        lines = self._stderr.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else "no runner output"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_text(fd: int, text: str) -> None:
    """`text` as UTF-8 in frames of at most 1 Mi characters each (8-byte length, bytes), then an empty frame."""
    for start in range(0, len(text), _CHUNK):
        chunk = text[start:start + _CHUNK].encode()
        _write_all(fd, _HEADER.pack(len(chunk)))
        _write_all(fd, chunk)
    _write_all(fd, _HEADER.pack(0))


def _read_frame(fd: int, deadline: float, cap: int) -> bytearray:
    """One length-prefixed frame; a length past `cap` is refused before anything is read into memory."""
    size = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))[0]
    if size > cap:
        raise _SandboxDied(f"a reply of {size} bytes, over the cap of {cap}")
    return _read_exact(fd, size, deadline)


def _read_exact(fd: int, n: int, deadline: float) -> bytearray:
    """n bytes, read into one buffer of that size (no growth, no copy: a 16 MiB output is held once)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise _SandboxDied("no reply in time")
        k = os.readv(fd, [view[got:got + (1 << 20)]])
        if not k:
            raise _SandboxDied("runner closed its output")
        got += k
    view.release()
    return buf


def _remove_tree(top: str) -> None:
    """Remove a folder whatever a program left in it (a tree deeper than the recursion limit or than
    PATH_MAX included): flatten it one level at a time into `top`, through directory descriptors."""
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        while (entries := os.listdir(fd)) and _flatten(fd, entries):
            pass
    finally:
        os.close(fd)
    try:
        os.rmdir(top)
    except OSError as e:
        log.warning("sandbox folder %s left behind: %s", top, e)


def _flatten(top_fd: int, entries: list[str]) -> bool:
    """Remove files and empty folders of `top_fd`, lift the entries of the others into it; False when
    nothing changed (what is left cannot be removed)."""
    changed = False
    for name in entries:
        try:
            if stat.S_ISDIR(os.lstat(name, dir_fd=top_fd).st_mode):
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top_fd)
                try:
                    os.chmod(sub, 0o700)  # a program may leave folders it made unreadable
                    for inner in os.listdir(sub):
                        os.rename(inner, f".gspo-{secrets.token_hex(8)}", src_dir_fd=sub, dst_dir_fd=top_fd)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=top_fd)
            else:
                os.unlink(name, dir_fd=top_fd)
            changed = True
        except OSError:
            continue
    return changed


def _tree_uids(pid: int) -> set[int]:
    """Real uids of process `pid` and everything under it (a job server may end meanwhile); {0} when the
    launched process's own cannot be read."""
    try:
        launched = psutil.Process(pid)
        uids, children = {launched.uids().real}, launched.children(recursive=True)
    except psutil.Error:
        return {0}
    for child in children:
        try:
            uids.add(child.uids().real)
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            return {0}
    return uids


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launched process, its process group and every descendant still visible."""
    try:  # once reaped, its pid may be another process's: then only its process group is ours
        descendants = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    except psutil.Error:
        descendants = []
    for p in descendants:
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.kill()
    proc.wait()
