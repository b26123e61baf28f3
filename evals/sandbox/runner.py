"""The sandbox runner: code that runs INSIDE the sandbox, shipped there as source (`python -I -S -c`).

The host (`gspo.evals.sandbox`) sends `inspect.getsource` of `RUNNER_FUNCTIONS` and a call to `_rn_main`,
so these functions use the stdlib only and import what they need themselves. This module deliberately has
no module-level imports or globals: `ruff` (F821) then flags any name a shipped function forgot to import.

The runner is pid 1 of its namespace (bwrap, unshare): the kernel drops signals sent to a namespace's init
from inside it, so a program cannot kill the runner, and `kill(-1, SIGKILL)` from pid 1 ends every leftover
process (daemons, double forks) between jobs. The runner is non-dumpable, so a program running as the same
uid can neither ptrace it nor open its file descriptors. One forked child per job gets its own rlimits,
process group, fresh working dir and stdin from a memfd. Expected outputs never enter the sandbox: the
grader compares outside.
"""

def _rn_main() -> None:
    """Serve jobs from the grader (framed JSON on stdin) until EOF; reply on stdout."""
    import ctypes
    import json
    import os
    import signal
    import sys

    for name in ("glob", "math", "resource", "select", "shutil", "time", "traceback", "types"):
        __import__(name)  # imported once here rather than in every forked child
    cfg = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE=0: same-uid programs cannot ptrace us or open our fds
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: setuid binaries grant nothing to our children
    if os.getpid() != 1:
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us to be killed
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path.extend(cfg["sys_path"])
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.makedirs(cfg["workdir"], exist_ok=True)
    preludes: dict[str, dict] = {}
    while True:
        header = _rn_read(rfd, 8)
        if len(header) < 8:
            return
        job = json.loads(_rn_read(rfd, int.from_bytes(header, "big")))
        if job["prelude"] not in preludes:
            preludes[job["prelude"]] = {}
            exec(job["prelude"], preludes[job["prelude"]])
        reply = json.dumps(_rn_run_job(job, cfg["workdir"], preludes[job["prelude"]])).encode()
        _rn_write(wfd, len(reply).to_bytes(8, "big") + reply)


def _rn_read(fd, n):
    import os

    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def _rn_write(fd, data):
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _rn_run_job(job, workdir, prelude_ns):
    """Run one job in a forked child; return its RunResult fields."""
    import gc
    import os
    import shutil
    import time

    for name in os.listdir(workdir):  # a fresh working dir per job: nothing carries over between tests
        path = os.path.join(workdir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    for name, text in job["files"].items():
        with open(os.path.join(workdir, name), "w", encoding="utf-8") as f:
            f.write(text)
    stdin_fd = os.memfd_create("stdin", 0)
    _rn_write(stdin_fd, job["stdin"].encode())
    os.lseek(stdin_fd, 0, 0)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    gc.freeze()  # the child's collector then leaves the runner's objects (and their pages) alone
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _rn_child(job, workdir, prelude_ns, stdin_fd, out_w, err_w, st_w)
    for fd in (stdin_fd, out_w, err_w, st_w):
        os.close(fd)
    result = _rn_collect(job, pid, out_r, err_r, started)
    result["compiled"] = os.read(st_r, 1) == b"C"
    os.close(st_r)
    return result


def _rn_child(job, workdir, prelude_ns, stdin_fd, out_w, err_w, st_w):
    """In the forked child: isolate fds, apply limits, run the program; never returns."""
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
        _rn_limit(job)
        status = _rn_exec(job, prelude_ns, st_w)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def _rn_limit(job):
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
                       (resource.RLIMIT_NOFILE, (256, 256))):
        resource.setrlimit(res, value)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGXCPU, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


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


def _rn_collect(job, pid, out_r, err_r, started):
    """Read the child's output under the wall, CPU and output limits; kill leftovers; wait."""
    import os
    import select
    import time

    tick = os.sysconf("SC_CLK_TCK")
    deadline = started + job["wall_s"]
    out, err = bytearray(), bytearray()
    fds, waited, limit, ended = [out_r, err_r], None, None, None
    while fds or ended is None:
        if ended is None:
            wpid, status, rusage = os.wait4(pid, os.WNOHANG)
            if wpid:
                waited, ended = (status, rusage), time.monotonic()
                _rn_kill_all(pid, False)  # daemons and background children may still hold the pipes
            elif time.monotonic() > deadline:
                limit = "wall"
            elif _rn_cpu(pid, tick) > job["cpu_s"]:
                limit = "cpu"
            if limit:
                waited, ended = _rn_kill_all(pid, True), time.monotonic()
        for fd in select.select(fds, [], [], 0.01 if fds else 0.001)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                fds.remove(fd)
                os.close(fd)
            elif fd == err_r:
                err += chunk
                del err[:-(1 << 16)]
            elif len(out) + len(chunk) <= job["output_bytes"]:
                out += chunk
            elif limit != "output":
                out += chunk[: job["output_bytes"] - len(out)]
                limit = "output"
                if ended is None:
                    waited, ended = _rn_kill_all(pid, True), time.monotonic()
    status, rusage = waited or (None, None)
    return {
        "exit_code": os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None,
        "cpu_s": rusage.ru_utime + rusage.ru_stime if rusage else 0.0,
        "wall_s": ended - started,
        "max_rss_mb": rusage.ru_maxrss / 1024 if rusage else 0.0,
        "stdout": out.decode("utf-8", "replace"),
        "stderr": err.decode("utf-8", "replace"),
        "limit": limit,
    }


def _rn_cpu(pid, tick):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / tick  # utime, stime, cutime, cstime


def _rn_kill_all(pgid, wait_child):
    """SIGKILL every process of the run (pid 1: the whole namespace), reap them all.

    Returns the child's (status, rusage) when wait_child, else None."""
    import glob
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
        for path in glob.glob("/proc/self/task/*/children"):
            with open(path) as f:
                for kid in f.read().split():
                    try:
                        os.kill(int(kid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            break
        time.sleep(0.001)
    return waited


RUNNER_FUNCTIONS = (_rn_read, _rn_write, _rn_run_job, _rn_child, _rn_limit, _rn_exec, _rn_call,
                    _rn_collect, _rn_cpu, _rn_kill_all, _rn_main)
