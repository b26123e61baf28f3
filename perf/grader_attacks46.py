"""Benchmark (CPU, root): the rows of issue 46 that need a number, each with the figure its defence changes.

  chatty    ten children write one byte to stderr every ~200 us for 1.5 s; the CPU the whole sandbox
            burnt (a cpuacct cgroup around this grader process) minus the program's charged CPU and the
            grader's own: what the job server spent reading, charged to no one, against the 2 s limit
  limits    the memory cgroup's limit for four consecutive jobs that each leave 48 MiB of /tmp (memory_mb=64),
            then 8 workers of 50 MiB
  semget    512 MiB of System V semaphores at memory_mb=64 (kernel memory no RLIMIT_AS sees)
  astral    the grader's peak RSS growth (fresh process) grading 16 MiB of output: one huge first token, one
            astral character, a leading and a trailing space (CPython stores the text at 4 bytes a char)
  quotas    per-uid kernel quotas: one sandbox's program takes the pipe pages (fs.pipe-user-pages-soft, pipes
            raised to 1 MiB), forks until refused, opens POSIX message queues (RLIMIT_MSGQUEUE) and queues
            real-time signals to itself (RLIMIT_SIGPENDING) until refused, tries 128 inotify instances, and
            holds them; meanwhile a second sandbox on the same backend, a plain-backend sandbox and this
            grader each make a pipe (its size; can it be raised to 1 MiB?), fork 4 children, call
            inotify_init1 64 times (denied inside by seccomp; the grader's own), open a message queue and
            queue one real-time signal. For a non-root grader, run the script as that uid.

    python perf/grader_attacks46.py                          # the default backend, every row
    GSPO_SANDBOX_BACKEND=unshare python perf/grader_attacks46.py --only chatty,limits

One JSON line per row. Run an older tree's code with PYTHONPATH pointing at a folder whose gspo links to it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from gspo.evals.graders.code import run_code
from gspo.evals.sandbox import Job, Sandbox, sandbox_backend

CHATTY = """import os, sys, time
kids = []
for _ in range(10):
    pid = os.fork()
    if pid == 0:
        while True:
            os.write(2, b".")
            time.sleep(0.0002)
    kids.append(pid)
time.sleep(1.5)
for pid in kids:
    os.kill(pid, 9)
print("done")
"""
FILL = "for i in range(6):\n    open(f'/tmp/f{i}', 'wb').write(b'x' * (8 << 20))\nprint('ok')"
WORKERS = ("import os, time\nr, w = os.pipe()\nfor _ in range(8):\n    if os.fork() == 0:\n"
           "        held = b'x' * (50 << 20)\n        os.write(w, b'x')\n        time.sleep(1)\n        os._exit(0)\n"
           "os.close(w)\nprint('HELD', 50 * len(b''.join(iter(lambda: os.read(r, 1), b''))))")
SEMGET = """import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
held = 0
for _ in range(4096):
    if libc.syscall(64, 0, 32000, 0o1600) < 0:  # semget(IPC_PRIVATE, 32000 semaphores): ~1 MiB of kernel memory
        print("refused", errno.errorcode[ctypes.get_errno()], "after", held, "MiB")
        break
    held += 1
    if held >= 512:
        break
if held >= 512:
    print("HELD", held, "MiB")
"""
HOG = """import fcntl, os, time
pipes, raised = [], 0
while len(pipes) < 120:  # RLIMIT_NOFILE is 256
    pipes.append(os.pipe())
    try:
        fcntl.fcntl(pipes[-1][1], 1031, 1 << 20)  # F_SETPIPE_SZ: 256 pages charged to the uid at once
        raised += 1
    except OSError:  # past fs.pipe-user-pages-soft: keep making pipes (16 pages each, then 2)
        pass
kids = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids += 1
import ctypes, signal, threading
libc = ctypes.CDLL(None, use_errno=True)
queues = 0
while queues < 64 and libc.mq_open(f"/q{queues}".encode(), 0o102, 0o600, None) >= 0:  # O_CREAT | O_RDWR
    queues += 1  # ~80 KiB each (10 x 8 KiB) of RLIMIT_MSGQUEUE's per-user bytes
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
pending = 0
try:
    while pending < 1 << 20:
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)  # tgkill: queued, RLIMIT_SIGPENDING counts
        pending += 1
except OSError:
    pass
watchers = 0
while watchers < 128 and libc.inotify_init1(0) >= 0:  # fs.inotify.max_user_instances is 128 by default
    watchers += 1
print(raised, len(pipes), kids, queues, pending, watchers, flush=True)
ctypes.CDLL(None).prctl(15, b"gspo-hog-ready", 0, 0, 0)  # PR_SET_NAME: seen from outside (/proc/pid/stat)
time.sleep(HOLD)
"""
QUOTA_PROBE = """import ctypes, fcntl, json, os
r, w = os.pipe()
size = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ: 65536 normally, 8192 once the uid is past the soft limit
try:
    fcntl.fcntl(w, 1031, 1 << 20)
    raised = True
except OSError:
    raised = False
forks = 0
for _ in range(4):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    forks += 1
libc = ctypes.CDLL(None, use_errno=True)
fds = [libc.inotify_init1(0) for _ in range(64)]
inotify = f"{sum(fd >= 0 for fd in fds)} of 64"
for fd in fds:
    if fd >= 0:
        os.close(fd)
mq = libc.mq_open(f"/probe{os.getpid()}".encode(), 0o102, 0o600, None)
mqueue = "ok" if mq >= 0 else os.strerror(ctypes.get_errno())
if mq >= 0:
    libc.mq_unlink(f"/probe{os.getpid()}".encode())
import signal, threading
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
try:
    signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
    queued = "ok"
except OSError as e:
    queued = e.strerror
print(json.dumps({"pipe_bytes": size, "raised_1mib": raised, "forks_of_4": forks, "inotify": inotify,
                  "mq_open": mqueue, "rt_signal_queued": queued}))
"""
ASTRAL = "import os\nos.write(1, b' ' + b'1' * ((16 << 20) - 8) + '\\U0001F600'.encode() + b' \\n')"
_CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def chatty() -> dict:
    group = _CPUACCT / f"gspo-perf-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cgroup.procs").write_text(str(os.getpid()))
        run_code("print(1)", [{"input": "", "output": "1"}], timeout_s=2, memory_mb=128)  # warm: probe, imports
        usage0, own0 = int((group / "cpuacct.usage").read_text()), resource.getrusage(resource.RUSAGE_SELF)
        with Sandbox() as sb:
            raw = sb.run(Job(code=CHATTY, cpu_s=2.0))
        usage1, own1 = int((group / "cpuacct.usage").read_text()), resource.getrusage(resource.RUSAGE_SELF)
    finally:
        (_CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        group.rmdir()
    own = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime
    total = (usage1 - usage0) / 1e9
    return {"attack": "chatty_stderr", "limit_s": 2.0, "limit": raw.limit, "stdout": raw.stdout.strip(),
            "charged_cpu_s": round(raw.cpu_s, 3), "sandbox_cpu_s": round(total - own, 3),
            "uncharged_cpu_s": round(total - own - raw.cpu_s, 3), "wall_s": round(raw.wall_s, 2),
            "server_cpu_s": round(getattr(raw, "server_cpu_s", -1), 3)}


def limits() -> dict:
    seen = []
    with Sandbox() as sb:
        for _ in range(4):
            sb.run(Job(code=FILL, memory_mb=64))
            if sb.cgroup is None:
                return {"attack": "cgroup_limits", "cgroup": None}
            path = sb.cgroup.path
            seen.append(int((path / "memory.limit_in_bytes").read_text()) >> 20)
        last = sb.run(Job(code=WORKERS, memory_mb=64, cpu_s=5))
    return {"attack": "cgroup_limits", "limits_mib": seen, "workers_8x50": last.limit or last.stdout.strip()}


def semget() -> dict:
    r = run_code(SEMGET, [{"input": "", "output": "HELD 512 MiB"}], timeout_s=5, memory_mb=64)
    return {"attack": "semget", "verdict": r.verdict, "output": r.tests[0].stdout.strip()}


def astral() -> dict:
    """In this (fresh) process."""
    run_code("print(1)", [{"input": "", "output": "1"}], timeout_s=5, memory_mb=256)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = run_code(ASTRAL, [{"input": "", "output": "2"}], timeout_s=10, memory_mb=256)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"attack": "memory_astral_token", "verdict": r.verdict, "rss_growth_mib": round(grown / 1024, 1)}


def quotas() -> dict:
    """Hog in one sandbox (held 8 s once it has named itself ready), probes elsewhere meanwhile."""
    import threading

    import psutil

    hog: dict = {}
    with Sandbox() as a, Sandbox() as b, Sandbox("plain") as c:
        for sb in (a, b, c):
            sb.run(Job(code="print(1)"))  # started: runner and job server up before the hog runs
        worker = threading.Thread(target=lambda: hog.update(r=a.run(Job(code=HOG.replace("HOLD", "8"), cpu_s=5,
                                                                      wall_s=30, memory_mb=64))))
        worker.start()
        ready = False
        while worker.is_alive() and not ready:
            try:
                ready = any(p.name() == "gspo-hog-ready" for p in psutil.Process(a._proc.pid).children(recursive=True))
            except psutil.Error:
                pass
            time.sleep(0.05)
        seen = {}
        for name, sb in (("second_sandbox", b), ("plain_sandbox", c)):
            r = sb.run(Job(code=QUOTA_PROBE, cpu_s=2))
            seen[name] = json.loads(r.stdout) if r.stdout.strip() else r.stderr.strip()[-200:]
        out = subprocess.run([sys.executable, "-c", QUOTA_PROBE], capture_output=True, text=True, check=False)
        seen["grader"] = json.loads(out.stdout) if out.stdout.strip() else out.stderr.strip()[-200:]
        seen["hog_held_throughout"] = ready and worker.is_alive()
        worker.join()
    return {"attack": "per_uid_quotas", "grader_uid": os.geteuid(), "hog_pipes_and_forks": hog["r"].stdout.strip(),
            **seen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="chatty,limits,semget,astral")
    parser.add_argument("--fresh", help=argparse.SUPPRESS)  # one row, in a child process
    args = parser.parse_args()
    rows = {"chatty": chatty, "limits": limits, "semget": semget, "astral": astral, "quotas": quotas}
    if args.fresh:
        print(json.dumps(rows[args.fresh]()), flush=True)
        return
    print(json.dumps({"backend": sandbox_backend()}), flush=True)
    for part in args.only.split(","):
        if part == "astral":
            subprocess.run([sys.executable, __file__, "--fresh", part], check=True, env=os.environ)
        else:
            print(json.dumps(rows[part]()), flush=True)


if __name__ == "__main__":
    main()
