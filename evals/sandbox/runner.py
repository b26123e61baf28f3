"""The sandbox runner: code that runs INSIDE the sandbox, shipped there as source (`python -I -S -c`).

The host (`gspo.evals.sandbox`) sends `inspect.getsource` of `RUNNER_FUNCTIONS` and a call to `_rn_main`,
so these functions use the stdlib only and import what they need themselves. This module deliberately has
no module-level imports or globals: `ruff` (F821) then flags any name a shipped function forgot to import.

The runner is a zygote, pid 1 of its namespace (bwrap, unshare): the kernel drops signals sent to a
namespace's init from inside it, so a program cannot kill it. It never reads a job: for each job it forks a
fresh job server, which reads the job from the grader, enters pid, mount, IPC and network namespaces of
its own (everything the program starts ends with them; a fresh network namespace has only loopback, down) with fresh size- and inode-capped
tmpfs /tmp and /dev/shm, joins a fresh session keyring, drops every capability, runs the job and exits. So
every test and every checker run has a fresh process that no earlier job's data (a checker's expected
output included) ever passed through, and nothing a program leaves behind reaches the next job or needs
cleaning up. Runner and job servers are non-dumpable, so a program running as the same uid can neither
ptrace them nor open their file descriptors. The program runs in a forked child with its own rlimits,
process group and seccomp filter (see seccomp.py), stdin from a memfd. CPU time is charged for every
process the program started: the job server is their subreaper and reaps them all (__WALL), so what they
used is its RUSAGE_CHILDREN, and the live ones are read from /proc while they run; the seccomp filter
refuses any new SIGCHLD action, so no worker is autoreaped (SIG_IGN, SA_NOCLDWAIT) with its CPU uncounted. The reply is a JSON header and
then stdout and stderr as raw bytes (no escaping that could multiply them).
"""

def _rn_main() -> None:
    """Fork one job server per job until the grader closes our input (a server then ends without a job)."""
    import ctypes
    import json
    import os
    import signal
    import sys

    for name in ("gc", "math", "resource", "select", "time", "traceback", "types"):
        __import__(name)  # imported once here rather than in every forked child
    cfg = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE=0: same-uid programs cannot ptrace us or open our fds
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: setuid binaries grant nothing to our children
    if os.getpid() != 1:
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER (plain): what escapes a job server comes back here
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path.extend(cfg["sys_path"])
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    warm: dict = {}
    exec(cfg["prelude"], warm)  # trusted, the same for a grader's jobs: imported once, not per job
    while True:  # the next job's server is forked as soon as one holds its job: off the grader's path
        took_r, took_w = os.pipe()
        if os.fork() == 0:
            os.close(took_r)
            code = 1
            try:
                code = _rn_serve(libc, cfg, rfd, wfd, warm, took_w)
            finally:
                os._exit(code)
        os.close(took_w)
        took = os.read(took_r, 1)
        os.close(took_r)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # servers done with their jobs
                pass
        except ChildProcessError:
            pass
        if not took:  # it ended without a job: the grader closed our input (or it failed)
            if os.getpid() == 1:
                _rn_kill_all(0, False)  # kill(-1): nothing outlives the namespace's init anyway
            return


def _rn_serve(libc, cfg, rfd, wfd, warm, took_w):
    """A job server: read one job (and say so on took_w), isolate (as pid 1 of a pid namespace of its own,
    which the program can neither signal nor escape: its orphans are reaped, and charged, here), run it,
    reply; the exit status."""
    import ctypes
    import json
    import os

    header = _rn_read(rfd, 8)
    if len(header) < 8:
        return 3
    job = json.loads(_rn_read(rfd, int.from_bytes(header, "big")))
    job["files"] = {name: _rn_read_frames(rfd) for name in job["files"]}  # raw bytes, in frames, then an empty one
    os.write(took_w, b"j")
    os.close(took_w)
    if cfg["isolate"]:
        # CLONE_NEWNS, NEWIPC, NEWPID, NEWNET: no socket, counter or port of one job reaches the next
        if libc.unshare(0x00020000 | 0x08000000 | 0x20000000 | 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        pid = os.fork()
        if pid:
            _, status = os.waitpid(pid, 0)
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
        _rn_isolate(libc, cfg, job["tmpfs"])
    else:
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the program's orphans are reaped (and charged) here
    keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]  # keyctl has no libc wrapper
    libc.syscall(keyctl, 1, None)  # KEYCTL_JOIN_SESSION_KEYRING, NULL: a new keyring, not the grader's
    workdir = cfg["workdir"] if cfg["isolate"] else os.path.join(cfg["workdir"], f"job-{os.getpid()}")
    os.makedirs(workdir)
    prelude_ns = warm
    if job["prelude"] != cfg["prelude"]:
        prelude_ns = {}
        exec(job["prelude"], prelude_ns)
    result = _rn_run_job(job, workdir, prelude_ns, bytes.fromhex(cfg["seccomp"]))
    out, err = result.pop("stdout"), result.pop("stderr")
    meta = json.dumps(result).encode()
    for part in (meta, out, err):
        _rn_write(wfd, len(part).to_bytes(8, "big") + part)
    return 0


def _rn_isolate(libc, cfg, tmpfs):
    """As pid 1 of fresh pid, mount, IPC and net namespaces: a /proc of our own; fresh tmpfs /tmp and /dev/shm
    of `tmpfs` bytes ({path: n}) and cfg["inodes"] inodes each, the Python prefix re-bound where it lived
    under them; then every capability dropped for good (bwrap and unshare.py gave the runner CAP_SYS_ADMIN,
    as uid 65534, for this alone)."""
    import ctypes
    import os

    def check(rc, what):
        if rc != 0:
            raise OSError(ctypes.get_errno(), what)

    check(libc.mount(None, b"/", None, 16384 | (1 << 18), None), "private /")  # MS_REC | MS_PRIVATE
    check(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount /proc")  # nosuid, nodev, noexec
    # no pty: bwrap's private devpts shares the host's pty count (one sandbox held 3,070 of 3,072) and pty
    # buffers are memory outside every limit; kernel.pty.nr (the host's count: a channel) hidden (issue 58)
    hidden = ["/proc/sys/kernel/pty", *(["/dev/pts"] if os.path.isdir("/dev/pts") else [])]
    for path in hidden:  # read-only, nosuid, nodev, noexec
        check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", 1 | 2 | 4 | 8, b"size=4k,nr_inodes=1"), f"hide {path}")
    kept = {path: os.open(path, os.O_PATH) for path in cfg["under_tmpfs"]}
    for path, size in tmpfs.items():
        opts = f"mode=1777,size={size},nr_inodes={cfg['inodes']}".encode()
        check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", 2 | 4, opts), f"mount {path}")  # nosuid, nodev
    for path, fd in kept.items():
        os.makedirs(path, exist_ok=True)
        # a bind keeps its source's read-only, nosuid and nodev flags
        check(libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, 4096 | 16384, None), f"bind {path}")
        os.close(fd)
    if os.getuid() == 0:  # root of its user namespace (neither backend now): exec must not give capabilities back
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (EINVAL past the last capability)
        check(libc.prctl(28, 1 | 2 | 4 | 8, 0, 0, 0), "securebits")  # SECBIT_NOROOT(+_LOCKED), NO_SETUID_FIXUP(+_LOCKED)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")  # no effective, permitted, inheritable


def _rn_read(fd, n):
    import os

    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def _rn_read_frames(fd):
    """The bytes of length-prefixed frames up to an empty one."""
    buf = bytearray()
    while size := int.from_bytes(_rn_read(fd, 8) or b"\0", "big"):
        buf += _rn_read(fd, size)
    return bytes(buf)


def _rn_write(fd, data):
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _rn_run_job(job, workdir, prelude_ns, seccomp):
    """Run one job in a forked child; return its RunResult fields (stdout, stderr as bytes)."""
    import gc
    import os
    import resource
    import time

    for name, data in job["files"].items():
        with open(os.path.join(workdir, name), "wb") as f:
            f.write(data)
    stdin_fd = os.memfd_create("stdin", 0)
    _rn_write(stdin_fd, job["stdin"].encode())
    os.lseek(stdin_fd, 0, 0)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    gc.freeze()  # the child's collector then leaves the runner's objects (and their pages) alone
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _rn_child(job, workdir, prelude_ns, seccomp, stdin_fd, out_w, err_w, st_w)
    for fd in (stdin_fd, out_w, err_w, st_w):
        os.close(fd)
    result = _rn_collect(job, pid, out_r, err_r, started, before)
    result["compiled"] = os.read(st_r, 1) == b"C"
    os.close(st_r)
    return result


def _rn_child(job, workdir, prelude_ns, seccomp, stdin_fd, out_w, err_w, st_w):
    """In the forked child: isolate fds, apply limits and the seccomp filter, run the program; never returns."""
    import os
    import traceback

    status = 1
    try:
        os.setpgid(0, 0)
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in os.listdir("/proc/self/fd"):  # cheaper than closing every possible descriptor
            if int(fd) > 2 and int(fd) != st_w:
                try:
                    os.close(int(fd))
                except OSError:
                    pass
        os.chdir(workdir)
        _rn_oom_victim()
        _rn_limit(job)
        _rn_seccomp(seccomp)
        status = _rn_exec(job, prelude_ns, st_w)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def _rn_oom_victim():
    """Make this process (the program) the OOM killer's first choice, never the runner or the grader.
    Our /proc files are root's while we are non-dumpable, as the runner made us: dumpable for the write."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    libc.prctl(4, 0, 0, 0, 0)


def _rn_limit(job):
    """The program's rlimits. RLIMIT_MSGQUEUE 0 and RLIMIT_SIGPENDING 64 as well as NPROC: those per-user counts
    are charged up the user namespaces to the uid that made them, which for a non-root grader is its own (a
    sandbox once held every message-queue byte and all 96,365 pending signals of the grader's uid: its own
    mq_open got EMFILE, its queued signals EAGAIN; issue 46). No program needs a message queue."""
    import math
    import resource
    import signal

    page = resource.getpagesize()
    with open("/proc/self/statm") as f:
        base = int(f.read().split()[0]) * page  # the interpreter's own address space is not the program's
    mem = base + job["memory_mb"] * (1 << 20)
    cpu = math.ceil(job["cpu_s"]) + 1
    for res, value in ((resource.RLIMIT_AS, (mem, mem)), (resource.RLIMIT_CPU, (cpu, cpu + 1)),
                       (resource.RLIMIT_FSIZE, (job["fsize_bytes"],) * 2),
                       (resource.RLIMIT_NPROC, (job["nproc"],) * 2), (resource.RLIMIT_CORE, (0, 0)),
                       (resource.RLIMIT_NOFILE, (256, 256)), (resource.RLIMIT_MSGQUEUE, (0, 0)),
                       (resource.RLIMIT_SIGPENDING, (64, 64))):
        resource.setrlimit(res, value)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGXCPU, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _rn_seccomp(program):
    """Load the BPF `program` (struct sock_filter[]) as this process's seccomp filter; no_new_privs is set."""
    import ctypes

    if not program:
        return  # the grader had no filter to give: the probe reports seccomp missing and strict use refuses
    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter")


def _rn_exec(job, prelude_ns, st_w):
    """Compile, signal success on st_w, execute as __main__ (or call fn_name); return the exit status."""
    import builtins
    import json
    import os
    import sys
    import traceback
    import types

    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1,
                                       closefd=False)
    out = sys.stdout
    sys.argv = list(job["argv"])
    builtins.exit = builtins.quit = sys.exit  # -S skips site.py, which defines them
    sys.setrecursionlimit(job["recursion_limit"])
    main = types.ModuleType("__main__")
    main.__dict__.update(prelude_ns)
    main.__file__ = job["filename"]
    sys.modules["__main__"] = main
    try:
        code = compile(job["code"], job["filename"], "exec")
    except (SyntaxError, ValueError):
        traceback.print_exc()
        return 1
    os.write(st_w, b"C")
    os.close(st_w)
    status = 0
    try:
        if job["fn_name"]:  # arguments are parsed before the program runs and can tamper with json
            args = [json.loads(line) for line in sys.stdin.read().split("\n")]
            sys.stdout = sys.stderr  # the program's own prints must not mix with the returned value
        exec(code, main.__dict__)
        if job["fn_name"]:
            _rn_call(job, main.__dict__, args, out)
    except SystemExit as e:
        status = 0 if job["exit_ok"] or e.code is None else e.code if isinstance(e.code, int) else 1
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    threading = sys.modules.get("threading")
    if threading is not None:  # an interpreter waits for its non-daemon threads before exiting
        for t in threading.enumerate():
            if t is not threading.current_thread() and not t.daemon:
                t.join()
    for stream in (out, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status & 0xFF


def _rn_call(job, ns, args, out):
    """Functional mode as the LiveCodeBench harness: Solution().fn(*args) if the code has a class
    Solution, else the module-level function; the value goes to stdout as JSON (tuples become lists)."""
    import json
    import sys

    target = ns["Solution"]() if "class Solution" in job["code"] else None
    fn = getattr(target, job["fn_name"]) if target is not None else ns[job["fn_name"]]
    value = fn(*args)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as e:
        print(f"return value is not JSON: {e}", file=sys.stderr)
        return
    out.write(text)


def _rn_collect(job, pid, out_r, err_r, started, before):
    """Read the child's output under the wall, CPU and output limits; kill leftovers; wait all.

    CPU is that of every process the program started: `before` is RUSAGE_CHILDREN at the fork. What the
    program can make this loop spend (our CPU, charged to no one) is bounded: the live processes' CPU is
    read from /proc on a clock (every 20 ms), not on every read; a pass that reads only a few bytes right
    after another such pass waits 1 ms first, so writes of a byte at a time gather in the pipe (at most
    ~1,000 passes a second); and stderr, kept to its last 64 KiB, is read up to output_bytes in all like
    stdout (beyond: output_limit). server_cpu_s is what this loop spent (issue 46: ten children writing a
    byte to stderr every 200 us made it spend 1.5x the CPU limit)."""
    import os
    import resource
    import select
    import time

    tick = os.sysconf("SC_CLK_TCK")
    deadline = started + job["wall_s"]
    out, err = bytearray(), bytearray()
    fds, waited, limit, ended = [out_r, err_r], None, None, None
    err_bytes, next_poll, trickle = 0, started, False
    own = resource.getrusage(resource.RUSAGE_SELF)
    while fds or ended is None:
        if ended is None:
            wpid, status, rusage = os.wait4(pid, os.WNOHANG)
            now = time.monotonic()
            if wpid:
                waited, ended = (status, rusage), now
                _rn_kill_all(pid, False)  # daemons and background children may still hold the pipes
            elif now > deadline:
                limit = "wall"
            elif now >= next_poll:
                next_poll = now + 0.02
                try:
                    if _rn_reaped_cpu(before) + _rn_live_cpu(tick) > job["cpu_s"]:
                        limit = "cpu"
                except OSError:  # a CPU we cannot read is over the limit (fails closed)
                    limit = "cpu"
            if limit:
                waited, ended = _rn_kill_all(pid, True), time.monotonic()
        read = 0
        for fd in select.select(fds, [], [], 0.01 if fds else 0.001)[0]:
            chunk = os.read(fd, 1 << 16)
            read += len(chunk)
            if not chunk:
                fds.remove(fd)
                os.close(fd)
                continue
            if fd == err_r:
                err += chunk
                del err[:-(1 << 16)]
                err_bytes += len(chunk)
                over = err_bytes > job["output_bytes"]
            elif len(out) + len(chunk) <= job["output_bytes"]:
                out += chunk
                over = False
            else:
                out += chunk[: job["output_bytes"] - len(out)]
                over = True
            if over and limit != "output":
                limit = "output"
                if ended is None:
                    waited, ended = _rn_kill_all(pid, True), time.monotonic()
        if 0 < read < 4096 and ended is None:
            if trickle:
                time.sleep(0.001)
            trickle = True
        else:
            trickle = False
    _rn_kill_all(pid, False)  # everything the program started is reaped before its CPU is summed
    status, rusage = waited or (None, None)
    spent = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "exit_code": os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None,
        "cpu_s": _rn_reaped_cpu(before),
        "wall_s": ended - started,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "server_cpu_s": spent.ru_utime + spent.ru_stime - own.ru_utime - own.ru_stime,
        "stdout": bytes(out),
        "stderr": bytes(err),
        "limit": limit,
    }


def _rn_reaped_cpu(before):
    """CPU seconds of the runner's reaped descendants since `before` (a RUSAGE_CHILDREN snapshot)."""
    import resource

    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    return now.ru_utime + now.ru_stime - before.ru_utime - before.ru_stime


def _rn_live_cpu(tick):
    """CPU seconds of every live descendant of the runner (utime, stime and its waited-for children's)."""
    import os

    total, todo = 0, _rn_children(os.getpid(), strict=True)
    while todo:
        pid = todo.pop()
        todo += _rn_children(pid, strict=True)
        try:
            with open(f"/proc/{pid}/stat") as f:
                total += sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:15])
        except (FileNotFoundError, ProcessLookupError):  # ended meanwhile; any other error is raised
            continue
    return total / tick


def _rn_children(pid, strict=False):
    """The pids of `pid`'s children, every thread's (no glob: a fresh job server would compile its pattern);
    strict: an error other than the process's end (EMFILE, EACCES) is raised, not read as no children."""
    import os

    kids = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return kids
    except OSError:
        if strict:
            raise
        return kids
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(kid) for kid in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        except OSError:
            if strict:
                raise
    return kids


def _rn_kill_all(pgid, wait_child):
    """SIGKILL every process of the run (pid 1: the whole namespace), reap them all.

    Returns the child's (status, rusage) when wait_child, else None."""
    import os
    import signal
    import time

    try:
        if os.getpid() == 1:
            os.kill(-1, signal.SIGKILL)  # from a namespace's init: every process in it but us
        else:
            os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    waited = None
    if wait_child:
        try:
            _, status, rusage = os.wait4(pgid, 0)
            waited = (status, rusage)
        except ChildProcessError:
            pass
    for _ in range(5000):  # children that left the process group, reparented to us (subreaper or init)
        for kid in _rn_children(os.getpid()):
            try:
                os.kill(kid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG | 0x40000000)[0]:  # __WALL: clone children with any exit signal
                pass
        except ChildProcessError:
            break
        time.sleep(0.001)
    return waited


RUNNER_FUNCTIONS = (_rn_serve, _rn_isolate, _rn_read, _rn_read_frames, _rn_write, _rn_run_job, _rn_child, _rn_oom_victim, _rn_limit, _rn_seccomp, _rn_exec, _rn_call,
                    _rn_collect, _rn_reaped_cpu, _rn_live_cpu, _rn_children, _rn_kill_all, _rn_main)
