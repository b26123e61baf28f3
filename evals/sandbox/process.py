"""The grader's side of the sandbox: `Job`, `RunResult` and `Runner`, which launches one isolated runner
process through a given backend and talks to it.

One runner is one isolated process that executes jobs (one job = one program run on one stdin)
one after another. Layers, outermost first:

    grader thread --Popen--> [root only: drop shim] --exec--> backend --> runner (pid 1 of its namespace)
    runner --fork--> one child per job: own rlimits, own process group, fresh working dir, stdin from memfd

The backends (bwrap, unshare, plain) and the root uid-drop shim live in `backends`, the probe that
picks one in `choose` (which runs its probe through a `Runner`); the runner, shipped into the sandbox as
source, lives in `runner`. The package's face (gspo.evals.sandbox) is `Sandbox`: a Runner on the backend
the probe chose. Language-level guards are not used: ctypes bypasses them.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import site
import struct
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field

import psutil

from gspo.evals.sandbox.backends import SANDBOX_UID, Backend, launch_argv, sandbox_env

log = logging.getLogger("gspo.evals.sandbox")

_STARTUP_MARGIN_S = 15.0  # beyond a job's wall limit: sandbox start-up, prelude import, reply transfer
_HEADER = struct.Struct("!Q")


@dataclass(frozen=True)
class Job:
    """One program run. Times in seconds, sizes in bytes unless named _mb."""

    code: str
    stdin: str = ""
    cpu_s: float = 2.0  # CPU time limit; the runner polls it, RLIMIT_CPU is the backstop
    wall_s: float | None = None  # default 2 * cpu_s + 1: catches sleeping or blocked programs
    memory_mb: int = 256  # RLIMIT_AS on top of the interpreter's own address space
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
    # without a memory cgroup, nproc * memory_mb bounds what one sandbox can take

    @property
    def wall_limit(self) -> float:
        return self.wall_s if self.wall_s is not None else 2.0 * self.cpu_s + 1.0


@dataclass(frozen=True)
class RunResult:
    """What happened to one job. `limit` is "cpu", "wall" or "output" when the runner killed it."""

    exit_code: int | None = None
    signal: int | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    max_rss_mb: float = 0.0
    stdout: str = ""
    stderr: str = ""
    limit: str | None = None
    compiled: bool = False
    error: str | None = None  # the sandbox itself failed (runner gone, no reply in time)


# ---------------------------------------------------------------------------------------------------
# Grader side: launching the runner, talking to it, choosing the backend once per process.

_SESSIONS = iter(range(1 << 62))


class _SandboxDied(Exception):
    pass


class Runner:
    """An isolated runner on the backend `choice` that executes `Job`s one after another; a context
    manager. Code outside the sandbox package uses `Sandbox`, which picks the backend."""

    def __init__(self, choice: Backend) -> None:
        self._choice = choice
        self._proc: subprocess.Popen | None = None
        self._workdir: str | None = None
        self._stderr = None
        self.session_id = ""

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, job: Job) -> RunResult:
        """Run one job; a dead or stuck runner gives `RunResult.error` and a fresh runner next time."""
        if self._proc is None:
            try:
                self._start()
            except OSError as e:
                self.close()
                return RunResult(error=f"cannot start the sandbox: {e}")
        payload = json.dumps({**asdict(job), "wall_s": job.wall_limit}).encode()
        try:
            _write_all(self._proc.stdin.fileno(), _HEADER.pack(len(payload)) + payload)
            reply = _read_frame(self._proc.stdout.fileno(), time.monotonic() + job.wall_limit + _STARTUP_MARGIN_S)
        except (OSError, _SandboxDied) as e:
            error = f"sandbox runner ended unexpectedly ({e}); {self._stderr_tail()}"
            log.warning("%s", error)  # a program can cause this only without a pid namespace
            self.close()
            return RunResult(error=error)
        return RunResult(**json.loads(reply))

    def close(self) -> None:
        """Kill the runner and everything it started; remove the working dir."""
        if self._proc is not None:
            _kill_tree(self._proc)
            self._proc.stdin.close()
            self._proc.stdout.close()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def _start(self) -> None:
        self.session_id = f"{os.getpid()}-{next(_SESSIONS)}"
        name, drop = self._choice.name, self._choice.drop_uid
        if name != "bwrap":  # plain: the working dir; unshare: the empty folder its new root is mounted on
            self._workdir = tempfile.mkdtemp(prefix="gspo-sandbox-")
            if drop:
                os.chown(self._workdir, SANDBOX_UID, SANDBOX_UID)
        workdir = self._workdir if name == "plain" else "/tmp/work"
        env = sandbox_env(workdir, self.session_id)
        cfg = {"workdir": workdir, "sys_path": [p for p in site.getsitepackages() if os.path.isdir(p)],
               "root": self._workdir}
        argv = launch_argv(self._choice, cfg, env)
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      env=env, start_new_session=True, bufsize=0)

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


def _read_frame(fd: int, deadline: float) -> bytes:
    header = _read_exact(fd, _HEADER.size, deadline)
    return _read_exact(fd, _HEADER.unpack(header)[0], deadline)


def _read_exact(fd: int, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise _SandboxDied("no reply in time")
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise _SandboxDied("runner closed its output")
        buf += chunk
    return bytes(buf)


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launched process, its process group and every descendant still visible."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
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
