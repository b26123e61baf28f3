"""The `unshare` backend's set-up: code that runs INSIDE fresh namespaces, shipped there as source.

`unshare --user --map-root-user --mount --pid --fork --net --ipc --uts` starts `_ns_main` as root of a new
user namespace (the host sees the caller's uid), in its own mount, pid, net, ipc and uts namespaces. It
builds what bubblewrap builds: a read-only root on a tmpfs holding read-only binds of /usr (and the /bin,
/lib links), a few /etc files, the Python prefix and the basic /dev nodes; a fresh /proc; size- and
inode-capped private tmpfs /tmp and /dev/shm (nothing else is writable: no /var/tmp, and no host socket is reachable
since the host filesystem is gone and the net namespace hides abstract sockets). Then it allows one more
user namespace and no further (max_user_namespaces=1 in this one), enters it as uid/gid 65534 with root
unmapped (as bubblewrap's --uid does; CAP_SYS_ADMIN kept as an ambient capability) and execs the runner,
which becomes pid 1; each of its job servers mounts its own /tmp and /dev/shm and then drops every
capability (see runner._rn_isolate). So nothing in the sandbox is uid 0, inside or outside. Like the runner, it uses the stdlib only and
imports what it needs itself.
"""


def _ns_main() -> None:
    """argv: [config JSON, runner argv...]; config: root (an empty folder to mount the new root on),
    binds (host paths, read-only), links (path -> target), tmpfs ({path: bytes}), inodes (per tmpfs)."""
    import ctypes
    import json
    import os
    import platform
    import sys

    cfg = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    root = cfg["root"]
    _ns_mount(libc, "tmpfs", root, "tmpfs", 2 | 4, "mode=755,size=1m")  # nosuid, nodev
    for path, target in cfg["links"].items():
        os.symlink(target, root + path)
    for path, size in cfg["tmpfs"].items():  # before the binds: a Python prefix may live under /tmp (a venv)
        os.makedirs(root + path)
        _ns_mount(libc, "tmpfs", root + path, "tmpfs", 2 | 4, f"mode=1777,size={size},nr_inodes={cfg['inodes']}")
    for path in cfg["binds"]:
        _ns_bind(libc, path, root + path)
    for path in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"):
        _ns_bind(libc, path, root + path)
    os.makedirs(root + "/proc")
    _ns_mount(libc, "proc", root + "/proc", "proc", 2 | 4 | 8)  # nosuid, nodev, noexec
    os.chdir(root)
    number = {"x86_64": 155, "aarch64": 41}[platform.machine()]  # pivot_root has no libc wrapper
    if libc.syscall(number, b".", b".") != 0 or libc.umount2(b".", 2) != 0:  # MNT_DETACH: the host is gone
        raise OSError(ctypes.get_errno(), "pivot_root")
    os.chdir("/")
    _ns_mount(libc, None, "/", None, 32 | 4096 | 1 | 2 | 4)  # remount, bind, read-only, nosuid, nodev
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("1")  # the nested one below, then none: the limit binds every namespace under this one
    _ns_unprivileged(libc, cfg["uid"])
    os.execv(sys.argv[2], sys.argv[2:])  # the runner's job servers drop every capability (_rn_isolate)


def _ns_unprivileged(libc, uid):
    """Become `uid` (and gid) of a nested user namespace in which root is unmapped, as bubblewrap's --uid
    does: our uid 0 here is `uid` there, so the runner, its job servers and the program are an ordinary uid
    inside as well as outside, and the runner's /proc files (non-dumpable: owned by the namespace's root,
    unmapped, so the host's root) are out of the program's reach. CAP_SYS_ADMIN, which the job servers need
    for their namespaces and mounts, goes to the runner as an ambient capability; they drop it."""
    import ctypes

    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    for name, text in (("uid_map", f"{uid} 0 1"), ("setgroups", "deny"), ("gid_map", f"{uid} 0 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[2] |= 1 << 21  # CAP_SYS_ADMIN inheritable: ambient needs it permitted and inheritable
    if libc.capset(header, data) != 0 or libc.prctl(47, 2, 21, 0, 0) != 0:  # PR_CAP_AMBIENT, _RAISE
        raise OSError(ctypes.get_errno(), "ambient CAP_SYS_ADMIN")


def _ns_mount(libc, source, target, fstype, flags, data=None):
    import ctypes
    import os

    def raw(value):
        return value.encode() if isinstance(value, str) else value

    if libc.mount(raw(source), raw(target), raw(fstype), flags, raw(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target}: {os.strerror(errno)}")


def _ns_bind(libc, path, target):
    """A read-only bind of `path` at `target`, keeping the flags the kernel locks in a user namespace."""
    import os

    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _ns_mount(libc, path, target, None, 4096 | 16384)  # MS_BIND | MS_REC
    have = os.statvfs(path).f_flag
    locked = (have & (2 | 4 | 8 | 1024 | 2048)) | ((1 << 21) if have & 4096 else 0)  # nosuid..nodiratime, relatime
    _ns_mount(libc, None, target, None, 32 | 4096 | 1 | locked)  # MS_REMOUNT | MS_BIND | MS_RDONLY


NS_FUNCTIONS = (_ns_mount, _ns_bind, _ns_unprivileged, _ns_main)
