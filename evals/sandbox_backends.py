"""Sandbox backends: the command that launches the runner, and the probe that picks a backend.

Backends, best first, each probed once per process by running a probe program through it. The sandbox
fails closed: the first backend that shows every STRONG protection (host filesystem hidden, nothing
written outside a private /tmp, /dev/shm and /var/tmp, no host socket reachable, unix ones included, no
nested user namespace, own pid and net namespaces) is used; with none, untrusted code is refused with one
line saying what to install, unless weak isolation is accepted explicitly (GSPO_SANDBOX_WEAK=1):
  bwrap    bubblewrap: user, pid, net, ipc, uts, mount namespaces; a read-only root built from /usr, the
           Python prefix and a few /etc files; a size-capped tmpfs /tmp as the only writable place;
           no capabilities; nested user namespaces disabled where bwrap supports it.
  unshare  util-linux unshare into user, mount, pid, net, ipc and uts namespaces, then the same view
           of the filesystem as bwrap, built by sandbox_unshare; no capabilities, no nested user namespaces.
  plain    a process group with rlimits, nothing more.
Run as root, a small shim (`_shim_main`, shipped as source like the runner) first drops to uid/gid 65534
(after exposing the Python prefix if it lives under a directory that uid cannot enter, such as /root): the
kernel ignores RLIMIT_NPROC for real root, and root-owned host files must stay out of reach. The probe
records what it *observed* (namespaces, writes outside the sandbox, uid, capabilities, limits), and a
warning names any protection that is missing.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from gspo.conf.errors import GspoError
from gspo.evals.sandbox_runner import RUNNER_FUNCTIONS
from gspo.evals.sandbox_unshare import NS_FUNCTIONS

if TYPE_CHECKING:
    from gspo.evals.sandbox import Sandbox

log = logging.getLogger("gspo.evals.sandbox")  # the sandbox's one logger name, as log settings know it

SANDBOX_UID = 65534  # "nobody": the uid programs run as when the grader itself runs as root
BACKENDS = ("bwrap", "unshare", "plain")
_TMPFS_BYTES = 128 << 20  # the sandbox's writable /tmp (bwrap); /dev/shm gets a sixteenth of it
_TOPS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/nsswitch.conf", "/etc/passwd",
              "/etc/group", "/etc/hosts")


# ---------------------------------------------------------------------------------------------------
# Launching: the command line of each backend, and the root shim.


@dataclass(frozen=True)
class _Backend:
    name: str  # one of BACKENDS
    drop_uid: bool  # root only: run everything as SANDBOX_UID


@functools.cache
def _source(*functions: Callable, call: str) -> str:
    return "\n\n".join(inspect.getsource(f) for f in functions) + f"\n\n{call}()\n"


def _launch_argv(choice: _Backend, cfg: dict, env: dict[str, str]) -> list[str]:
    """The command that starts the runner with `cfg` through `choice`: backend, then the root shim."""
    argv = [sys.executable, "-I", "-S", "-B", "-c", _source(*RUNNER_FUNCTIONS, call="_rn_main"),
            json.dumps(cfg)]
    if choice.name == "bwrap":
        argv = _bwrap_argv(argv, env)
    elif choice.name == "unshare":
        argv = _unshare_argv(argv, cfg["root"])
    if choice.drop_uid:
        argv = _shim_argv(argv)
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


def _shim_argv(argv: list[str]) -> list[str]:
    expose: dict[str, list[str]] = {}
    for path in _python_paths():
        blocker = _blocked_ancestor(path, SANDBOX_UID, SANDBOX_UID)
        if blocker:
            expose.setdefault(blocker, []).append(path)
    cfg = {"uid": SANDBOX_UID, "gid": SANDBOX_UID, "expose": sorted(expose.items())}
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
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
    if "--disable-userns" in _bwrap_help():
        argv.append("--disable-userns")  # no nested namespace in which the program gets capabilities
    for top in _TOPS:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if "--size" in _bwrap_help():
        argv += ["--size", str(_TMPFS_BYTES // 16), "--tmpfs", "/dev/shm", "--size", str(_TMPFS_BYTES)]
    argv += ["--tmpfs", "/tmp"]  # before the binds: a Python prefix may live under /tmp (a venv there)
    for path in [*(f for f in _ETC_FILES if os.path.exists(f)), *_python_paths()]:
        argv += ["--ro-bind", path, path]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *runner]


def _unshare_argv(runner: list[str], root: str) -> list[str]:
    """util-linux unshare into new namespaces, then `_ns_main` builds bwrap's filesystem view at `root`
    (an empty host folder) and execs the runner; see sandbox_unshare."""
    links = {top: os.readlink(top) for top in _TOPS if os.path.islink(top)}
    binds = [top for top in _TOPS if os.path.isdir(top) and top not in links]
    binds += [*(f for f in _ETC_FILES if os.path.exists(f)), *_python_paths()]
    cfg = {"root": root, "links": links, "binds": binds, "tmpfs": {"/tmp": _TMPFS_BYTES, "/dev/shm": _TMPFS_BYTES // 16}}
    return [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
            "--kill-child", "--net", "--ipc", "--uts", "--", sys.executable, "-I", "-S", "-B", "-c",
            _source(*NS_FUNCTIONS, call="_ns_main"), json.dumps(cfg), *runner]


def _sandbox_env(workdir: str, session: str) -> dict[str, str]:
    """The whole environment of sandboxed code: no tokens, keys or user settings leak in."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir,
            "TMPDIR": workdir, "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "GSPO_SANDBOX_ID": session}


def _shim_main() -> None:
    """Root only, before the backend: expose the Python prefix to the sandbox uid, drop to it, exec."""
    import ctypes
    import json
    import os
    import sys

    cfg = json.loads(sys.argv[1])
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


# ---------------------------------------------------------------------------------------------------
# Probing: which backend works here, and which protections it really gives.

_PROBE = r"""
import ctypes, json, os, resource, socket, sys
host = json.loads(sys.stdin.read())

def ns(kind):
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return None

def writes(path):
    try:
        with open(path, "w") as f:
            f.write("x")
    except OSError:
        return False
    os.unlink(path)
    return True

def connects(address):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect(address)
        return True
    except OSError:
        return False

for folder in ("/tmp", "/dev/shm", "/var/tmp"):  # the host looks for these after the probe
    try:
        open(os.path.join(folder, host["tag"]), "w").close()
    except OSError:
        pass
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({
    "ns": {k: ns(k) != v for k, v in host["ns"].items()},
    "caps": int(status["CapEff"], 16),
    "no_new_privs": status.get("NoNewPrivs", "0").strip() == "1",
    "sees_host": os.path.exists(host["canary"]),
    "writes_host": writes(os.path.join(host["canary"], "probe")) or writes("/gspo-sandbox-probe"),
    "host_socket": connects(host["socket"]) or connects("\0" + host["abstract"]),
    "interfaces": [name for _, name in socket.if_nameindex()],
    "as_limit": resource.getrlimit(resource.RLIMIT_AS)[0],
    "nproc_limit": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    "env": sorted(os.environ),
    "nested_userns": ctypes.CDLL(None).unshare(0x10000000) == 0,  # CLONE_NEWUSER; the probe ends right after
}))
"""
# What "strong" means: untrusted code runs only where all of these were observed (see sandbox_protections).
STRONG = ("host_fs_hidden", "readonly_fs", "private_tmp", "host_sockets_blocked", "no_nested_userns", "pid_ns",
          "net_ns")
WEAK_ENV = "GSPO_SANDBOX_WEAK"  # =1: accept a backend without STRONG isolation (also eval.weak_sandbox=true)
_NAMESPACES = {"user_ns": "user", "pid_ns": "pid", "net_ns": "net", "mount_ns": "mnt", "ipc_ns": "ipc"}


def _real_uids(sb: Sandbox) -> set[int]:
    """Real uids, as the host sees them, of the launched process and everything under it."""
    if sb._proc is None:
        return {0}
    try:
        launched = psutil.Process(sb._proc.pid)
        return {p.uids().real for p in [launched, *launched.children(recursive=True)]}
    except psutil.Error:
        return {0}


def _candidates(name: str | None) -> list[_Backend]:
    if name is not None and name not in BACKENDS:
        raise GspoError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
    names = [name] if name else [n for n in BACKENDS if n == "plain" or shutil.which(n)]
    drops = [True, False] if os.geteuid() == 0 else [False]
    return [_Backend(n, d) for d in drops for n in names]


def _probe(choice: _Backend) -> dict[str, bool] | str:
    """Run the probe program through `choice`; the protections it observed, or why it failed."""
    from gspo.evals.sandbox import Job, Sandbox  # a cycle at import time: Sandbox selects its backend here

    canary = tempfile.mkdtemp(prefix="gspo-probe-")
    os.chmod(canary, 0o1777)  # writable by anyone: only isolation can stop the probe writing here
    host_ns = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in _NAMESPACES.values()}
    tag = os.path.basename(canary) + "-left"  # not the canary's own name: the probe creates /tmp/<tag>
    listeners = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
    try:
        listeners[0].bind(os.path.join(canary, "sock"))
        os.chmod(os.path.join(canary, "sock"), 0o777)
        listeners[1].bind("\0" + tag)
        for listener in listeners:
            listener.listen(4)
        with Sandbox(_choice=choice) as sb:
            res = sb.run(Job(code=_PROBE, cpu_s=5, stdin=json.dumps(
                {"ns": host_ns, "canary": canary, "tag": tag, "socket": os.path.join(canary, "sock"), "abstract": tag})))
            uids = _real_uids(sb)
    finally:
        for listener in listeners:
            listener.close()
        shutil.rmtree(canary, ignore_errors=True)
        left = [f for f in (os.path.join(d, tag) for d in ("/tmp", "/dev/shm", "/var/tmp")) if os.path.exists(f)]
        for f in left:
            os.unlink(f)
    try:
        seen = json.loads(res.stdout)
    except ValueError:
        return res.error or res.stderr.strip()[-300:] or "no output"
    return _protections(seen, uids, left)


def _protections(seen: dict, uids: set[int], left: list[str]) -> dict[str, bool]:
    prot = {key: seen["ns"][kind] for key, kind in _NAMESPACES.items()}
    prot["readonly_fs"] = not seen["writes_host"]
    prot["host_fs_hidden"] = not seen["sees_host"]
    prot["private_tmp"] = not left  # nothing written to /tmp, /dev/shm or /var/tmp reached the host
    prot["host_sockets_blocked"] = not seen["host_socket"]
    prot["no_nested_userns"] = not seen["nested_userns"]
    prot["unprivileged_uid"] = 0 not in uids  # seen from the host: nested namespaces hide it inside
    prot["no_capabilities"] = seen["caps"] == 0
    prot["no_new_privs"] = seen["no_new_privs"]
    prot["rlimits"] = seen["as_limit"] != resource.RLIM_INFINITY
    prot["nproc_limit"] = prot["unprivileged_uid"] and seen["nproc_limit"] != resource.RLIM_INFINITY
    prot["network_isolated"] = seen["interfaces"] in ([], ["lo"]) and prot["net_ns"]
    prot["scrubbed_env"] = set(seen["env"]) <= {*_sandbox_env("", ""), "PWD"}  # bwrap sets PWD
    return prot


@functools.cache
def _probed(choice: _Backend) -> dict[str, bool] | str:
    """The probe's result for `choice`, once per process."""
    return _probe(choice)


@functools.cache
def _warn_weak(choice: _Backend) -> None:
    """Once per process, when a backend is used that lacks a protection."""
    missing = [k for k, ok in _probed(choice).items() if not ok]
    if missing:
        log.warning("sandbox backend %s%s lacks: %s; untrusted code is less contained", choice.name,
                    " (uid 65534)" if choice.drop_uid else "", ", ".join(missing))


def _select_backend(name: str | None, *, strict: bool = True) -> _Backend:
    """The first backend (of `name`, or of all installed) with STRONG isolation. Fails closed: without one,
    a GspoError says what to install, unless weak isolation is accepted (GSPO_SANDBOX_WEAK=1) or `strict`
    is False (a backend named in code is the caller's explicit choice)."""
    with _SELECT_LOCK:  # one probe at a time even when many grading threads start at once
        failures: dict[str, str] = {}
        weak = None
        for choice in _candidates(name):
            prot = _probed(choice)
            if isinstance(prot, str):
                failures.setdefault(choice.name, f"{choice.name}: {prot}")
                continue
            missing = [k for k in STRONG if not prot[k]]
            if not missing or not strict:
                _warn_weak(choice)
                return choice
            weak = weak or choice
            failures.setdefault(choice.name, f"{choice.name} lacks {', '.join(missing)}")
    if weak is not None and os.environ.get(WEAK_ENV) == "1":
        _warn_weak(weak)
        return weak
    raise GspoError(f"no sandbox here isolates untrusted code ({'; '.join(failures.values()) or 'none found'}): "
                    f"install bubblewrap (apt install bubblewrap) or util-linux unshare with user namespaces "
                    f"enabled, or accept weak isolation with {WEAK_ENV}=1 (gspo train: eval.weak_sandbox=true)")


_SELECT_LOCK = threading.Lock()
