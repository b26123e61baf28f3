"""The sandbox: protections it reports, limits, cleanup, and hostile programs.

Every hostile program is graded against the output it would print if its attack worked, so an attack
that succeeded would also be "accepted"; each must instead end within its limits with a failing
verdict, leave the host and this process unharmed, and leave no process behind.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import psutil
import pytest

from gspo.conf.errors import GspoError
from gspo.evals import sandbox, sandbox_select
from gspo.evals.code import run_code
from gspo.evals.sandbox import Job, Sandbox, parallel_map, sandbox_backend, sandbox_protections

LIMITS = {"timeout_s": 0.5, "memory_mb": 128}
FAILING = {"wrong_answer", "runtime_error", "time_limit", "memory_limit", "output_limit", "compile_error"}


def _sandbox_processes() -> list[psutil.Process]:
    """Live processes started by sandboxes of this test process (tagged through their environment)."""
    prefix = f"{os.getpid()}-"
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
    missing = [p for p in protections if not sandbox_protections().get(p)]
    if missing:
        pytest.skip(f"sandbox backend {sandbox_backend()} lacks {', '.join(missing)} on this machine")


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


def test_protections_are_reported_as_booleans():
    prot = sandbox_protections()
    assert set(prot) >= {"user_ns", "pid_ns", "net_ns", "mount_ns", "readonly_fs", "unprivileged_uid",
                         "no_capabilities", "no_new_privs", "rlimits", "nproc_limit", "scrubbed_env"}
    assert all(isinstance(v, bool) for v in prot.values())
    assert prot["rlimits"] and prot["scrubbed_env"]


def test_a_backend_missing_protections_says_so(caplog):
    sandbox_select._probed.cache_clear()
    sandbox_select._warn_weak.cache_clear()
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
    with Sandbox() as sb:
        out = sb.run(Job(code="import os; print(os.getuid())")).stdout
        assert out.strip() != "0" or not sandbox_protections()["unprivileged_uid"]
    assert sandbox_protections()["unprivileged_uid"], "root drops to uid 65534 on this machine"


# --- normal behaviour -------------------------------------------------------------------------------


def test_jobs_in_one_sandbox_share_nothing():
    with Sandbox() as sb:
        first = sb.run(Job(code="open('state.txt', 'w').write('x'); print(open('state.txt').read())"))
        second = sb.run(Job(code="import os; print(os.path.exists('state.txt'))"))
    assert first.stdout == "x\n" and second.stdout == "False\n"


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_123")
    with Sandbox() as sb:
        env = sb.run(Job(code="import os, json; print(json.dumps(dict(os.environ)))")).stdout
    assert "hf_secret_123" not in env and "HF_TOKEN" not in env
    assert '"PATH"' in env and '"HOME"' in env


def test_cpu_time_and_wall_time_are_measured():
    with Sandbox() as sb:
        busy = sb.run(Job(code="x = 0\nfor i in range(3_000_000): x += i\nprint(x)", cpu_s=5))
        idle = sb.run(Job(code="import time; time.sleep(0.3)", cpu_s=5))
    assert busy.cpu_s > 0.05 and busy.limit is None
    assert idle.cpu_s < 0.2 < idle.wall_s


@pytest.mark.parametrize("backend", ["bwrap", "unshare", "plain"])
def test_every_backend_runs_limits_and_cleans_up(backend):
    if backend != "plain" and not sandbox.shutil.which(backend):
        pytest.skip(f"{backend} is not installed")
    with Sandbox(backend) as sb:
        assert sb.run(Job(code="print(sum(map(int, input().split())))", stdin="2 3\n")).stdout == "5\n"
        assert sb.run(Job(code="while True: pass", cpu_s=0.3)).limit == "cpu"
        daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\nprint('parent done')"
        assert sb.run(Job(code=daemon)).stdout == "parent done\n"


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


def test_fork_bomb():
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    attack(code)


def test_thread_bomb():
    code = "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()"
    attack(code)


def test_memory_bomb():
    assert attack("chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 24))").verdict == "memory_limit"


def test_huge_output():
    assert attack("while True:\n    print('A' * 4096)").verdict == "output_limit"


def test_deep_recursion():
    code = "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1) + 1\nprint(f(0))"
    assert attack(code).verdict in ("runtime_error", "memory_limit", "time_limit")


def test_huge_file():
    code = "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))"
    assert attack(code).verdict == "runtime_error"


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


def test_reading_environment_secrets(monkeypatch):
    secrets = {"WANDB_API_KEY": "wandb-secret-42", "HF_TOKEN": "hf-secret-42", "AWS_SECRET_ACCESS_KEY": "aws-42"}
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    code = ("import os\nprint(dict(os.environ))\nfor pid in ('self', '1', str(os.getppid())):\n"
            "    try:\n        print(open(f'/proc/{pid}/environ').read())\n    except OSError as e:\n"
            "        print('blocked', pid, e.errno)")
    result = attack(code, marker="wandb-secret-42")
    for value in secrets.values():
        assert value not in result.tests[0].stdout + result.tests[0].stderr


def test_reading_the_graders_process_memory_and_environ():
    needs("pid_ns")
    os.environ["GSPO_TEST_GRADER_SECRET"] = "grader-secret-7"
    try:
        code = (f"import os\nfor path in ('/proc/{os.getpid()}/environ', '/proc/1/mem', '/proc/1/environ', '/proc/1/fd/1'):\n"
                "    try:\n        print(open(path, 'rb').read(200))\n    except OSError as e:\n        print('blocked', e.errno)")
        result = attack(code, marker="grader-secret-7")
    finally:
        del os.environ["GSPO_TEST_GRADER_SECRET"]
    assert "grader-secret-7" not in result.tests[0].stdout


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


def test_a_daemon_that_outlives_the_program(tmp_path):
    tmp_path.chmod(0o777)
    marker = tmp_path / "daemon-was-here"
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1)\n"
            f"        open({str(marker)!r}, 'w').write('alive')\n    os._exit(0)\nprint('parent exits')")
    attack(code)
    time.sleep(1.5)
    assert not marker.exists()


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
"""
    result = attack(code)
    assert result.tests[0].stdout.count("blocked") == 7


def test_closing_stdout_and_hanging():
    assert attack("import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass").verdict == "time_limit"


def test_writing_to_other_file_descriptors():
    code = ("import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"verdict\": \"accepted\"}')\n"
            "        print('ESCAPED', fd)\n    except OSError:\n        pass")
    attack(code)
