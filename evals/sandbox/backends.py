"""Sandbox backends: the command that launches the runner through each (the probe that picks one lives
in choose).

Backends, best first, each probed once per process by running a probe program through it. The sandbox
fails closed: the first backend that shows every STRONG protection (host filesystem hidden, nothing
written outside a private /tmp, /dev/shm and /var/tmp, no host socket reachable, unix ones included, no
nested user namespace, own pid and net namespaces) is used; with none, untrusted code is refused with one
line saying what to install, unless weak isolation is accepted explicitly (GSPO_SANDBOX_WEAK=1):
  bwrap    bubblewrap: user, pid, net, ipc, uts, mount namespaces; a read-only root built from /usr, the
           Python prefix and a few /etc files; no capabilities for programs (bwrap leaves CAP_SYS_ADMIN to
           the runner, whose job servers use it for their namespaces and tmpfs, then drop it); nested
           user namespaces disabled where bwrap supports it.
Under both, each job runs in pid, mount, IPC and network namespaces of its own with fresh size- and
inode-capped tmpfs /tmp and /dev/shm, the only writable places (runner._rn_isolate).
  unshare  util-linux unshare into user, mount, pid, net, ipc and uts namespaces, then the same view
           of the filesystem as bwrap, built by unshare.py, and uid/gid 65534 in a nested user namespace
           with root unmapped (as bwrap's --uid); no capabilities, no further user namespaces.
  plain    a process group with rlimits, nothing more.
Run as root, a small shim (`_shim_main`, shipped as source like the runner) first drops to a host uid/gid
of the sandbox's own, leased from a range no one else uses (uids.py), after exposing the Python prefix if it
lives under a directory that uid cannot enter, such as /root: the kernel ignores RLIMIT_NPROC for real
root, root-owned host files must stay out of reach, and per-user quotas (tasks, pipe pages, inotify, message
queues, pending signals) are then that sandbox's alone. Inside bwrap and unshare the program still sees uid
65534 (SANDBOX_UID); the plain backend runs it as the leased uid itself.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from gspo.evals.sandbox.runner import RUNNER_FUNCTIONS
from gspo.evals.sandbox.unshare import NS_FUNCTIONS

log = logging.getLogger("gspo.evals.sandbox")  # the sandbox's one logger name, as log settings know it

SANDBOX_UID = 65534  # "nobody": the uid programs see inside bwrap and unshare (a root grader's host uid is leased)
BACKENDS = ("bwrap", "unshare", "plain")
# The backend's own /tmp and /dev/shm, under each job server's fresh ones: mount points of a Python prefix
# that lives there, nothing else (runner._rn_isolate)
_BASE_TMPFS = {"/tmp": 1 << 20, "/dev/shm": 1 << 20}
_TOPS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/nsswitch.conf", "/etc/passwd",
              "/etc/group", "/etc/hosts")


# ---------------------------------------------------------------------------------------------------
# Launching: the command line of each backend, and the root shim.


@dataclass(frozen=True)
class Backend:
    name: str  # one of BACKENDS
    drop_uid: bool  # root only: run everything as a leased uid of the sandbox's own (uids.py)


@functools.cache
def _source(*functions: Callable, call: str) -> str:
    return "\n\n".join(inspect.getsource(f) for f in functions) + f"\n\n{call}()\n"


def launch_argv(choice: Backend, cfg: dict, env: dict[str, str], uid: int | None = None) -> list[str]:
    """The command that starts the runner with `cfg` through `choice`: backend, then the root shim, which
    drops to host uid/gid `uid` (choice.drop_uid: the sandbox's leased uid)."""
    under = [p for p in _python_paths() if any(p.startswith(t + "/") for t in _BASE_TMPFS)]
    cfg = {**cfg, "isolate": choice.name != "plain", "under_tmpfs": under}
    argv = [sys.executable, "-I", "-S", "-B", "-c", _source(*RUNNER_FUNCTIONS, call="_rn_main"),
            json.dumps(cfg)]
    if choice.name == "bwrap":
        argv = _bwrap_argv(argv, env)
    elif choice.name == "unshare":
        argv = _unshare_argv(argv, cfg["root"], cfg["inodes"])
    if choice.drop_uid:
        argv = _shim_argv(argv, cfg.get("cgroup"), uid)
    return argv


def _python_paths() -> list[str]:
    """Directories the interpreter needs, minimal (none inside another), outside /usr."""
    exe_root = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix,
                                           sys.base_exec_prefix, exe_root)}
    paths = {p for p in paths if p != "/usr" and not p.startswith("/usr/")}
    return sorted(p for p in paths if not any(p.startswith(q + "/") for q in paths))


def _blocked_ancestor(path: str, uid: int, gid: int) -> str | None:
    """The first directory above `path` that uid/gid cannot traverse, or None."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        ancestor = "/" + "/".join(parts[:i])
        st = os.stat(ancestor)
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            return ancestor
    return None


def _shim_argv(argv: list[str], cgroup: str | None, uid: int) -> list[str]:
    expose: dict[str, list[str]] = {}
    for path in _python_paths():
        blocker = _blocked_ancestor(path, uid, uid)
        if blocker:
            expose.setdefault(blocker, []).append(path)
    cfg = {"uid": uid, "gid": uid, "expose": sorted(expose.items()), "cgroup": cgroup}
    return [sys.executable, "-I", "-S", "-c", _source(_shim_main, call="_shim_main"), json.dumps(cfg), *argv]


@functools.cache
def _bwrap_help() -> str:
    try:
        return subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _bwrap_argv(runner: list[str], env: dict[str, str]) -> list[str]:
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--as-pid-1", "--new-session",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
            "--cap-add", "CAP_SYS_ADMIN"]  # for the job servers' namespaces and tmpfs; they drop it (_rn_isolate)
    if "--disable-userns" in _bwrap_help():
        argv.append("--disable-userns")  # no nested namespace in which the program gets capabilities
    for top in _TOPS:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    sized = "--size" in _bwrap_help()  # bwrap >= 0.5; bwrap cannot cap a tmpfs's inodes
    for path in ("/dev/shm", "/tmp"):  # /tmp before the binds: a Python prefix may live under /tmp (a venv)
        argv += [*(["--size", str(_BASE_TMPFS[path])] if sized else []), "--tmpfs", path]
    for path in [*(f for f in _ETC_FILES if os.path.exists(f)), *_python_paths()]:
        argv += ["--ro-bind", path, path]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *runner]


def _unshare_argv(runner: list[str], root: str, inodes: int) -> list[str]:
    """util-linux unshare into new namespaces, then `_ns_main` builds bwrap's filesystem view at `root`
    (an empty host folder) and execs the runner; see unshare.py."""
    links = {top: os.readlink(top) for top in _TOPS if os.path.islink(top)}
    binds = [top for top in _TOPS if os.path.isdir(top) and top not in links]
    binds += [*(f for f in _ETC_FILES if os.path.exists(f)), *_python_paths()]
    cfg = {"root": root, "links": links, "binds": binds, "tmpfs": _BASE_TMPFS, "inodes": inodes, "uid": SANDBOX_UID}
    return [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
            "--kill-child", "--net", "--ipc", "--uts", "--", sys.executable, "-I", "-S", "-B", "-c",
            _source(*NS_FUNCTIONS, call="_ns_main"), json.dumps(cfg), *runner]


def sandbox_env(workdir: str, session: str) -> dict[str, str]:
    """The whole environment of sandboxed code: no tokens, keys or user settings leak in."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir,
            "TMPDIR": workdir, "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "GSPO_SANDBOX_ID": session}


def _shim_main() -> None:
    """Root only, before the backend: wait until the grader has moved us into the sandbox's memory cgroup
    (before anything starts, so nothing escapes it), expose the Python prefix to the sandbox's uid, drop to it, exec."""
    import ctypes
    import json
    import os
    import sys

    cfg = json.loads(sys.argv[1])
    if cfg["cgroup"]:  # wait until the grader has put us in the sandbox's memory cgroup: one byte on stdin
        if os.read(0, 1) != b"g":  # (joining it ourselves raced with the grader moving us on and removing it)
            sys.exit("no go from the grader")
    if cfg["expose"]:
        libc = ctypes.CDLL(None, use_errno=True)

        def mount(src, dst, fstype, flags, data):
            if libc.mount(src, dst, fstype, flags, data) != 0:
                raise OSError(ctypes.get_errno(), f"mount {dst}")

        if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS: these mounts stay private to the sandbox
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
        mount(None, b"/", None, 16384 | (1 << 18), None)  # MS_REC | MS_PRIVATE
        for blocker, paths in cfg["expose"]:
            fds = [os.open(p, os.O_PATH) for p in paths]
            mount(b"tmpfs", blocker.encode(), b"tmpfs", 2 | 4, b"mode=755,size=1m")  # nosuid, nodev
            for path, fd in zip(paths, fds, strict=True):
                os.makedirs(path, exist_ok=True)
                mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, 4096 | 16384, None)  # rbind
    os.setgroups([])
    os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
    os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    os.execv(sys.argv[2], sys.argv[2:])
