"""Benchmark (CPU): the red team's attacks of issue 36 on the grader, each with its verdict and the figure
that says whether the defence held: charged vs burnt CPU of autoreaped workers, what test 2 read of test 1
through the network namespace, the grader's RSS growth on 16 MiB of output shaped for its comparison, a
silent checker's and a NaN's verdicts, the job server's /proc/1 and Unicode whitespace in a token comparison.

    python perf/grader_attacks.py                          # the default backend
    GSPO_SANDBOX_BACKEND=unshare python perf/grader_attacks.py --only cpu,net

One JSON line per attack. The memory attacks each run in a fresh grader process (ru_maxrss is a peak).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

from gspo.evals.graders.code import _judge, run_code
from gspo.evals.sandbox import Job, Sandbox, sandbox_backend

# Workers forked in pairs, each burning `burn` s of CPU and writing it to a pipe, under SIGCHLD=SIG_IGN
# (HOW=ign) or SA_NOCLDWAIT (HOW=nocldwait); whatever the kernel allows, the program waits for each pair
# and prints the CPU its workers burnt. Autoreaped, that CPU reaches no RUSAGE_CHILDREN.
AUTOREAP = """import ctypes, os, signal, sys, time
HOW, TOTAL, BURN = {how!r}, {total!r}, {burn!r}
refused = ""
try:
    if HOW == "ign":
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    else:
        class Act(ctypes.Structure):
            _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                        ("restorer", ctypes.c_void_p)]
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.sigaction(17, ctypes.byref(Act(None, (ctypes.c_ulong * 16)(), 2, None)), None) != 0:  # SA_NOCLDWAIT
            raise OSError(ctypes.get_errno(), "sigaction")
except OSError as e:
    refused = f" (refused: errno {{e.errno}})"
r, w = os.pipe()
burnt, n = 0.0, 0
while n * BURN < TOTAL:
    for _ in range(2):
        if os.fork() == 0:
            while time.process_time() < BURN:
                pass
            os.write(w, f"{{time.process_time():.3f}}\\n".encode())
            os._exit(0)
        n += 1
    for _ in range(2):
        try:
            os.wait()
        except ChildProcessError:  # autoreaped: nothing left to wait for
            break
os.close(w)
burnt = sum(float(x) for x in os.read(r, 1 << 20).split())
print(f"burnt {{burnt:.2f}}{{refused}}", file=sys.stderr)
print("done")
"""

# Test 1 leaves its input in the network namespace: a TIME_WAIT socket to port <input> where loopback is
# up (bubblewrap), else <input> failed sends in the namespace's SNMP counter OutNoRoutes (unshare).
# Test 2 prints what it finds there.
NET = """import socket, sys
data = sys.stdin.read().strip()
def found():
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[3] == "06":  # TIME_WAIT
            return str(int(f[2].split(":")[1], 16))
    snmp = [line.split() for line in open("/proc/net/snmp") if line.startswith("Ip:")]
    n = int(dict(zip(snmp[0], snmp[1]))["OutNoRoutes"])
    return str(n) if n else "fresh"
if data == "store":
    secret = {secret}
    try:
        srv = socket.socket(); srv.bind(("127.0.0.1", secret)); srv.listen(1)
        cli = socket.create_connection(("127.0.0.1", secret)); conn, _ = srv.accept()
        cli.close(); conn.close(); srv.close()
    except OSError:  # loopback down: the failed connect counted one already
        for _ in range(secret - 1):
            try:
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9))
            except OSError:
                pass
    print("stored")
else:
    print(found())
"""
SECRET = 7431

# The job server is pid 1 of the program's pid namespace: its /proc files must be out of the program's reach.
PROC1 = """import os
tries = {}
for name, act in (("oom_score_adj", lambda: open("/proc/1/oom_score_adj", "w").write("-1000")),
                  ("clear_refs", lambda: open("/proc/1/clear_refs", "w").write("1")),
                  ("fd", lambda: os.listdir("/proc/1/fd"))):
    try:
        act()
        tries[name] = "ESCAPED"
    except OSError as e:
        tries[name] = f"errno {e.errno}"
print(tries)
"""

SILENT_CHECKER = """import sys
out = open(sys.argv[3]).read().split()
try:
    got = int(out[0])
except (IndexError, ValueError):
    sys.exit(0)  # cannot parse: returns without printing
print(1 if got == int(open(sys.argv[2]).read()) else 0)
"""
TOLERANCE_CHECKER = """import sys
got, want = (float(open(p).read()) for p in sys.argv[3:1:-1])
print(0 if abs(got - want) > 1e-6 else 1)
"""

# 16 MiB of output shaped for each comparison (the runner's output cap is 16 MiB).
MEMORY = {
    "decimal_tokens": ("print(' '.join(['1'] * 8_000_000))", {"compare": "lines"}, "2"),
    "split_tokens": ("print('ab ' * 5_500_000)", {"compare": "tokens"}, "ab"),
    "json_dicts": ("import os\nos.write(1, b'[' + b'{},' * 5_500_000 + b'{}]')\nos._exit(0)\ndef f():\n    pass",
                   {"fn_name": "f"}, "[]"),
}


def cpu(how: str, limit: float, total: float, burn: float = 0.05) -> dict:
    """A wall limit of 60 s, so that only CPU can stop the program whatever the machine's load."""
    with Sandbox() as sb:
        raw = sb.run(Job(code=AUTOREAP.format(how=how, total=total, burn=burn), cpu_s=limit, wall_s=60))
    verdict = _judge(raw, limit, 256).verdict
    if verdict == "accepted" and raw.stdout.strip() != "done":
        verdict = "wrong_answer"
    return {"attack": f"autoreap_{how}", "limit_s": limit, "verdict": verdict, "limit": raw.limit,
            "charged_cpu_s": round(raw.cpu_s, 3), "workers": raw.stderr.strip()[-60:]}


def net() -> dict:
    tests = [{"input": "store", "output": "stored"}, {"input": "read", "output": str(SECRET)}]
    r = run_code(NET.format(secret=SECRET), tests, timeout_s=5, memory_mb=128, stop_on_failure=False)
    return {"attack": "net_state", "test2_verdict": r.tests[1].verdict, "test2_output": r.tests[1].stdout.strip()}


def proc1() -> dict:
    r = run_code(PROC1, [{"input": "", "output": "x"}], timeout_s=2, memory_mb=128)
    return {"attack": "proc1", "output": r.tests[0].stdout.strip()}


def checkers() -> dict:
    silent = run_code("print('x')", [{"input": "", "output": "5"}], timeout_s=2, memory_mb=128, checker=SILENT_CHECKER)
    nan = run_code("print('nan')", [{"input": "", "output": "0.5"}], timeout_s=2, memory_mb=128,
                   checker=TOLERANCE_CHECKER)
    good = run_code("print('0.5000001')", [{"input": "", "output": "0.5"}], timeout_s=2, memory_mb=128,
                    checker=TOLERANCE_CHECKER)
    return {"attack": "checkers", "silent_checker_on_x": silent.verdict, "nan_through_tolerance": nan.verdict,
            "control_0.5000001": good.verdict}


def whitespace() -> dict:
    nbsp = run_code("print('1\\u00a02\\u30003')", [{"input": "", "output": "1 2 3"}], timeout_s=2, memory_mb=128,
                    compare="tokens")
    return {"attack": "unicode_whitespace_tokens", "verdict": nbsp.verdict}


def memory(shape: str) -> dict:
    """In this (fresh) process: the grader's peak RSS growth while grading the shaped output."""
    code, kw, expected = MEMORY[shape]
    run_code("print(1)", [{"input": "", "output": "1"}], timeout_s=5, memory_mb=256)  # warm: probe, imports
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = run_code(code, [{"input": "1", "output": expected}], timeout_s=10, memory_mb=512, **kw)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"attack": f"memory_{shape}", "verdict": r.verdict, "rss_growth_mib": round(grown / 1024, 1),
            "message": r.message[:80]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="cpu,net,memory,checkers,proc1,whitespace")
    parser.add_argument("--shape", help=argparse.SUPPRESS)  # one memory shape, in a child process
    args = parser.parse_args()
    if args.shape:
        print(json.dumps(memory(args.shape)))
        return
    print(json.dumps({"backend": sandbox_backend()}), flush=True)
    for part in args.only.split(","):
        if part == "cpu":
            for how in ("ign", "nocldwait"):
                print(json.dumps(cpu(how, limit=1.0, total=2.0)), flush=True)  # over the limit
                print(json.dumps(cpu(how, limit=3.0, total=1.5)), flush=True)  # under it: charged vs burnt
        elif part == "memory":
            for shape in MEMORY:
                subprocess.run([sys.executable, __file__, "--shape", shape], check=True, env=os.environ)
        else:
            print(json.dumps({"net": net, "proc1": proc1, "checkers": checkers, "whitespace": whitespace}[part]()),
                  flush=True)


if __name__ == "__main__":
    main()
