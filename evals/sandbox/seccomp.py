"""The seccomp filter every sandboxed program runs under: system calls no program needs, denied.

Built on the grader's side with libseccomp (the `pyseccomp` binding to Debian's libseccomp2) and exported
as a classic BPF program; the runner loads it into each job's child with prctl(PR_SET_SECCOMP) just
before the program runs (the runner itself still needs memfd_create and keyctl). Denied with EPERM:
  keyrings          keyctl, add_key, request_key (the keyring outlives the sandbox and is shared)
  memory no limit   memfd_create, memfd_secret, shmget, msgget, semget (kernel memory outside RLIMIT_AS
                    and tmpfs sizes: 512 MiB of semaphores held at memory_mb=64 without a cgroup, issue 46),
                    io_setup (also a machine-wide quota, fs.aio-max-nr, the host's own io_setup then fails)
  kernel surface    io_uring_*, userfaultfd, bpf, perf_event_open, ptrace, process_vm_readv/writev
  host channels     inotify_init(1), fanotify_init (events on the host's shared files carry bytes between
                    sandboxes and spend the uid's inotify instances), flock (locks on the shared read-only
                    files do too), fadvise64 (DONTNEED empties the host's page cache of a shared file),
                    mincore and cachestat (read which pages of a shared file are cached: the page-cache
                    channel, read precisely); socket() of any family but AF_UNIX, AF_INET and AF_INET6
                    (AF_VSOCK ports are not per network namespace; netlink, packet, ... no program needs);
                    fcntl locks (F_GETLK, F_SETLK(W), F_OFD_*: read locks need only read access), leases and
                    F_NOTIFY (dnotify); sync and syncfs (write back the host's dirty pages on demand)
  socket memory     setsockopt SO_SNDBUF, SO_RCVBUF and their FORCE forms: buffers stay at the defaults
  other processes   prlimit64, sched_setscheduler/setparam/setattr/setaffinity, migrate_pages, move_pages
                    with any pid but 0 (the caller), setpriority and ioprio_set but on the caller itself: the
                    job server (pid 1 of the program's namespace, same uid) is out of the program's reach
  mounts, ns        mount family, pivot_root, chroot, unshare, setns, clone with any CLONE_NEW* flag
  host              kexec, modules, reboot, swap, acct, quotactl, file handles
  autoreaping       rt_sigaction(SIGCHLD, act) with any new action: SIG_IGN or SA_NOCLDWAIT would make the
                    kernel reap the program's workers at exit without adding their CPU to anyone's
                    RUSAGE_CHILDREN (the action sits behind a pointer no filter can read, so every new
                    SIGCHLD action is refused; reading the current one, act NULL, is allowed)
clone3 answers ENOSYS instead: its flags sit behind a pointer no filter can read, and glibc then falls
back to clone, whose flags the filter sees. Other architectures (x32, i386) are killed (libseccomp's
default for a foreign architecture).
"""

from __future__ import annotations

import errno
import functools
import tempfile

try:
    import pyseccomp
except (ImportError, RuntimeError, OSError) as e:  # RuntimeError: the binding found no libseccomp
    pyseccomp, _MISSING = None, str(e)

DENIED = ("keyctl", "add_key", "request_key", "memfd_create", "memfd_secret", "shmget", "msgget",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "bpf", "perf_event_open",
          "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
          "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare",
          "setns", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
          "swapon", "swapoff", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at", "semget", "io_setup",
          "inotify_init", "inotify_init1", "fanotify_init", "flock", "fadvise64", "mincore", "sync", "syncfs")
OPTIONAL = ("cachestat",)  # Linux 6.5: denied where this libseccomp knows the name
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6: socket() of any other domain is EPERM
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
CLONE_NEW = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
SIGCHLD = 17  # x86_64 and aarch64 alike
# fcntl commands refused: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW (read locks on the
# shared read-only files, and asking who holds one, carry bits between sandboxes and the host), F_SETLEASE,
# F_GETLEASE, F_NOTIFY (dnotify: events on shared folders)
FCNTL_DENIED = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)
# setsockopt(SOL_SOCKET, ...) refused: SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE (a socket's buffers
# are kernel memory outside RLIMIT_AS: 8 MiB each held 1.7-2.2 GB where no memory cgroup can be made)
SOL_SOCKET, SOCKOPT_DENIED = 1, (7, 8, 32, 33)
# calls that act on another process by pid, same uid enough: refused unless aimed at the caller itself (pid 0).
# The job server is pid 1 of the program's pid namespace and the same uid: prlimit(2) on it killed it (RLIMIT_AS)
# or blinded its CPU poll (RLIMIT_NOFILE 0), setpriority made its wall limit late (issue 58). {name: pid arg}
OWN_PID_ONLY = {"prlimit64": 0, "sched_setscheduler": 0, "sched_setparam": 0, "sched_setattr": 0,
                "sched_setaffinity": 0, "migrate_pages": 0, "move_pages": 0}
# setpriority(which, who) and ioprio_set(which, who): the caller's own process only (PRIO_PROCESS 0 and
# IOPRIO_WHO_PROCESS 1, who 0): a process group can be joined, and PRIO_USER reaches every process of the uid
OWN_PROCESS_WHICH = {"setpriority": 0, "ioprio_set": 1}
INSTALL = "pip install pyseccomp (the binding) and apt install libseccomp2 (the library)"


@functools.cache
def seccomp_program() -> bytes | str:
    """The filter as BPF bytes (struct sock_filter[], 8 bytes each), or why it cannot be built here."""
    if pyseccomp is None:
        return f"no libseccomp binding ({_MISSING}): {INSTALL}"
    try:
        filt = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        for name in DENIED:
            filt.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
        for name in OPTIONAL:
            try:
                filt.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
            except (RuntimeError, ValueError, OSError):
                pass  # a libseccomp older than the call: its kernel (likely) has no such call either
        # the kernel reads the domain as an int: below 32 bits, each refused value; above, any (fail closed)
        for domain in sorted(set(range(max(SOCKET_FAMILIES))) - set(SOCKET_FAMILIES)):
            filt.add_rule(pyseccomp.ERRNO(errno.EPERM), "socket", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, 0xFFFFFFFF, domain))
        filt.add_rule(pyseccomp.ERRNO(errno.EPERM), "socket", pyseccomp.Arg(0, pyseccomp.GT, max(SOCKET_FAMILIES)))
        for flag in CLONE_NEW:
            filt.add_rule(pyseccomp.ERRNO(errno.EPERM), "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
        filt.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
        for cmd in FCNTL_DENIED:  # the kernel reads cmd as an unsigned int
            filt.add_rule(pyseccomp.ERRNO(errno.EPERM), "fcntl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, 0xFFFFFFFF, cmd))
        for name, arg in OWN_PID_ONLY.items():  # any register but exactly 0 (fails closed: 1 << 32 too)
            filt.add_rule(pyseccomp.ERRNO(errno.EPERM), name, pyseccomp.Arg(arg, pyseccomp.NE, 0))
        for name, which in OWN_PROCESS_WHICH.items():
            filt.add_rule(pyseccomp.ERRNO(errno.EPERM), name, pyseccomp.Arg(0, pyseccomp.NE, which))
            filt.add_rule(pyseccomp.ERRNO(errno.EPERM), name, pyseccomp.Arg(1, pyseccomp.NE, 0))
        for opt in SOCKOPT_DENIED:  # level and optname are ints
            filt.add_rule(pyseccomp.ERRNO(errno.EPERM), "setsockopt", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, 0xFFFFFFFF, SOL_SOCKET),
                          pyseccomp.Arg(2, pyseccomp.MASKED_EQ, 0xFFFFFFFF, opt))
        # the kernel reads sig as an int: compare its low 32 bits only, or 17 | 1 << 32 would slip past
        filt.add_rule(pyseccomp.ERRNO(errno.EPERM), "rt_sigaction",
                      pyseccomp.Arg(0, pyseccomp.MASKED_EQ, 0xFFFFFFFF, SIGCHLD), pyseccomp.Arg(1, pyseccomp.NE, 0))
        with tempfile.TemporaryFile() as f:
            filt.export_bpf(f)
            f.seek(0)
            return f.read()
    except (OSError, RuntimeError, ValueError) as e:
        return f"libseccomp cannot build the filter ({e}): {INSTALL}"
