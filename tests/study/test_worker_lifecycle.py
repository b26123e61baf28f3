"""joblib's workers cannot outlive the `gspo compare` that started them (study/watch.py `watched_loky`,
`_watch_parent`): the parent's pid is taken in the parent before any worker starts, and each worker watches it
from its birth, idle or busy. Seen before: a compare SIGKILLed while its workers were starting left them
orphaned; they took their queued jobs anyway, trained them to the end and never exited (the first job read the
parent's pid when it was already 1). And a worker killed as the OOM killer would printed a 30-line
TerminatedWorkerError traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gspo.conf.errors import GspoError

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

PARENT = textwrap.dedent("""
    import os, sys, time
    from joblib import Parallel, delayed
    from gspo.study import watch as sweep

    out = sys.argv[1]
    sweep.watched_loky()  # as run_sweep does, before Hydra's launcher starts the workers

    def job(i):
        sweep.die_with_parent()  # as each job does first (study/job.py)
        open(os.path.join(out, f"job{i}-{os.getpid()}"), "w").close()
        time.sleep(120)  # a long run
        return i

    Parallel(n_jobs=2, backend="loky")(delayed(job)(i) for i in range(4))
""")


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and "popen_loky" in (stat.parent / "cmdline").read_text(errors="replace"):
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_workers_of_a_killed_parent_end_and_take_no_queued_job(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(list(tmp_path.glob("job*"))) < 2:
        assert proc.poll() is None and time.time() < deadline, "the two first jobs never started"
        time.sleep(0.2)
    workers = _children(proc.pid)
    assert len(workers) == 2
    proc.kill()  # SIGKILL: no cleanup in the parent; jobs 2 and 3 are queued to the workers
    proc.wait()
    deadline = time.time() + 30
    while any(_alive(w) for w in workers):
        assert time.time() < deadline, "a worker of the killed parent is still running"
        time.sleep(0.2)
    assert sorted(f.name.split("-")[0] for f in tmp_path.glob("job*")) == ["job0", "job1"]  # no queued job taken


def test_a_worker_born_after_its_parent_died_ends_at_once():
    gone = 2**22 + 1  # above the kernel's default pid_max: no process has it, as a parent that has died
    code = f"from gspo.study import watch; watch.watch_parent({gone}); print('took a job')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (143, "")


def test_a_killed_worker_is_one_line_naming_the_resume(monkeypatch, tmp_path):
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    from gspo.study import sweep

    def killed():
        assert os.environ.get("HYDRA_FULL_ERROR") == "1"  # Hydra passes the error on instead of printing it
        raise TerminatedWorkerError("A worker process managed by the executor was unexpectedly terminated. "
                                    f"The exit codes of the workers are {{SIGKILL(-{signal.SIGKILL})}}")

    monkeypatch.setattr(sweep, "hydra_job", killed)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GspoError) as e:
        sweep.run_sweep(["algo=grpo,gspo", "hydra/launcher=joblib", "hydra.sweep.dir=sw"],
                        sweep.SweepCall(again="gspo compare x=1"))
    message = str(e.value)
    assert "\n" not in message and "worker process was killed" in message
    assert message.endswith("resume the sweep (finished jobs skipped): gspo compare x=1 hydra.sweep.dir=sw")
    assert "HYDRA_FULL_ERROR" not in os.environ
