"""Attacks on the grader itself (issues 21 and 36), under every strongly isolating backend this machine has.

Each program would be rewarded if its attack worked: it escapes a limit (CPU in unwaited workers, memory in
memfds and tmpfs inodes), reads what it must not (an expected output left in the runner, the grader's
keyring), keeps state from one test to the next, or sabotages the runner for the next job. Each test checks
a verdict or a number that only the limit explains, from outside the sandbox where it can.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from gspo.evals.graders.code import run_code
from gspo.evals.sandbox import STRONG, Job, Sandbox, sandbox_protections

# GSPO_SANDBOX_BACKEND=unshare (CI's second run, the fallback forced) narrows these tests to that backend
FORCED = os.environ.get("GSPO_SANDBOX_BACKEND")
STRONG_BACKENDS = [b for b in ("bwrap", "unshare") if shutil.which(b) and FORCED in (None, "", b)]
FAILING = {"wrong_answer", "runtime_error", "time_limit", "memory_limit", "output_limit", "compile_error"}


@pytest.fixture(params=STRONG_BACKENDS)
def backend(request, monkeypatch):
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", request.param)
    monkeypatch.delenv("GSPO_SANDBOX_WEAK", raising=False)
    if not all(sandbox_protections(request.param)[k] for k in STRONG):
        pytest.skip(f"{request.param} does not isolate strongly here")
    return request.param


def _grader(script: str, backend: str, *, python: str = sys.executable, env: dict | None = None,
            preexec: list[str] | None = None) -> dict:
    """Run `script` (it prints one JSON line last) in a fresh grader process on `backend`."""
    env = {**os.environ, "GSPO_SANDBOX_BACKEND": backend, **(env or {})}
    env.pop("GSPO_SANDBOX_WEAK", None)
    proc = subprocess.run([*(preexec or []), python, "-c", textwrap.dedent(script)], env=env, capture_output=True,
                          text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- 1. CPU burnt in forked workers that are never waited for ---------------------------------------------

def test_cpu_of_unwaited_workers_is_charged(backend):
    """Two workers each burn 0.35 s of their own CPU (under the 0.5 s limit alone, 0.7 s together), report
    through pipes and are never waited for; the program answers and leaves with os._exit. Only charging
    the workers' CPU to the program gives time_limit."""
    code = ("import os, time\npipes = []\nfor i in range(2):\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
            "        while time.process_time() < 0.35:\n            pass\n        os.write(w, b'x')\n        os._exit(0)\n"
            "    pipes.append(r)\nprint(len(b''.join(os.read(r, 1) for r in pipes)), flush=True)\nos._exit(0)")
    with Sandbox() as sb:  # a wall limit far away: only CPU explains the kill, whatever the machine's load
        result = sb.run(Job(code=code, cpu_s=0.5, wall_s=60))
    assert result.limit == "cpu" and result.cpu_s > 0.5, result


_CHATTY = """import os, time
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


def test_a_program_that_trickles_output_costs_the_grader_little(backend):
    """Ten children write a byte to stderr every ~200 us: the job server read /proc for every descendant's CPU
    on every pass of its read loop, 1.5x the CPU limit charged to no one (issue 46). Now CPU is polled on a
    clock and byte-sized reads gather: the job server's own CPU stays a small fraction of the limit."""
    with Sandbox() as sb:
        result = sb.run(Job(code=_CHATTY, cpu_s=2.0))
    assert (result.stdout, result.limit) == ("done\n", None), result
    # 15% of the limit: 0.08 s measured at issue 46 (~1.2 before it); 0.20-0.21 s on bwrap after issue 58 (the job
    # server's larger seccomp filter and chunked job files), at load 3 on 2 cores; the unshare backend stays under 0.2
    assert 0 < result.server_cpu_s < 0.3, result.server_cpu_s


def test_stderr_is_read_up_to_the_output_limit(backend):
    """stderr was read without end (its last 64 KiB kept): a program writing it flat out cost the job server
    about the CPU it cost the program. Now past output_bytes in all it is output_limit, as stdout."""
    code = "import os\nfor _ in range(40):\n    os.write(2, b'x' * (1 << 20))\nprint('done')"
    with Sandbox() as sb:
        over, under = (sb.run(Job(code=code.replace("40", n), cpu_s=5)) for n in ("40", "3"))
    assert (over.limit, over.stdout) == ("output", ""), over
    assert (under.limit, under.stdout, len(under.stderr)) == (None, "done\n", 1 << 16), under


# Workers forked in pairs, each burning 0.05 s of CPU and writing what it burnt to a pipe, after the program
# asked the kernel to reap them itself (SIGCHLD to SIG_IGN, or SA_NOCLDWAIT): reaped so, their CPU would reach
# no RUSAGE_CHILDREN. The program waits for each pair either way and reports the CPU they burnt on stderr.
_AUTOREAP = """import ctypes, os, signal, sys, time
HOW, TOTAL = {how!r}, {total!r}
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
    refused = f"refused {{e.errno}}"
r, w = os.pipe()
n = 0
while n * 0.05 < TOTAL:
    for _ in range(2):
        if os.fork() == 0:
            while time.process_time() < 0.05:
                pass
            os.write(w, f"{{time.process_time():.3f}} ".encode())
            os._exit(0)
        n += 1
    for _ in range(2):
        try:
            os.wait()
        except ChildProcessError:  # autoreaped: nothing left to wait for
            break
os.close(w)
print(sum(float(x) for x in os.read(r, 1 << 16).split()), refused, file=sys.stderr)
print("done")
"""


@pytest.mark.parametrize("how", ["ign", "nocldwait"])
def test_cpu_of_autoreaped_workers_is_charged(backend, how):
    """The workers burn 0.8 s at a CPU limit of 0.4 s (the wall limit is far away, so only CPU can stop them);
    autoreaped, they were charged ~0.03 s and the program ended cleanly (issue 36). Refused a new SIGCHLD
    action, the program's workers are waited for and charged: the CPU limit stops it."""
    with Sandbox() as sb:
        over = sb.run(Job(code=_AUTOREAP.format(how=how, total=0.8), cpu_s=0.4, wall_s=60))
        under = sb.run(Job(code=_AUTOREAP.format(how=how, total=0.4), cpu_s=5, wall_s=60))
    assert over.limit == "cpu" and over.cpu_s >= 0.4, over
    burnt, refused, errno = under.stderr.split()
    assert (under.stdout, refused, errno) == ("done\n", "refused", "1"), under  # EPERM from the filter
    assert float(burnt) >= 0.4 and under.cpu_s >= float(burnt), (burnt, under)


# --- 2 and 7. Memory outside the address space: memfds, tmpfs bytes, tmpfs inodes -------------------------

def test_memory_in_memfds_is_refused(backend):
    """20 memfds of 16 MiB (RLIMIT_FSIZE binds memfds too) hold 320 MiB that no address space counts."""
    code = ("import os\nfds = []\nfor _ in range(20):\n    fd = os.memfd_create('x')\n"
            "    for _ in range(16):\n        os.write(fd, b'x' * (1 << 20))\n    fds.append(fd)\n"
            "print('HELD', 16 * len(fds))")
    result = run_code(code, [{"input": "", "output": "HELD 320"}], timeout_s=5, memory_mb=64)
    assert result.verdict == "runtime_error", result
    assert "PermissionError" in result.tests[0].stderr


def test_memory_of_forked_workers_is_charged_together(backend):
    """Six workers hold 40 MiB each, every one within its own address-space limit of 64 MiB: only a limit on
    the sandbox's memory as a whole (its cgroup) stops 240 MiB at memory_mb=64."""
    if not sandbox_protections(backend)["memory_cgroup"]:
        pytest.skip("no memory cgroup here (a root grader and a memory controller it may write)")
    code = ("import os, time\nr, w = os.pipe()\nfor _ in range(6):\n    if os.fork() == 0:\n"
            "        held = b'x' * (40 << 20)\n        os.write(w, b'x')\n        time.sleep(1)\n        os._exit(0)\n"
            "os.close(w)\nprint('HELD', 40 * len(b''.join(iter(lambda: os.read(r, 1), b''))))")
    result = run_code(code, [{"input": "", "output": "HELD 240"}], timeout_s=5, memory_mb=64)
    assert result.verdict == "memory_limit", result


def test_each_job_gets_its_own_memory_budget(backend):
    """The cgroup's limit was usage + 2 * memory_mb, so what earlier tests left charged (here 48 MiB of /tmp
    each, freed late with their mounts) raised it: 160 -> 556 MiB over four tests, then 8 workers of 50 MiB
    accepted at memory_mb=64 (issue 46). Now each job has a fresh cgroup whose limit is its own budget."""
    if not sandbox_protections(backend)["memory_cgroup"]:
        pytest.skip("no memory cgroup here (a root grader and a memory controller it may write)")
    fill = "for i in range(6):\n    open(f'/tmp/f{i}', 'wb').write(b'x' * (8 << 20))\nprint('ok')"
    workers = ("import os, time\nr, w = os.pipe()\nfor _ in range(8):\n    if os.fork() == 0:\n"
               "        held = b'x' * (50 << 20)\n        os.write(w, b'x')\n        time.sleep(1)\n        os._exit(0)\n"
               "os.close(w)\nprint('HELD', 50 * len(b''.join(iter(lambda: os.read(r, 1), b''))))")
    limits = []
    with Sandbox() as sb:
        for _ in range(4):
            assert sb.run(Job(code=fill, memory_mb=64)).stdout == "ok\n"
            limits.append(sb.cgroup.limit_bytes())
        last = sb.run(Job(code=workers, memory_mb=64, cpu_s=5))
        after = sb.run(Job(code="print('alive')"))  # the OOM killer took the program's processes, not the runner
    assert limits == [(2 * 64 + 32) << 20] * 4, [x >> 20 for x in limits]
    assert last.limit == "memory", last
    assert (after.stdout, after.error) == ("alive\n", None), after


def test_tmpfs_bytes_are_capped_by_the_memory_limit(backend):
    """Files in /tmp and /dev/shm are memory no address-space limit sees: together capped at memory_mb."""
    code = ("import errno, os\nheld = 0\nfor d in ('/tmp', '/dev/shm'):\n    for i in range(64):\n        try:\n"
            "            with open(f'{d}/f{i}', 'wb') as f:\n                f.write(b'x' * (8 << 20))\n"
            "            held += 8\n        except OSError:\n            break\nprint('HELD', held)")
    result = run_code(code, [{"input": "", "output": "HELD 1024"}], timeout_s=5, memory_mb=64)
    word, held = result.tests[0].stdout.split()
    assert word == "HELD" and int(held) <= 64, result


def test_tmpfs_inodes_are_capped(backend):
    """Empty files cost kernel memory (inodes, dentries) but no bytes: their count is capped."""
    code = ("import errno\nn = 0\ntry:\n    while n < 100000:\n        open(f'/tmp/{n}', 'w').close()\n        n += 1\n"
            "    print('MADE', n)\nexcept OSError as e:\n    print('LIMITED', errno.errorcode[e.errno], n)")
    result = run_code(code, [{"input": "", "output": "MADE 100000"}], timeout_s=10, memory_mb=64)
    word, err, n = result.tests[0].stdout.split()
    assert (word, err) == ("LIMITED", "ENOSPC") and int(n) < 100000, result


# --- 3 and 4. Nothing of one test reaches the next --------------------------------------------------------

_EQUAL = "import sys\nprint(1 if open(sys.argv[2]).read().split() == open(sys.argv[3]).read().split() else 0)"


def test_a_checkers_expected_output_never_reaches_the_next_program(backend):
    """Test 1's expected output was in the checker's memory; test 2 (same answer) is passed only by a program
    that finds it in its own address space."""
    code = ("import ctypes, re\nfound = set()\nfor line in open('/proc/self/maps').read().splitlines():\n"
            "    lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
            "    if line.split()[1].startswith('rw'):\n"
            "        found |= set(re.findall(rb'ANSWER-(\\d{4})', ctypes.string_at(lo, hi - lo)))\n"
            "print(*sorted('ANSWER-' + x.decode() for x in found) or ['none'])")
    tests = [{"input": "1", "output": "ANSWER-7431"}, {"input": "2", "output": "ANSWER-7431"}]
    result = run_code(code, tests, timeout_s=3, memory_mb=256, checker=_EQUAL, stop_on_failure=False)
    assert [t.verdict for t in result.tests] == ["wrong_answer", "wrong_answer"], result
    assert "7431" not in result.tests[1].stdout


@pytest.mark.parametrize("place", ["/tmp", "/dev/shm", "sysv"])
def test_no_state_survives_from_one_test_to_the_next(backend, place):
    """Test 1 stores its input; test 2 passes only by printing it back."""
    if place == "sysv":
        store = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
                 "shm = libc.shmget(0x6773706f, 4096, 0o1666)\nassert shm >= 0, ctypes.get_errno()\n"
                 "addr = libc.shmat(shm, None, 0)\nold = ctypes.string_at(addr)\nctypes.memmove(addr, data, len(data))\n")
    else:
        store = (f"import os\npath = '{place}/kept'\nold = open(path, 'rb').read() if os.path.exists(path) else b''\n"
                 "open(path, 'wb').write(data)\n")
    code = "import sys\ndata = sys.stdin.buffer.read().strip() + b'\\0'\n" + store + "print(old.rstrip(b'\\0').decode() or 'fresh')"
    tests = [{"input": "KEPT-42", "output": "x"}, {"input": "2", "output": "KEPT-42"}]
    result = run_code(code, tests, timeout_s=2, memory_mb=128, stop_on_failure=False)
    assert result.tests[1].verdict != "accepted" and "KEPT-42" not in result.tests[1].stdout, result


# Test 1 leaves its input in the network namespace: a TIME_WAIT socket to port <secret> where loopback is up
# (bubblewrap), else <secret> failed sends in the namespace's SNMP counter OutNoRoutes (unshare); test 2
# prints what it finds there (issue 36: with one namespace per sandbox, test 2 printed test 1's 7431).
_NET = """import socket, sys
if sys.stdin.read().strip() == "store":
    try:
        srv = socket.socket(); srv.bind(("127.0.0.1", 7431)); srv.listen(1)
        cli = socket.create_connection(("127.0.0.1", 7431)); conn, _ = srv.accept()
        cli.close(); conn.close(); srv.close()
    except OSError:  # loopback down: the failed connect counted one already
        for _ in range(7430):
            try:
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9))
            except OSError:
                pass
    print("stored")
else:
    waits = [line.split()[2] for line in open("/proc/net/tcp").read().splitlines()[1:] if line.split()[3] == "06"]
    snmp = [line.split() for line in open("/proc/net/snmp") if line.startswith("Ip:")]
    counted = int(dict(zip(snmp[0], snmp[1]))["OutNoRoutes"])
    print(int(waits[0].split(":")[1], 16) if waits else counted or "fresh")
"""


def test_no_socket_state_survives_from_one_test_to_the_next(backend):
    """Each job has a network namespace of its own: test 2 finds neither test 1's socket nor its counters."""
    tests = [{"input": "store", "output": "stored"}, {"input": "read", "output": "7431"}]
    result = run_code(_NET, tests, timeout_s=5, memory_mb=128, stop_on_failure=False)
    assert result.tests[0].verdict == "accepted", result  # test 1 did leave its state
    assert (result.tests[1].verdict, result.tests[1].stdout) == ("wrong_answer", "fresh\n"), result


_PROC1 = """import os
for name, act in (("oom_score_adj", lambda: open("/proc/1/oom_score_adj", "w").write("-1000")),
                  ("clear_refs", lambda: open("/proc/1/clear_refs", "w").write("1")),
                  ("fd", lambda: os.listdir("/proc/1/fd"))):
    try:
        act()
        print("ESCAPED", name)
    except OSError as e:
        print("blocked", name, e.errno)
"""


def test_the_job_servers_proc_files_are_out_of_reach(backend):
    """The job server is pid 1 of the program's pid namespace; under unshare the program was root of the
    namespace its /proc files belong to and could write its oom_score_adj and clear_refs and list its fds
    (issue 36). Now nothing in the sandbox is uid 0 inside either: EACCES for all three."""
    result = run_code(_PROC1, [{"input": "", "output": "ESCAPED"}], timeout_s=2, memory_mb=128)
    assert result.tests[0].stdout.split("\n")[:3] == [f"blocked {n} 13" for n in ("oom_score_adj", "clear_refs", "fd")]


# --- Checkers fail closed; tokens split as testlib splits them ---------------------------------------------

_SILENT = """import sys
try:
    got = int(open(sys.argv[3]).read())
except ValueError:
    sys.exit(0)  # cannot parse: returns without printing, as an open-r1-style checker (prints 1/0) may
print(1 if got == int(open(sys.argv[2]).read()) else 0)
"""


def test_a_checker_must_say_yes(backend):
    """Exit 0 with nothing said accepted "x" (issue 36); now silence, an unparsable reply or a crash is
    checker_error, a "0" a wrong answer, and only an explicit yes accepts ("5.0", which int() cannot parse: "x"
    holds no number and is refused by the screen since issue 58)."""
    def verdict(printed: str, checker: str = _SILENT) -> str:
        return run_code(f"print({printed!r})", [{"input": "", "output": "5"}], timeout_s=2, memory_mb=128,
                        checker=checker).verdict
    assert [verdict("5.0"), verdict("4"), verdict("5"), verdict("x")] == ["checker_error", "wrong_answer", "accepted",
                                                                         "wrong_answer"]
    assert verdict("5", "print('maybe')") == "checker_error"
    assert verdict("5", "print('0.5')") == "wrong_answer"  # a score below 1


def test_non_finite_numbers_never_reach_a_checker(backend):
    """A tolerance checker that rejects "error > eps" passes NaN (nan > eps is false): it accepted "nan"
    (issue 36); "1e309", "-1e309", 400 nines and "1e999999" are infinities to float(), and "[NaN, NaN]" and
    "nan,nan" NaN once a checker splits on punctuation (issue 46: the filter matched words). Refused by value
    before the checker runs; the checker here accepts everything, so only that refusal explains the verdict."""
    literals = ["nan", "-Infinity", "1 sNaN", "1e309", "-1e309", "9" * 400, "1e999999", "[NaN, NaN]", "nan,nan"]
    tests = [{"input": literal, "output": "2.333333333"} for literal in literals]
    tests += [{"input": "", "output": "2.333333333"}, {"input": "2.333333333", "output": "2.333333333 1.5"},
              {"input": "0.5 infinite", "output": "0.5 x"}]  # empty, short, and a word that merely starts like one
    result = run_code("import sys\nsys.stdout.write(sys.stdin.read())", tests, timeout_s=2, memory_mb=128, checker="print(1)",
                      stop_on_failure=False)
    verdicts = [(t.verdict, t.message.split(" ")[0]) for t in result.tests]
    assert verdicts == [("wrong_answer", "non-finite")] * len(literals) + [
        ("wrong_answer", "empty"), ("wrong_answer", "1"), ("accepted", "")], verdicts


def test_tokens_split_on_ascii_whitespace_only(backend):
    """testlib's whitespace is space, tab, CR and LF: a no-break or ideographic space is part of a token
    (str.split took them as separators and accepted "1<NBSP>2<U+3000>3" for "1 2 3")."""
    def verdict(printed: str) -> str:
        return run_code(f"print({printed!r})", [{"input": "", "output": "1 2 3"}], timeout_s=2, memory_mb=128,
                        compare="tokens").verdict
    assert verdict("1\u00a02\u30003") == "wrong_answer"
    assert verdict("1\t2\r\n 3") == "accepted"


# --- 5. The grader's keyring and the calls no program needs -----------------------------------------------

_KEYRING = """
import ctypes, json, os, sys
from gspo.evals.graders.code import run_code
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall(250, 1, b"gspo-test")  # KEYCTL_JOIN_SESSION_KEYRING: a session keyring of the grader's own
secret = b"keyring-secret-7"
key = libc.syscall(248, b"user", b"gspo-secret", secret, len(secret), -3)  # add_key to @s
assert key > 0, ctypes.get_errno()
code = '''import ctypes
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(64)
key = libc.syscall(250, 10, -3, b"user", b"gspo-secret", 0)  # KEYCTL_SEARCH @s
n = libc.syscall(250, 11, key, buf, 64) if key > 0 else -1  # KEYCTL_READ
libc.syscall(248, b"user", b"planted", b"x", 1, -3)  # add_key to @s
libc.syscall(250, 3, key)  # KEYCTL_REVOKE
print(buf.raw[:n].decode() if n > 0 else "blocked", ctypes.get_errno())'''
r = run_code(code, [{"input": "", "output": secret.decode()}], timeout_s=2, memory_mb=128)
buf = ctypes.create_string_buffer(64)
still = libc.syscall(250, 11, key, buf, 64)  # still readable: not revoked
planted = libc.syscall(250, 10, -3, b"user", b"planted", 0)
print(json.dumps({"verdict": r.verdict, "stdout": r.tests[0].stdout, "intact": still == len(secret),
                  "planted": planted > 0}))
"""


def test_the_graders_keyring_is_out_of_reach(backend):
    seen = _grader(_KEYRING, backend)
    assert seen["verdict"] == "wrong_answer" and "keyring-secret-7" not in seen["stdout"], seen
    assert seen["intact"] and not seen["planted"], seen


def test_calls_no_program_needs_are_denied(backend):
    code = """import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
SHARED = open("/usr/bin/env", "rb").fileno()  # a host file every sandbox shares (read-only)
USR, UNIX = os.open("/usr", os.O_RDONLY), libc.syscall(41, 1, 1, 0)
LOCK, BIG = ctypes.create_string_buffer(32), ctypes.byref(ctypes.c_int(8 << 20))  # struct flock (F_RDLCK: 0), 8 MiB
calls = {"keyctl": (250, 0, -3, 0), "add_key": (248, b"user", b"k", b"x", 1, -3), "request_key": (249, b"user", b"k", None, 0),
         "io_uring_setup": (425, 4, ctypes.create_string_buffer(120)), "userfaultfd": (323, 0), "bpf": (321, 0, None, 0),
         "ptrace": (101, 0, 0, 0, 0), "unshare": (272, 0x20000000), "mount": (165, b"none", b"/tmp", b"tmpfs", 0, None),
         "memfd_create": (319, b"x", 0), "shmget": (29, 0, 4096, 0o1600), "perf_event_open": (298, None, 0, -1, -1, 0),
         # issue 46: kernel memory, machine-wide quotas and channels through the host's shared files
         "semget": (64, 0, 64, 0o1600), "io_setup": (206, 1, ctypes.byref(ctypes.c_ulong(0))), "inotify_init": (253,),
         "inotify_init1": (294, 0), "fanotify_init": (300, 0, 0), "vsock": (41, 40, 1, 0), "netlink": (41, 16, 3, 0),
         "packet": (41, 17, 3, 0), "flock": (73, SHARED, 2), "fadvise64": (221, SHARED, 0, 0, 4),
         "mincore": (27, 0, 4096, 0),
         # issue 58: the host's writeback on demand, locks and dnotify on shared files, socket buffers past the default
         "sync": (162,), "syncfs": (306, SHARED), "F_SETLK": (72, SHARED, 6, LOCK), "F_GETLK": (72, SHARED, 5, LOCK),
         "F_OFD_SETLK": (72, SHARED, 37, LOCK), "F_OFD_GETLK": (72, SHARED, 36, LOCK), "F_NOTIFY": (72, USR, 1026, 1),
         "SO_SNDBUF": (54, UNIX, 1, 7, BIG, 4), "SO_RCVBUFFORCE": (54, UNIX, 1, 33, BIG, 4)}
# (the filter answers before the kernel reads any argument)
for name, args in calls.items():
    ctypes.set_errno(0)
    rc = libc.syscall(*args)
    print(name, errno.errorcode.get(ctypes.get_errno(), "OK") if rc < 0 else "OK")
for family in (1, 2, 10):  # AF_UNIX, AF_INET, AF_INET6 still work
    print(f"socket{family}", "OK" if libc.syscall(41, family, 1, 0) >= 0 else errno.errorcode[ctypes.get_errno()])
"""
    result = run_code(code, [{"input": "", "output": "never"}], timeout_s=2, memory_mb=128)
    said = dict(line.split() for line in result.tests[0].stdout.splitlines())
    sockets = {f"socket{family}": said.pop(f"socket{family}", None) for family in (1, 2, 10)}
    assert said == dict.fromkeys(said, "EPERM") and len(said) == 32, said
    assert sockets == dict.fromkeys(sockets, "OK"), sockets


# --- 6. A root grader that cannot drop its uid refuses ----------------------------------------------------

_FORKS = """
import json
from gspo.conf.errors import GspoError
from gspo.evals.graders.code import run_code
code = '''import os, time
n = 0
for n in range(40):
    try:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
    except OSError:
        break
else:
    n = 40
print('FORKED', n)'''
try:
    r = run_code(code, [{"input": "", "output": "FORKED 40"}], timeout_s=2, memory_mb=128)
    print(json.dumps({"verdict": r.verdict, "stdout": r.tests[0].stdout}))
except GspoError as e:
    print(json.dumps({"refused": str(e)}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs a root grader and setpriv")
def test_a_root_grader_that_cannot_drop_its_uid_refuses(backend):
    """Root without CAP_SETUID/CAP_SETGID (as in a container with a trimmed capability set): programs would
    run as uid 0, which the process limit does not bind."""
    seen = _grader(_FORKS, backend, preexec=["setpriv", "--bounding-set", "-setuid,-setgid", "--inh-caps", "-all"])
    assert "refused" in seen, seen
    assert "unprivileged" in seen["refused"] and "\n" not in seen["refused"]


# --- 8. Output bytes do not multiply in the grader, whatever their shape ----------------------------------

# One grader process, VmHWM (its peak RSS; not ru_maxrss, which keeps the peak of the pytest process it was
# forked from across exec, so that every stage read 0 MiB: issue 46) read after each stage, the stages in the order of what they may
# hold: 4 MiB shaped for each comparison (before streaming, 2M tokens parsed as Decimal grew the grader by
# ~257 MiB, str.split of 1.4M tokens and json.loads of [{},{},...] by ~106 MiB each; issue 36 measured
# +1,029, +424 and +424 MiB at 16 MiB); then 16 MiB of \x01, the largest output allowed, compared (JSON
# escaping would make each byte six) and then handed to a checker as a file (base64 in the job: JSON
# escaping there grew the grader by 224 MiB).
_OUTPUT = """
import json
from gspo.evals.graders.code import run_code
def grown():
    return (peak() - before) / 1024
def peak():
    return int(next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1])
run_code("print(1)", [{"input": "", "output": "1"}], timeout_s=2, memory_mb=128)  # warm: probe, imports
before = peak()
shapes = [("print(' '.join(['1'] * 2_000_000))", {"compare": "lines"}, "2"),
          ("print('ab ' * 1_400_000)", {"compare": "tokens"}, "ab"),
          ("import os\\nos.write(1, b'[' + b'{},' * 1_400_000 + b'{}]')\\nos._exit(0)\\ndef f():\\n    pass", {"fn_name": "f"}, "[]")]
seen = {"shaped": [run_code(code, [{"input": "1", "output": want}], timeout_s=5, memory_mb=256, **kw).verdict
                   for code, kw, want in shapes]}
seen["shaped_mb"] = grown()
code = "import os\\nos.write(1, b'\\\\x01' * ((16 << 20) - 1))\\nos.write(1, b'\\\\n')"
seen["control"] = run_code(code, [{"input": "", "output": "1"}], timeout_s=5, memory_mb=128).verdict
seen["control_mb"] = grown()
seen["checker"] = run_code(code, [{"input": "", "output": "1"}], timeout_s=5, memory_mb=128, checker="print(0)").verdict
seen["checker_mb"] = grown()
print(json.dumps(seen))
"""


# issue 46: one astral character makes CPython store the text at 4 bytes a character (64 MiB), and a leading
# space, a trailing one and one huge first token made copies of it: +144 MiB; now the text and the bytes. In a
# grader of its own: glibc's malloc keeps what an earlier 64 MiB text freed, and the peaks would add up.
_ASTRAL = _OUTPUT[:_OUTPUT.index("shapes = [")] + """
astral = "import os\\nos.write(1, b' ' + b'1' * ((16 << 20) - 8) + '\\\\U0001F600'.encode() + b' \\\\n')"
print(json.dumps({"astral": run_code(astral, [{"input": "", "output": "2"}], timeout_s=5, memory_mb=128).verdict,
                  "astral_mb": grown()}))
"""


def test_output_does_not_grow_the_grader_whatever_its_shape(backend):
    seen = {**_grader(_OUTPUT, backend), **_grader(_ASTRAL, backend)}
    assert seen["shaped"] == ["wrong_answer", "wrong_answer", "output_limit"] and seen["shaped_mb"] < 40, seen
    assert seen["control"] == "wrong_answer" and seen["control_mb"] < 64, seen
    assert seen["checker"] == "wrong_answer" and seen["checker_mb"] < 150, seen
    assert seen["astral"] == "wrong_answer" and seen["astral_mb"] < 120, seen  # 96-104 MiB measured, 144 before


# --- 9. What a program leaves behind cannot sabotage the next job -----------------------------------------

def test_a_deep_directory_tree_does_not_break_the_next_job(backend):
    deep = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')"
    with Sandbox() as sb:
        first = sb.run(Job(code=deep, cpu_s=5))
        second = sb.run(Job(code="print('fine')"))
    assert first.stdout == "deep\n" and (second.stdout, second.error) == ("fine\n", None), second


def test_a_full_tmp_does_not_break_the_checker(backend):
    fill = ("import sys\nn = 0\ntry:\n    while True:\n        open(f'/tmp/fill{n}', 'wb').write(b'x' * (1 << 20))\n        n += 1\n"
            "except OSError:\n    pass\nprint(6 * 7)")
    result = run_code(fill, [{"input": "", "output": "42"}], timeout_s=5, memory_mb=1024, checker=_EQUAL)
    assert result.verdict == "accepted", result


# --- 10. Per-user kernel quotas are each sandbox's own (issue 46) ----------------------------------------

_HOG = """import ctypes, fcntl, os, time
pipes, raised, kids = [], 0, 0
while len(pipes) < 120:  # RLIMIT_NOFILE is 256
    pipes.append(os.pipe())
    try:
        fcntl.fcntl(pipes[-1][1], 1031, 1 << 20)  # F_SETPIPE_SZ: 256 pages charged to the uid at once
        raised += 1
    except OSError:  # past fs.pipe-user-pages-soft: pipes of 16, then 2 pages
        pass
while True:
    try:
        pid = os.fork()
    except OSError:  # RLIMIT_NPROC
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    kids += 1
print(raised, kids, flush=True)
ctypes.CDLL(None).prctl(15, b"gspo-hog-ready", 0, 0, 0)  # PR_SET_NAME: the test sees it from outside
time.sleep(120)
"""
_QUOTA_PROBE = """import fcntl, os
r, w = os.pipe()
size = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ
try:
    fcntl.fcntl(w, 1031, 1 << 20)
    raised = "raised"
except OSError as e:
    raised = e.strerror
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
print(size, raised, forks)
"""


def _hog_processes(session: str) -> list:
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("GSPO_SANDBOX_ID") == session and proc.name().startswith("gspo-hog"):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root grader can give each sandbox a uid of its own")
def test_a_sandbox_that_drains_per_user_quotas_leaves_other_sandboxes_theirs(backend):
    """One sandbox's program takes every pipe page of its uid (fs.pipe-user-pages-soft: 63 pipes raised to
    1 MiB, then more pipes) and forks until RLIMIT_NPROC refuses, and holds them. Meanwhile a second sandbox
    on the same backend makes a pipe, raises it to 1 MiB and forks 4 children, and so does a plain-backend
    sandbox. Under one shared uid (65534 before issue 46) the second sandbox's new pipe had 8 KiB and could
    not be raised (EPERM), and the plain backend's forks all failed (EAGAIN: a user namespace's tasks count
    toward its owner's uid too); with a uid of its own per sandbox each gets 64 KiB, raises it and forks 4."""
    import threading

    held: dict = {}
    with Sandbox() as hog, Sandbox() as second, Sandbox("plain") as plain:
        for sb in (hog, second, plain):  # started before the hog holds anything
            assert sb.run(Job(code="print(1)")).stdout == "1\n"
        assert len({hog.uid.uid, second.uid.uid, plain.uid.uid}) == 3
        worker = threading.Thread(target=lambda: held.update(r=hog.run(Job(code=_HOG, cpu_s=10, wall_s=120))))
        worker.start()
        deadline = time.monotonic() + 60
        while not (ready := _hog_processes(hog.session_id)) and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready, held
        seen = {name: sb.run(Job(code=_QUOTA_PROBE, cpu_s=2)) for name, sb in (("second", second), ("plain", plain))}
        still_holding = worker.is_alive()
        for proc in ready:
            proc.kill()  # the job server then ends the hog's children
        worker.join(timeout=60)
    raised, kids = (int(x) for x in held["r"].stdout.split())
    assert still_holding and raised >= 60 and kids >= 8, held["r"]  # it did drain its uid's quotas
    for name, result in seen.items():
        assert result.stdout == "65536 raised 4\n", (name, result)


_QUEUES = """import ctypes, os, signal, threading
libc = ctypes.CDLL(None, use_errno=True)
mq = libc.mq_open(b"/q", 0o102, 0o600, None)  # O_CREAT | O_RDWR: 10 x 8 KiB of the uid's RLIMIT_MSGQUEUE bytes
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
queued = 0
try:
    while queued < 4096:
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)  # tgkill: queued, RLIMIT_SIGPENDING counts it
        queued += 1
except OSError:
    pass
print("mq", "ok" if mq >= 0 else os.strerror(ctypes.get_errno()), "queued", queued)
"""


def test_message_queue_bytes_and_pending_signals_are_bounded(backend):
    """Both counts are per user and charged up the user namespaces to the uid that made them: for a non-root
    grader its own (a sandbox held all 96,365 pending signals and every message-queue byte of the grader's
    uid: the grader's own mq_open got EMFILE, its queued signals EAGAIN). RLIMIT_MSGQUEUE 0 refuses the
    queue, RLIMIT_SIGPENDING stops the 65th signal; without them the queue opens and 4096 are queued."""
    with Sandbox() as sb:
        result = sb.run(Job(code=_QUEUES, cpu_s=5))
    assert result.stdout == "mq Too many open files queued 64\n", result


# --- Any backend whatever the interpreter's path ----------------------------------------------------------

_PLAIN_RUN = """
import json
from gspo.evals.graders.code import run_code
r = run_code("print(6 * 7)", [{"input": "", "output": "42"}], timeout_s=2, memory_mb=128)
print(json.dumps({"verdict": r.verdict}))
"""


def test_a_python_prefix_under_tmp(backend, tmp_path):
    """A virtual environment under /tmp: its prefix is bound inside the sandbox's own /tmp (and re-bound in
    each job's fresh one)."""
    assert str(tmp_path).startswith("/tmp/")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = [p for p in sys.path if p.endswith("site-packages")]  # gspo and its dependencies, editable finder included
    seen = _grader(f"import site\nfor p in {site!r}:\n    site.addsitedir(p)\n" + _PLAIN_RUN, backend,
                   python=str(venv / "bin" / "python"))
    assert seen == {"verdict": "accepted"}


_NO_BINDING = """
import json, sys
sys.modules["pyseccomp"] = None  # as on a machine without the binding: importing it fails
from gspo.conf.errors import GspoError
from gspo.evals.graders.code import run_code
try:
    r = run_code("print(6 * 7)", [{"input": "", "output": "42"}], timeout_s=2, memory_mb=128)
    print(json.dumps({"verdict": r.verdict}))
except GspoError as e:
    print(json.dumps({"refused": str(e)}))
"""


def test_without_a_seccomp_filter_the_sandbox_refuses(backend):
    """Fail closed, in one line saying what to install, as for a missing backend."""
    seen = _grader(_NO_BINDING, backend)
    assert "refused" in seen, seen
    assert "lacks seccomp" in seen["refused"] and "pip install pyseccomp" in seen["refused"]
    assert "\n" not in seen["refused"]


# --- 9. Issue 58: checkers that eval, the job server out of reach, the kernel's shared pools ------------------

_EVAL_CHECKER = """import sys
got, want = eval(open(sys.argv[3]).read()), eval(open(sys.argv[2]).read())
print(1 if got == want else 0)
"""
# an answer that is code: evaluated, it says yes for the checker and ends it
_CODE_ANSWER = "__import__('os').write(1, b'1 ok ' + b'2' * 0) and __import__('os')._exit(0)"


def test_a_checker_that_evals_gets_the_answer_as_data(backend):
    """Run as written, the checker evaluates the answer, which prints its yes and exits: accepted. In the
    checker's job its eval reads a literal only (ast.literal_eval), so the same answer is not accepted."""
    files = {"input.txt": "", "correct_output.txt": "[1, 2]", "solution_output.txt": _CODE_ANSWER}
    with Sandbox() as sb:  # the checker alone, as a program: fooled
        fooled = sb.run(Job(code=_EVAL_CHECKER, filename="checker.py", argv=("checker.py", *files), files=files))
    assert fooled.exit_code == 0 and fooled.stdout.split()[0] == "1", fooled
    result = run_code(f"print({_CODE_ANSWER!r})", [{"input": "", "output": "[1, 2]"}], timeout_s=2, memory_mb=128,
                      checker=_EVAL_CHECKER)
    assert result.verdict == "wrong_answer", result.to_dict()
    assert run_code("print([1, 2])", [{"input": "", "output": "[1, 2]"}], timeout_s=2, memory_mb=128,
                    checker=_EVAL_CHECKER).passed  # a literal answer is still judged


_REACH = """import ctypes, json, os, resource, time
libc = ctypes.CDLL(None, use_errno=True)
reached = []
for pid in range(1, 4096):  # every pid this program can name but its own
    if pid == os.getpid():
        continue
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (0, 0))  # would blind the job server's CPU poll
        resource.prlimit(pid, resource.RLIMIT_AS, (1 << 20, 1 << 20))  # would kill it at its next allocation
        reached.append(pid)
    except OSError:
        pass
    for call in (lambda: os.setpriority(os.PRIO_PROCESS, pid, 19), lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))):
        try:
            call()
            reached.append(pid)
        except OSError:
            pass
print(json.dumps({"pid": os.getpid(), "reached": sorted(set(reached))}), flush=True)
while True:
    pass
"""


def test_the_job_server_is_out_of_the_programs_reach(backend):
    """The filter refuses prlimit, setpriority and sched_setscheduler on any process but the caller, so the job
    server (pid 1 of the program's namespace, same uid) keeps its limits and priority (before: prlimit(2) on
    pid 1 blinded the CPU poll or killed the job server, and the grader waited 20 s; issue 58). Only the job
    server's CPU poll explains limit == "cpu" within the wall limit."""
    with Sandbox() as sb:
        result = sb.run(Job(code=_REACH, cpu_s=1.0, wall_s=30))
    seen = json.loads(result.stdout.splitlines()[0])
    assert seen == {"pid": 2, "reached": []}, seen
    assert result.error is None and result.limit == "cpu" and result.wall_s < 20, result


_SHARED_POOLS = """import errno, json, os, socket
seen = {}
def attempt(name, call):
    try:
        call()
        seen[name] = "ok"
    except OSError as e:
        seen[name] = errno.errorcode.get(e.errno, str(e.errno))
attempt("openpty", os.openpty)
attempt("ptmx", lambda: os.open("/dev/pts/ptmx", os.O_RDWR))
attempt("pty_nr", lambda: open("/proc/sys/kernel/pty/nr").read())
a, b = socket.socketpair()
attempt("sndbuf", lambda: a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20))
seen["sndbuf_now"] = a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
seen["procs"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
seen["id"] = os.environ.get("GSPO_SANDBOX_ID", "")
seen["cgroup"] = open("/proc/self/cgroup").read()
print(json.dumps(seen))
"""


def test_no_pty_no_raised_socket_buffer_no_grader_id(backend):
    """No pty (bwrap's devpts shared the host's count: one sandbox held 3,070 of 3,072, and their buffers were
    memory outside the cgroup), kernel.pty.nr hidden, socket buffers left at the default (8 MiB each held
    1.7-2.2 GB where no memory cgroup can be made), and neither the grader's pid nor a job count in view."""
    import re
    outputs = []
    with Sandbox() as sb:
        for _ in range(3):
            outputs.append(json.loads(sb.run(Job(code=_SHARED_POOLS)).stdout))
    seen = outputs[0]
    assert seen["openpty"] == seen["ptmx"] == seen["pty_nr"] == "ENOENT", seen
    assert seen["sndbuf"] == "EPERM" and seen["sndbuf_now"] < 1 << 20, seen
    assert seen["procs"] == [1, 2], seen  # the job server and the program
    pid = re.compile(rf"(?<!\d){os.getpid()}(?!\d)")
    for out in outputs:
        assert not pid.search(out["id"] + out["cgroup"]), out
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{16}", out["id"]), out
        assert all(re.fullmatch(r"gspo-sandbox-[0-9a-f]{16}", part) for part in re.findall(r"gspo-sandbox-[^/\n]*", out["cgroup"])), out


def test_no_memory_cgroup_dies_per_test(backend):
    """A root grader's memory cgroups are reused and reclaimed before removal: 12 tests that each read a file
    (page cache charged to the job's cgroup) leave no cgroup behind (before: one dying cgroup per test)."""
    if os.geteuid() != 0 or not os.path.exists("/proc/cgroups"):
        pytest.skip("memory cgroups are made by a root grader")

    def memory_cgroups() -> int:
        with open("/proc/cgroups") as f:
            return next(int(line.split()[2]) for line in f if line.startswith("memory\t"))

    import glob
    files = sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True), key=os.path.getsize)[-12:]
    for path in files:  # dropped from the page cache: each test's read charges fresh pages to its job's cgroup
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    before = memory_cgroups()
    with Sandbox() as sb:
        if sb.run(Job(code="print(1)")).stdout != "1\n" or sb.cgroup is None:
            pytest.skip("no memory cgroup on this machine")
        for path in files:
            sb.run(Job(code=f"print(len(open({path!r}, 'rb').read()))"))
    time.sleep(0.5)
    assert memory_cgroups() - before <= 1, (before, memory_cgroups())  # (another grader's may come and go)
