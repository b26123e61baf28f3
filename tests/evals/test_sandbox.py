"""The sandbox: protections it reports, limits, cleanup, and hostile programs.

Every hostile program is graded against the output it would print if its attack worked, so an attack
that succeeded would also be "accepted"; each must instead end within its limits with a failing
verdict, leave the host and this process unharmed, and leave no process behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from gspo.conf.errors import GspoError
from gspo.evals.graders.code import run_code
from gspo.evals.parallel import parallel_map
from gspo.evals.sandbox import Job, Sandbox, clear_probe_cache, sandbox_backend, sandbox_protections
from gspo.evals.sandbox.process import SESSION_TAG
from gspo.evals.sandbox.uids import uid_range

LIMITS = {"timeout_s": 0.5, "memory_mb": 128}
STRONG_BACKENDS = ("bwrap", "unshare")  # the tests here use the backend in use: GSPO_SANDBOX_BACKEND or the best
FAILING = {"wrong_answer", "runtime_error", "time_limit", "memory_limit", "output_limit", "compile_error"}


def _sandbox_processes() -> list[psutil.Process]:
    """Live processes started by sandboxes of this test process (tagged through their environment)."""
    prefix = f"{SESSION_TAG}-"
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("GSPO_SANDBOX_ID", "").startswith(prefix):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture(autouse=True)
def no_stray_processes():
    yield
    deadline = time.monotonic() + 3
    while (left := _sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes outlived their sandbox: {[p.cmdline()[:3] for p in left]}"


def needs(*protections: str):
    """bwrap and unshare promise every protection (a missing one fails the test); only a weaker backend,
    accepted explicitly (GSPO_SANDBOX_WEAK=1), skips the tests of what it cannot give."""
    missing = [p for p in protections if not sandbox_protections().get(p)]
    if missing and sandbox_backend().split()[0] in STRONG_BACKENDS:
        pytest.fail(f"sandbox backend {sandbox_backend()} lacks {', '.join(missing)}")
    if missing:
        pytest.skip(f"sandbox backend {sandbox_backend()} lacks {', '.join(missing)}")


def attack(code: str, *, marker: str = "ESCAPED", **limits) -> object:
    """Grade `code` against the marker it prints if its attack works; assert it failed within limits."""
    kw = {**LIMITS, **limits}
    started = time.monotonic()
    result = run_code(code, [{"input": "", "output": marker}], **kw)
    assert time.monotonic() - started < 2 * kw["timeout_s"] + 1 + 5, "the run did not end within its limits"
    assert result.verdict in FAILING, result
    assert marker not in result.tests[0].stdout
    return result


# --- what the sandbox says about itself -------------------------------------------------------------


def test_the_backend_in_use_gives_every_protection():
    """bwrap where installed, unshare without it (or forced: GSPO_SANDBOX_BACKEND=unshare): the same list."""
    assert sandbox_backend().startswith("bwrap" if shutil.which("bwrap") and not os.environ.get(
        "GSPO_SANDBOX_BACKEND") else os.environ.get("GSPO_SANDBOX_BACKEND") or "unshare")
    assert [k for k, ok in sandbox_protections().items() if not ok] == []


def test_protections_are_reported_as_booleans():
    prot = sandbox_protections()
    assert set(prot) >= {"user_ns", "pid_ns", "net_ns", "mount_ns", "readonly_fs", "unprivileged_uid",
                         "no_capabilities", "no_new_privs", "rlimits", "nproc_limit", "scrubbed_env"}
    assert all(isinstance(v, bool) for v in prot.values())
    assert prot["rlimits"] and prot["scrubbed_env"]


def test_a_backend_missing_protections_says_so(caplog, monkeypatch):
    clear_probe_cache()
    # a Hydra job earlier in the same process (xdist worker) configures logging with disable_existing_loggers
    monkeypatch.setattr(logging.getLogger("gspo.evals.sandbox"), "disabled", False)
    with caplog.at_level(logging.WARNING, logger="gspo.evals.sandbox"):
        prot = sandbox_protections("plain")
    missing = [k for k, ok in prot.items() if not ok]
    assert missing, "a plain process group cannot have namespaces"
    assert "pid_ns" in caplog.text and "lacks" in caplog.text


def test_unknown_backend_is_one_clear_error():
    with pytest.raises(GspoError, match="unknown sandbox backend"):
        sandbox_protections("docker")


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop only happens when the grader runs as root")
def test_as_root_programs_run_as_an_unprivileged_uid():
    """Seen from the host, the real uid of every process of the sandbox while the program runs (the
    launcher, runner, job servers and the program): one uid, the sandbox's own, leased from the range
    (uids.py), never 0 nor 65534, which every sandbox shared before issue 46; seen from inside, the program's
    own uid and gid: under both backends 65534 (unshare used to make the program root of its user namespace)."""
    code = "import os, time\nprint(os.getuid(), os.getgid(), flush=True)\ntime.sleep(1.5)"
    host: dict[int, int] = {}
    with Sandbox() as sb:
        worker = threading.Thread(target=lambda: host.update(result=sb.run(Job(code=code, cpu_s=1, wall_s=10))))
        worker.start()
        while worker.is_alive():
            for proc in _sandbox_processes():
                try:
                    host[proc.pid] = proc.uids().real
                except psutil.Error:
                    continue
            time.sleep(0.05)
        result, leased = host.pop("result"), sb.uid.uid
    assert result.stdout == "65534 65534\n", result
    assert len(host) >= 4 and set(host.values()) == {leased}, host
    first, count = uid_range()
    assert first <= leased < first + count and leased != 65534, leased
    assert sb.uid is None  # released with the sandbox
    assert sandbox_protections()["unprivileged_uid"]


# --- normal behaviour -------------------------------------------------------------------------------


def test_jobs_in_one_sandbox_share_nothing():
    with Sandbox() as sb:
        first = sb.run(Job(code="open('state.txt', 'w').write('x'); print(open('state.txt').read())"))
        second = sb.run(Job(code="import os; print(os.path.exists('state.txt'))"))
    assert first.stdout == "x\n" and second.stdout == "False\n"


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_123")
    with Sandbox() as sb:
        env = sb.run(Job(code="import os; print(sorted(os.environ), [v for v in os.environ.values() if 'secret' in v])")).stdout
    assert "hf_secret_123" not in env and "HF_TOKEN" not in env
    assert "'PATH'" in env and "'HOME'" in env


def test_cpu_time_and_wall_time_are_measured():
    # the busy program spins until it has itself used 0.3 s of CPU, whatever the speed of the machine
    with Sandbox() as sb:
        busy = sb.run(Job(code="import time\nwhile time.process_time() < 0.3:\n    pass", cpu_s=5))
        idle = sb.run(Job(code="import time; time.sleep(0.3)", cpu_s=5))
    assert 0.3 <= busy.cpu_s < 5 and busy.limit is None
    assert idle.cpu_s < 0.2 < idle.wall_s


@pytest.mark.parametrize("backend", ["bwrap", "unshare", "plain"])
def test_every_backend_runs_limits_and_cleans_up(backend):
    if backend != "plain" and not shutil.which(backend):
        pytest.skip(f"{backend} is not installed")
    with Sandbox(backend) as sb:
        assert sb.run(Job(code="print(sum(map(int, input().split())))", stdin="2 3\n")).stdout == "5\n"
        assert sb.run(Job(code="while True: pass", cpu_s=0.3, wall_s=30)).limit == "cpu"
        daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\nprint('parent done')"
        res = sb.run(Job(code=daemon))
        assert res.stdout == "parent done\n", res


def test_parallel_map_keeps_order_and_shows_progress():
    codes = [f"print({i} * {i})" for i in range(6)]
    with_bar = parallel_map(lambda c: run_code(c, [{"input": "", "output": "0"}], **LIMITS), codes,
                            workers=3, progress=True)
    assert [r.tests[0].stdout.strip() for r in with_bar] == [str(i * i) for i in range(6)]


# --- hostile programs -------------------------------------------------------------------------------


def test_infinite_loop():
    assert attack("while True:\n    pass").verdict == "time_limit"


def test_sleep():
    assert attack("import time\ntime.sleep(60)\nprint('ESCAPED')").verdict == "time_limit"


def test_ignoring_sigterm_in_an_infinite_loop():
    code = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    assert attack(code).verdict == "time_limit"


NPROC = Job(code="").nproc  # tasks of the sandbox uid, the runner included


def test_fork_bomb():
    """The process limit refuses a fork (EAGAIN) before NPROC processes: only that limit explains the
    line; without it the loop forks until the time limit and prints nothing."""
    needs("nproc_limit")
    code = ("import errno, os, time\nfor n in range(4096):\n    try:\n        pid = os.fork()\n"
            "    except OSError as e:\n        print('LIMITED', errno.errorcode[e.errno], n)\n        break\n"
            "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)")
    result = attack(code)
    assert result.verdict == "wrong_answer"
    word, err, n = result.tests[0].stdout.split()
    assert (word, err) == ("LIMITED", "EAGAIN") and 0 < int(n) < NPROC


def test_thread_bomb():
    needs("nproc_limit")
    # small stacks: the address-space limit alone would stop ~14 threads of the default 8 MiB and pass
    # for the process limit
    code = ("import threading, time\nthreading.stack_size(1 << 16)\nfor n in range(4096):\n    try:\n"
            "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
            "    except RuntimeError as e:\n        print('LIMITED', n, e)\n        break")
    result = attack(code)
    assert result.verdict == "wrong_answer"
    out = result.tests[0].stdout
    assert out.startswith("LIMITED ") and "can't start new thread" in out and 0 < int(out.split()[1]) < NPROC


def test_memory_bomb():
    assert attack("chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 24))").verdict == "memory_limit"


def test_huge_output():
    assert attack("while True:\n    print('A' * 4096)").verdict == "output_limit"


def test_deep_recursion():
    code = "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1) + 1\nprint(f(0))"
    assert attack(code).verdict in ("runtime_error", "memory_limit", "time_limit")


def test_huge_file():
    """RLIMIT_FSIZE stops the file at exactly fsize_bytes with EFBIG; a full sandbox /tmp would say
    ENOSPC at its own size instead (Python ignores SIGXFSZ, so the write fails rather than kills)."""
    code = ("import errno\nwith open('big', 'wb') as f:\n    try:\n        while True:\n"
            "            f.write(b'x' * (1 << 20))\n            f.flush()\n"
            "    except OSError as e:\n        print('LIMITED', errno.errorcode[e.errno], f.tell())")
    result = attack(code)
    assert result.tests[0].stdout.split() == ["LIMITED", "EFBIG", str(Job(code="").fsize_bytes)]


def test_writing_a_file_outside_the_sandbox(tmp_path):
    needs("readonly_fs")
    target = tmp_path / "open"
    target.mkdir(mode=0o777)
    target.chmod(0o777)
    victim = target / "written.txt"
    host_tmp = f"/tmp/gspo-escape-{os.getpid()}.txt"  # the sandbox's /tmp is its own; the host's must stay clean
    code = (f"import os\nopen({host_tmp!r}, 'w').write('pwned')\n"
            f"for path in [{str(victim)!r}, '/written.txt', '/usr/escape', '/etc/escape']:\n"
            "    try:\n        open(path, 'w').write('pwned')\n        print('ESCAPED', path)\n"
            "    except OSError as e:\n        print('blocked', path, e.errno)")
    attack(code)
    assert not victim.exists() and not os.path.exists(host_tmp)
    assert not any(os.path.exists(p) for p in ("/written.txt", "/usr/escape", "/etc/escape"))


def test_deleting_a_host_file(tmp_path):
    needs("readonly_fs")
    tmp_path.chmod(0o777)
    canary = tmp_path / "canary.txt"
    canary.write_text("still here")
    canary.chmod(0o666)
    code = (f"import os, shutil\nfor f in (lambda: os.remove({str(canary)!r}), lambda: shutil.rmtree({str(tmp_path)!r})):\n"
            "    try:\n        f()\n        print('ESCAPED')\n    except OSError as e:\n        print('blocked', e.errno)")
    attack(code)
    assert canary.read_text() == "still here"


_GRADER = """
import json, os, sys
from gspo.evals.graders.code import run_code
code = sys.argv[1].replace("GRADER_PID", str(os.getpid()))
r = run_code(code, [{"input": "", "output": sys.argv[2]}], timeout_s=0.5, memory_mb=128)
print(json.dumps({"verdict": r.verdict, "stdout": r.tests[0].stdout, "stderr": r.tests[0].stderr}))
"""


def attack_from_a_grader(code: str, *, secrets: dict[str, str], marker: str) -> dict:
    """`attack`, graded by a fresh process that *started* with `secrets` in its environment and `marker`
    on its command line: what /proc/<pid>/environ and /proc/<pid>/cmdline show. GRADER_PID in `code`
    becomes that process's pid."""
    env = {**os.environ, **secrets}
    proc = subprocess.run([sys.executable, "-c", _GRADER, code, marker], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["verdict"] in FAILING and marker not in result["stdout"], result
    return result


def test_reading_environment_secrets():
    secrets = {"WANDB_API_KEY": "wandb-secret-42", "HF_TOKEN": "hf-secret-42", "AWS_SECRET_ACCESS_KEY": "aws-42"}
    # the program prints only what looks like a secret: a full environment would overflow the 1000
    # characters of stdout a result keeps, and hide the leak past the cut
    code = ("import os, re\nloot = str(dict(os.environ))\nfor pid in ('self', '1', str(os.getppid()), 'GRADER_PID'):\n"
            "    try:\n        loot += open(f'/proc/{pid}/environ').read()\n    except OSError as e:\n"
            "        print('blocked', pid, e.errno)\nprint(re.findall(r'[a-z-]*42', loot))")
    result = attack_from_a_grader(code, secrets=secrets, marker="wandb-secret-42")
    for value in secrets.values():
        assert value not in result["stdout"] + result["stderr"]


def test_reading_the_graders_process_memory_and_environ():
    """Every process the sandbox can see, the grader's own included: its environment, its command line
    (readable by any uid) and its memory. Only a pid namespace hides the grader's command line."""
    needs("pid_ns")
    code = ("import os, re\npids = ['GRADER_PID'] + [p for p in os.listdir('/proc') if p.isdigit()]\nloot = b''\n"
            "for pid in pids:\n    for part in ('environ', 'cmdline', 'mem'):\n        try:\n"
            "            loot += open(f'/proc/{pid}/{part}', 'rb').read(1 << 16)\n"
            "        except OSError:\n            pass\nprint(len(pids), re.findall(rb'grader-[a-z]+-7', loot))")
    result = attack_from_a_grader(code, secrets={"GSPO_TEST_GRADER_SECRET": "grader-secret-7"}, marker="grader-argv-7")
    out = result["stdout"] + result["stderr"]
    assert "grader-secret-7" not in out and "grader-argv-7" not in out


def test_opening_a_network_connection():
    needs("network_isolated")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = (f"import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "    s.sendall(b'hello')\n    print('ESCAPED')\nexcept OSError as e:\n    print('blocked', e)")
    try:
        attack(code)
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_killing_the_parent_and_everything_else():
    needs("pid_ns")
    code = ("import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
            "    except OSError:\n        pass\nos.killpg(0, signal.SIGKILL)\nprint('ESCAPED')")
    with Sandbox() as sb:
        killed = sb.run(Job(code=code, cpu_s=0.5))
        after = sb.run(Job(code="print('runner alive')"))
    assert killed.signal == 9 and killed.stdout == ""
    assert after.stdout == "runner alive\n" and after.error is None
    assert psutil.Process().is_running()


def test_a_daemon_that_outlives_the_program():
    """A double-forked, setsid daemon writes its pid through a pipe before the program exits (no sleep to
    guess with); the next job of the same sandbox finds no such process."""
    code = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        os.write(w, str(os.getpid()).encode())\n        os.close(w)\n        time.sleep(30)\n"
            "    os._exit(0)\nos.close(w)\nprint(os.read(r, 32).decode())")
    with Sandbox() as sb:
        started = sb.run(Job(code=code))
        pid = int(started.stdout)
        probe = sb.run(Job(code=f"import os\ntry:\n    os.kill({pid}, 0)\n    print('alive')\n"
                                 "except OSError as e:\n    print('gone', e.errno)"))
    assert started.exit_code == 0 and probe.stdout == "gone 3\n"  # ESRCH: killed and reaped


def test_background_children_burning_cpu():
    code = "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        while True:\n            pass\nprint('bye')"
    attack(code)


def test_ctypes_escape_attempts():
    needs("no_capabilities", "readonly_fs")
    code = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
attempts = {
    "setuid(0)": lambda: libc.setuid(0),
    "unshare(user)": lambda: libc.unshare(0x10000000),
    "remount / rw": lambda: libc.mount(b"none", b"/", None, 32 | 4096, None),
    "mount proc": lambda: libc.mount(b"proc", b"/tmp", b"proc", 0, None),
    "chroot": lambda: libc.chroot(b"/tmp"),
    "ptrace pid 1": lambda: libc.ptrace(16, 1, None, None),
    "reboot": lambda: libc.reboot(0x4321FEDC),
}
for name, call in attempts.items():
    print("ESCAPED" if call() == 0 else "blocked", name)
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print("uid", os.getuid(), "caps", status["CapEff"].strip(), status["CapPrm"].strip(),
      "proc_mounted", os.path.exists("/tmp/self"), "root_writable", os.access("/", os.W_OK))
try:
    open("/gspo-ctypes-escape", "w").write("x")
except OSError as e:
    print("write blocked", e.errno)
"""
    result = attack(code)
    lines = result.tests[0].stdout.splitlines()
    assert [line.split()[0] for line in lines[:7]] == ["blocked"] * 7, lines
    # what each call would have changed, checked: uid, capabilities, a mount, the root's writability
    assert lines[7] == "uid 65534 caps 0000000000000000 0000000000000000 proc_mounted False root_writable False"
    assert lines[8] == "write blocked 30" and not os.path.exists("/gspo-ctypes-escape")  # EROFS


def test_closing_stdout_and_hanging():
    assert attack("import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass").verdict == "time_limit"


def test_writing_to_other_file_descriptors():
    code = ("import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"verdict\": \"accepted\"}')\n"
            "        print('ESCAPED', fd)\n    except OSError:\n        pass")
    attack(code)
