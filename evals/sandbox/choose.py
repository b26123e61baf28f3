"""Choosing the sandbox backend: a probe program run through each backend observes which protections it
really gives, and the choice fails closed.

The probe records namespaces, whether SIGCHLD can be ignored (autoreaping), writes outside the sandbox (the host canary, /, and the host's /tmp,
/dev/shm, /var/tmp), host unix sockets (by path and abstract name), nested user namespaces, the uid seen
from the host, capabilities, limits and the seccomp filter. A backend is used for untrusted code only when
it shows every STRONG protection, unless weak isolation is accepted explicitly (GSPO_SANDBOX_WEAK=1). A
root grader always drops to an unprivileged uid of the sandbox's own (uids.py) and refuses where it cannot
(AS_ROOT): never a silent uid 0.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import socket
import tempfile
import threading

from gspo.conf.errors import GspoError
from gspo.evals.sandbox.backends import BACKENDS, Backend, log, sandbox_env
from gspo.evals.sandbox.process import Job, Runner
from gspo.evals.sandbox.seccomp import seccomp_program

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

def autoreaps():
    import signal
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel would reap children, CPU uncounted
    except OSError:
        return False
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    return True

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
    "seccomp": status.get("Seccomp", "0").strip() == "2",  # SECCOMP_MODE_FILTER
    "sees_host": os.path.exists(host["canary"]),
    "writes_host": writes(os.path.join(host["canary"], "probe")) or writes("/gspo-sandbox-probe"),
    "host_socket": connects(host["socket"]) or connects("\0" + host["abstract"]),
    "interfaces": [line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]],  # (no netlink)
    "as_limit": resource.getrlimit(resource.RLIMIT_AS)[0],
    "nproc_limit": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    "env": sorted(os.environ),
    "autoreap": autoreaps(),
    "nested_userns": ctypes.CDLL(None).unshare(0x10000000) == 0,  # CLONE_NEWUSER; the probe ends right after
}))
"""
# What "strong" means: untrusted code runs only where all of these were observed (see sandbox_protections).
STRONG = ("host_fs_hidden", "readonly_fs", "private_tmp", "host_sockets_blocked", "no_nested_userns", "pid_ns",
          "net_ns", "seccomp", "no_autoreap")
# A root grader needs these too, weak isolation accepted or not: uid 0 is what RLIMIT_NPROC does not bind.
AS_ROOT = ("unprivileged_uid", "nproc_limit")
WEAK_ENV = "GSPO_SANDBOX_WEAK"  # =1: accept a backend without STRONG isolation (also eval.weak_sandbox=true)
_NAMESPACES = {"user_ns": "user", "pid_ns": "pid", "net_ns": "net", "mount_ns": "mnt", "ipc_ns": "ipc"}


def _candidates(name: str | None) -> list[Backend]:
    if name is not None and name not in BACKENDS:
        raise GspoError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
    names = [name] if name else [n for n in BACKENDS if n == "plain" or shutil.which(n)]
    return [Backend(n, os.geteuid() == 0) for n in names]  # root always drops its uid, or refuses


def _can_drop_uid() -> bool:
    """Whether this (root) process holds CAP_SETUID and CAP_SETGID, which the uid drop needs."""
    with open("/proc/self/status") as f:
        caps = int(next(line for line in f if line.startswith("CapEff:")).split()[1], 16)
    return caps & (1 << 6) and caps & (1 << 7)  # CAP_SETGID, CAP_SETUID


def _probe(choice: Backend) -> dict[str, bool] | str:
    """Run the probe program through `choice`; the protections it observed, or why it failed."""
    if choice.drop_uid and not _can_drop_uid():
        return "as root without CAP_SETUID/CAP_SETGID, programs cannot run as an unprivileged uid"
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
        with Runner(choice, watch_uids=True) as sb:
            res = sb.run(Job(code=_PROBE, cpu_s=5, stdin=json.dumps(
                {"ns": host_ns, "canary": canary, "tag": tag, "socket": os.path.join(canary, "sock"), "abstract": tag})))
            uids, cgroup = sb.host_uids, sb.cgroup is not None
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
    return {**_protections(seen, uids, left), "memory_cgroup": cgroup}


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
    prot["seccomp"] = seen["seccomp"]
    prot["no_autoreap"] = not seen["autoreap"]
    prot["rlimits"] = seen["as_limit"] != resource.RLIM_INFINITY
    prot["nproc_limit"] = prot["unprivileged_uid"] and seen["nproc_limit"] != resource.RLIM_INFINITY
    prot["network_isolated"] = seen["interfaces"] in ([], ["lo"]) and prot["net_ns"]
    prot["scrubbed_env"] = set(seen["env"]) <= {*sandbox_env("", ""), "PWD"}  # bwrap sets PWD
    return prot


def clear_probe_cache() -> None:
    """Forget what the probes observed (tests that change the environment probe again)."""
    probed.cache_clear()
    _warn_weak.cache_clear()


@functools.cache
def probed(choice: Backend) -> dict[str, bool] | str:
    """The probe's result for `choice`, once per process."""
    return _probe(choice)


@functools.cache
def _warn_weak(choice: Backend) -> None:
    """Once per process, when a backend is used that lacks a protection."""
    missing = [k for k, ok in probed(choice).items() if not ok]
    if missing:
        log.warning("sandbox backend %s%s lacks: %s; untrusted code is less contained", choice.name,
                    " (own uid)" if choice.drop_uid else "", ", ".join(missing))


def select_backend(name: str | None, *, strict: bool = True) -> Backend:
    """The first backend (of `name`, or of all installed) with STRONG isolation. Fails closed: without one,
    a GspoError says what to install, unless weak isolation is accepted (GSPO_SANDBOX_WEAK=1) or `strict`
    is False (a backend named in code is the caller's explicit choice)."""
    with _SELECT_LOCK:  # one probe at a time even when many grading threads start at once
        failures: dict[str, str] = {}
        weak = None
        for choice in _candidates(name):
            prot = probed(choice)
            if isinstance(prot, str):
                failures.setdefault(choice.name, f"{choice.name}: {prot}")
                continue
            if choice.drop_uid and not all(prot[k] for k in AS_ROOT):
                failures.setdefault(choice.name, f"{choice.name} (as root) lacks an unprivileged uid with a process limit")
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
    if isinstance(program := seccomp_program(), str):
        failures["seccomp"] = f"seccomp: {program}"
    raise GspoError(f"no sandbox here isolates untrusted code ({'; '.join(failures.values()) or 'none found'}): "
                    f"install bubblewrap (apt install bubblewrap) or util-linux unshare with user namespaces "
                    f"enabled, or accept weak isolation with {WEAK_ENV}=1 (gspo train: eval.weak_sandbox=true)")


_SELECT_LOCK = threading.Lock()
