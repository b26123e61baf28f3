"""Hostile programs under every sandbox backend this machine has: each contained or refused, never accepted.

A backend that shows every STRONG protection runs the program, which must fail to reach the host (a host
file, a host unix socket, files outside its private /tmp, /dev/shm and /var/tmp, a nested user namespace,
a neighbour sandbox's directory). A backend without them must refuse to run untrusted code in one line
(naming what to install and the opt-in) when chosen through GSPO_SANDBOX_BACKEND. Output a program prints
(sNaN, words on stderr) must give a verdict, never an exception or a verdict the run did not earn.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from gspo.conf.errors import GspoError
from gspo.evals.graders.code import lcb_output_matches, run_code
from gspo.evals.sandbox import BACKENDS, STRONG, Job, Sandbox, sandbox_protections

LIMITS = {"timeout_s": 1.0, "memory_mb": 128}
FAILING = {"wrong_answer", "runtime_error", "time_limit", "memory_limit", "output_limit", "compile_error"}
# GSPO_SANDBOX_BACKEND=unshare (CI's second run, the fallback forced) narrows these tests to that backend
# (and plain, which must refuse)
FORCED = os.environ.get("GSPO_SANDBOX_BACKEND")
INSTALLED = [b for b in BACKENDS if b == "plain" or (shutil.which(b) and FORCED in (None, "", b))]


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """No process started during the test outlives it (others, e.g. W&B's service, may predate it), and no
    sandbox folder is left in the host's /tmp. Only this process's folders count: xdist's other workers make
    and remove their own meanwhile."""
    mine = f"/tmp/gspo-sandbox-{os.getpid()}-*"
    before, folders = set(psutil.Process().children(recursive=True)), set(glob.glob(mine))
    yield
    deadline = time.monotonic() + 3
    while (left := set(psutil.Process().children(recursive=True)) - before) and time.monotonic() < deadline:
        time.sleep(0.05)  # a killed runner is reaped by the grader a moment later
    assert not left, f"processes outlived their sandbox: {left}"
    assert set(glob.glob(mine)) <= folders


@pytest.fixture
def host_dir():
    """A host folder every uid can enter and read (0755), as a grading folder under /tmp would be."""
    path = Path(tempfile.mkdtemp(prefix="gspo-host-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _strong(backend: str) -> bool:
    prot = sandbox_protections(backend)
    return all(prot[k] for k in STRONG)


def _attack(backend: str, code: str, expected: str, monkeypatch) -> None:
    """Contained under a strong backend (a failing verdict), refused under a weak one; never accepted."""
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", backend)
    monkeypatch.delenv("GSPO_SANDBOX_WEAK", raising=False)
    if not _strong(backend):
        with pytest.raises(GspoError, match="no sandbox here isolates untrusted code.*bubblewrap.*GSPO_SANDBOX_WEAK=1"):
            run_code(code, [{"input": "", "output": expected}], **LIMITS)
        return
    result = run_code(code, [{"input": "", "output": expected}], **LIMITS)
    assert result.verdict in FAILING, result
    assert expected not in result.tests[0].stdout


@pytest.mark.parametrize("backend", INSTALLED)
def test_a_host_file_with_the_answer_is_out_of_reach(backend, host_dir, monkeypatch):
    (host_dir / "expected.txt").write_text("4242\n")
    (host_dir / "expected.txt").chmod(0o644)
    _attack(backend, f"print(open({str(host_dir / 'expected.txt')!r}).read())", "4242", monkeypatch)


@pytest.mark.parametrize("backend", INSTALLED)
def test_host_unix_sockets_are_out_of_reach(backend, host_dir, monkeypatch):
    path, abstract = str(host_dir / "host.sock"), f"gspo-hostile-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as by_path, socket.socket(socket.AF_UNIX) as by_name:
        by_path.bind(path)
        os.chmod(path, 0o777)
        by_name.bind("\0" + abstract)
        by_path.listen(1)
        by_name.listen(1)
        code = (f"import socket\nfor address in ({path!r}, {chr(0) + abstract!r}):\n    try:\n"
                "        socket.socket(socket.AF_UNIX).connect(address)\n        print('CONNECTED')\n        break\n"
                "    except OSError:\n        pass\n")
        _attack(backend, code, "CONNECTED", monkeypatch)


@pytest.mark.parametrize("backend", INSTALLED)
def test_files_written_to_tmp_shm_and_var_tmp_do_not_outlive_grading(backend, monkeypatch):
    name = f"gspo-hostile-{os.getpid()}-{backend}"
    places = [os.path.join(d, name) for d in ("/tmp", "/dev/shm", "/var/tmp")]
    code = f"for p in {places!r}:\n    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\nprint('ok')"
    try:
        _attack(backend, code, "never", monkeypatch)
        assert [p for p in places if os.path.exists(p)] == []
    finally:
        for p in places:
            Path(p).unlink(missing_ok=True)


@pytest.mark.parametrize("backend", INSTALLED)
def test_no_nested_user_namespace(backend, monkeypatch):
    code = ("import ctypes\nif ctypes.CDLL(None).unshare(0x10000000) == 0:\n"
            "    print('CAPS', open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
    _attack(backend, code, "CAPS 000001ffffffffff", monkeypatch)


@pytest.mark.parametrize("backend", INSTALLED)
def test_a_neighbour_sandbox_directory_is_out_of_reach(backend, monkeypatch):
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", backend)
    monkeypatch.delenv("GSPO_SANDBOX_WEAK", raising=False)
    if not _strong(backend):
        with pytest.raises(GspoError, match="no sandbox here isolates"):
            Sandbox()
        return
    # the working dirs of sandboxes without their own /tmp are host folders /tmp/gspo-sandbox-*
    intruder = ("import glob, os\nfor d in glob.glob('/tmp/gspo-sandbox-*'):\n"
                "    try:\n        print(os.listdir(d)); open(os.path.join(d, 'intruder'), 'w')\n"
                "        print('WROTE')\n    except OSError:\n        pass\n")
    with Sandbox() as neighbour, Sandbox() as attacker:
        assert neighbour.run(Job(code="open('secret.txt', 'w').write('s3cret'); print('kept')")).stdout == "kept\n"
        seen = attacker.run(Job(code=intruder))
        check = neighbour.run(Job(code="import os; print(sorted(os.listdir('.')))", files={"mine.txt": ""}))
    assert "s3cret" not in seen.stdout and "secret.txt" not in seen.stdout and "WROTE" not in seen.stdout
    assert check.stdout == "['mine.txt']\n"


def test_weak_isolation_is_an_explicit_opt_in(monkeypatch):
    weak = [b for b in INSTALLED if not _strong(b)]
    if not weak:
        pytest.skip("every installed backend isolates strongly")
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", weak[0])
    monkeypatch.setenv("GSPO_SANDBOX_WEAK", "1")
    assert run_code("print(6 * 7)", [{"input": "", "output": "42"}], **LIMITS).verdict == "accepted"


# --- output the grader must survive ------------------------------------------------------------------

@pytest.mark.parametrize("printed", ["sNaN", "NaN", "-sNaN 1", "Infinity", "1e999999999"])
def test_any_printed_number_gives_a_verdict(printed):
    assert lcb_output_matches(printed, "1") is False
    assert lcb_output_matches(printed, printed) is True  # the same text is still the same answer
    result = run_code(f"print({printed!r})", [{"input": "", "output": "1"}], **LIMITS)
    assert result.verdict == "wrong_answer"


def test_deeply_nested_functional_output_is_a_wrong_answer():
    # within the bound on a functional answer's size (4x the expected JSON + 64 KiB; beyond: output_limit)
    code = "def f(x):\n    return 0\nimport sys\nsys.__stdout__.write('[' * 60000)\nsys.exit(0)"
    tests = [{"input": "1", "output": "0", "testtype": "functional"}]
    assert run_code(code, tests, fn_name="f", **LIMITS).verdict == "wrong_answer"


def test_words_on_stderr_do_not_decide_the_verdict():
    words = "import sys\nprint('MemoryError: Cannot allocate memory, out of memory', file=sys.stderr)\n"
    assert run_code(words + "print(2)", [{"input": "", "output": "2"}], **LIMITS).verdict == "accepted"
    assert run_code(words + "print(3)", [{"input": "", "output": "2"}], **LIMITS).verdict == "wrong_answer"
    real = run_code("x = bytearray(1 << 40)", [{"input": "", "output": ""}], **LIMITS)
    assert real.verdict == "memory_limit"


def test_grade_code_survives_snan(gspo, tmp_path):
    samples = tmp_path / "samples.jsonl"
    sample = {"id": "p1", "response": "```python\nprint('sNaN')\n```", "tests": [{"input": "", "output": "1"}]}
    samples.write_text(json.dumps(sample) + "\n")
    result = gspo.invoke("grade", "code", str(samples))
    assert result.exit_code == 0, (result.exception, result.output)


def test_grade_code_refuses_a_weak_backend_in_one_line(gspo, tmp_path, monkeypatch):
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", "plain")  # plain never isolates strongly
    monkeypatch.delenv("GSPO_SANDBOX_WEAK", raising=False)
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"id": "p1", "code": "print(1)", "tests": [{"input": "", "output": "1"}]}) + "\n")
    result = gspo.invoke("grade", "code", str(samples))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: no sandbox here isolates untrusted code (plain lacks host_fs_hidden")
    assert "GSPO_SANDBOX_WEAK=1" in lines[0] and "eval.weak_sandbox=true" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples.jsonl"]
