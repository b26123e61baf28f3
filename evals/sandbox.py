"""Sandbox for every execution of model-written code.

One `Sandbox` is one isolated runner process that executes jobs (one job = one program run on one stdin)
one after another. Layers, outermost first:

    grader thread --Popen--> [root only: drop shim] --exec--> backend --> runner (pid 1 of its namespace)
    runner --fork--> one child per job: own rlimits, own process group, fresh working dir, stdin from memfd

This module is the grader's side: `Job`, `RunResult`, `Sandbox` (launching and talking to the runner),
`sandbox_protections`, `sandbox_backend` and `parallel_map`. The backends (bwrap, unshare, plain) and the
root uid-drop shim live in `sandbox_backends`, the probe that picks one in `sandbox_select`; the runner, shipped into
the sandbox as source, lives in `sandbox_runner`. `sandbox_protections()` reports what the probe
*observed*, and a warning names any protection that is missing. Language-level guards are not used:
ctypes bypasses them.
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
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import TypeVar

import psutil

# re-exported: BACKENDS and SANDBOX_UID are public here, and tests clear the backend cache through here
from gspo.evals.sandbox_backends import BACKENDS as BACKENDS
from gspo.evals.sandbox_backends import SANDBOX_UID as SANDBOX_UID
from gspo.evals.sandbox_backends import _Backend, _launch_argv, _sandbox_env
from gspo.evals.sandbox_select import _probed, _select_backend

log = logging.getLogger(__name__)

_STARTUP_MARGIN_S = 15.0  # beyond a job's wall limit: sandbox start-up, prelude import, reply transfer
_HEADER = struct.Struct("!Q")
_T = TypeVar("_T")
_R = TypeVar("_R")


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


class Sandbox:
    """An isolated runner that executes `Job`s one after another. Use as a context manager.

    >>> with Sandbox() as sb:  # doctest: +SKIP
    ...     sb.run(Job(code="print(int(input()) * 2)", stdin="21\\n")).stdout
    '42\\n'
    """

    def __init__(self, backend: str | None = None, *, _choice: _Backend | None = None) -> None:
        self._choice = _choice or _choose(backend)
        self._proc: subprocess.Popen | None = None
        self._workdir: str | None = None
        self._stderr = None
        self.session_id = ""

    def __enter__(self) -> Sandbox:
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
        env = _sandbox_env(workdir, self.session_id)
        cfg = {"workdir": workdir, "sys_path": [p for p in site.getsitepackages() if os.path.isdir(p)],
               "root": self._workdir}
        argv = _launch_argv(self._choice, cfg, env)
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



def _choose(backend: str | None) -> _Backend:
    """A backend named in code is the caller's explicit choice; otherwise GSPO_SANDBOX_BACKEND or the
    best installed one, which must isolate strongly (sandbox_select.STRONG) unless GSPO_SANDBOX_WEAK=1."""
    if backend:
        return _select_backend(backend, strict=False)
    return _select_backend(os.environ.get("GSPO_SANDBOX_BACKEND") or None)


def sandbox_protections(backend: str | None = None) -> dict[str, bool]:
    """Protections observed by the probe for the backend in use (probed once per process).

    Keys: user_ns, pid_ns, net_ns, mount_ns, ipc_ns, readonly_fs (nothing outside the sandbox's own
    tmp is writable), host_fs_hidden, private_tmp (files in /tmp, /dev/shm, /var/tmp stay inside),
    host_sockets_blocked (no host unix socket, path or abstract, is reachable), no_nested_userns, unprivileged_uid (the real uid is not root), no_capabilities,
    no_new_privs (setuid binaries grant nothing), rlimits, nproc_limit (the kernel ignores RLIMIT_NPROC
    for real root), network_isolated, scrubbed_env.
    """
    return dict(_probed(_choose(backend)))


def sandbox_backend(backend: str | None = None) -> str:
    """Name of the backend in use, e.g. "bwrap (uid 65534)"."""
    choice = _choose(backend)
    return choice.name + (f" (uid {SANDBOX_UID})" if choice.drop_uid else "")


# ---------------------------------------------------------------------------------------------------
# Parallel grading.


def parallel_map(fn: Callable[[_T], _R], items: Iterable[_T], *, workers: int | None = None,
                 progress: bool = False, description: str = "grading") -> list[_R]:
    """`[fn(x) for x in items]` on a thread pool (each call spawns its own sandboxed processes).

    workers defaults to the number of CPUs; progress shows a rich progress bar."""
    items = list(items)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        results: list = [None] * len(items)
        done = as_completed(futures)
        if progress:
            from rich.progress import track

            done = track(done, total=len(items), description=description)
        for future in done:
            results[futures[future]] = future.result()
    return results
