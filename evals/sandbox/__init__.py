"""The sandbox for every execution of model-written code: its public face.

    with Sandbox() as sb:
        sb.run(Job(code="print(int(input()) * 2)", stdin="21\n")).stdout   # '42\n'

One `Sandbox` is one isolated runner process that executes jobs (one job = one program run on one stdin)
one after another, each in a fresh job server it forks. Layers, outermost first:

    grader thread --Popen--> [root only: drop shim] --exec--> backend --> runner (pid 1 of its namespace)
    runner --fork--> one job server per job: pid 1 of fresh pid, mount, IPC and net namespaces, fresh /tmp,
                     /dev/shm and session keyring, no capabilities
    job server --fork--> the program: own rlimits, process group and seccomp filter, stdin from memfd

Inside the package: `process` (Job, RunResult, Runner: launching and talking to the runner through a
given backend), `backends` (bwrap, unshare, plain; the root uid-drop shim), `seccomp` (the filter every
program runs under), `cgroup` (the sandbox's memory cgroup where the machine allows one), `uids` (a root grader's host uid
per sandbox, leased), `choose` (the probe that observes what each backend really isolates, and the
fail-closed choice), `runner` and `unshare` (code shipped into the sandbox as source). `sandbox_protections()` reports what the probe *observed*, and a
warning names any protection that is missing. `choose` imports
`process`, which imports `backends`, `seccomp`, `cgroup` and `uids`; `backends` imports `runner` and `unshare`.
"""

from __future__ import annotations

import os

from gspo.evals.sandbox.backends import BACKENDS, SANDBOX_UID, Backend
from gspo.evals.sandbox.choose import STRONG, WEAK_ENV, clear_probe_cache, probed, select_backend
from gspo.evals.sandbox.process import Job, Runner, RunResult

__all__ = ["BACKENDS", "SANDBOX_UID", "STRONG", "WEAK_ENV", "Job", "RunResult", "Sandbox", "accept_weak", "clear_probe_cache",
           "sandbox_backend", "sandbox_protections"]


class Sandbox(Runner):
    """An isolated runner that executes `Job`s one after another, on `backend` (bwrap, unshare, plain) or,
    by default, GSPO_SANDBOX_BACKEND or the best installed backend that isolates strongly (STRONG), unless
    GSPO_SANDBOX_WEAK=1. Use as a context manager."""

    def __init__(self, backend: str | None = None) -> None:
        super().__init__(_choose(backend))


def _choose(backend: str | None) -> Backend:
    """A backend named in code is the caller's explicit choice; otherwise GSPO_SANDBOX_BACKEND or the
    best installed one, which must isolate strongly (STRONG) unless GSPO_SANDBOX_WEAK=1."""
    if backend:
        return select_backend(backend, strict=False)
    return select_backend(os.environ.get("GSPO_SANDBOX_BACKEND") or None)


def sandbox_protections(backend: str | None = None) -> dict[str, bool]:
    """Protections observed by the probe for the backend in use (probed once per process).

    Keys: user_ns, pid_ns, net_ns, mount_ns, ipc_ns, readonly_fs (nothing outside the sandbox's own
    tmp is writable), host_fs_hidden, private_tmp (files in /tmp, /dev/shm, /var/tmp stay inside),
    host_sockets_blocked (no host unix socket, path or abstract, is reachable), no_nested_userns, unprivileged_uid (the real uid is not root), no_capabilities,
    no_new_privs (setuid binaries grant nothing), seccomp (the program runs under the filter), no_autoreap
    (no new SIGCHLD action: the kernel reaps no worker with its CPU uncounted), rlimits,
    nproc_limit (the kernel ignores RLIMIT_NPROC for real root), network_isolated, scrubbed_env,
    memory_cgroup (a root grader made one for the sandbox: every process's memory counted together).
    """
    return dict(probed(_choose(backend)))


def sandbox_backend(backend: str | None = None) -> str:
    """Name of the backend in use, e.g. "bwrap (own uid)": a root grader's sandboxes each run as a host uid
    of their own (uids.py)."""
    choice = _choose(backend)
    return choice.name + (" (own uid)" if choice.drop_uid else "")


def accept_weak(enabled: bool) -> None:
    """`eval.weak_sandbox=true`: accept a backend without strong isolation for this process (and the grading
    workers it starts), as GSPO_SANDBOX_WEAK=1 does; false leaves the environment's own setting."""
    if enabled:
        os.environ[WEAK_ENV] = "1"
