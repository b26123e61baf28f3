"""Nothing lost, nothing silently wrong across a run's whole life (issue 22): each case an adversary found.

Most cases copy one finished 3-step TINY run (checkpoints step_2 and step_3 kept) and damage the copy; kills
happen at a chosen moment (a hook that raises, or sends this process a real SIGTERM, at a given step), never
after a sleep. The disk cases use a real small tmpfs in a private mount namespace (root only), and a fake
ENOSPC where no mount is possible.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LEARNING_SEED, TINY, without_timing

from gspo.conf import GspoError, compose_config, config_to_yaml
from gspo.conf.errors import one_line_errors
from gspo.report.runs import load_run, unread_steps
from gspo.trainer import loop
from gspo.trainer.run.rundir import SET_ASIDE, RunDir, read_jsonl, read_status

CKPT = (*TINY, f"seed={LEARNING_SEED}", "train.save_every=1", "train.keep_checkpoints=2", "train.eval_every=0",
        "logger.progress=false")
as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a private mount")


@pytest.fixture(scope="module")
def three_steps(gspo, tmp_path_factory) -> Path:
    """A finished 3-step run with checkpoints step_2 and step_3: copy it, never change it."""
    return gspo.train(tmp_path_factory.mktemp("life"), "base", *CKPT, "train.steps=3")


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def _steps(path: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(path)]


def _interrupt_at(monkeypatch, at: int, *, sigterm: bool = False) -> None:
    """The next training step `at` is interrupted before it runs: a Ctrl-C, or a real SIGTERM to this process."""
    real = loop.train_step

    def step(n, *args, **kwargs):
        if n == at:
            if sigterm:
                os.kill(os.getpid(), signal.SIGTERM)
            raise KeyboardInterrupt
        return real(n, *args, **kwargs)

    monkeypatch.setattr(loop, "train_step", step)


# --- 1. a resume without a usable checkpoint never empties the history -----------------------------

def test_a_resume_without_a_checkpoint_keeps_the_history_aside(gspo, three_steps, tmp_path, monkeypatch):
    run = _copy(three_steps, tmp_path)
    shutil.rmtree(run / "checkpoints")
    _interrupt_at(monkeypatch, 1)  # Ctrl-C right after "no intact checkpoint, starting at step 0"
    result = gspo.invoke("train", f"resume={run}")
    assert result.exit_code == 130 and "no intact checkpoint, starting at step 0" in result.stderr
    assert f"kept aside in {run / SET_ASIDE}/" in result.stderr
    for log in ("metrics.jsonl", "evals.jsonl", "samples.jsonl"):  # every old row is still on disk
        old = read_jsonl(three_steps / log)
        assert old and read_jsonl(run / SET_ASIDE / log) == old, log
    assert _steps(run / "metrics.jsonl") == [0]  # the restart's own step 0


# --- 2. a torn or unreadable metrics row is rebuilt from a checkpoint before it, or said --------------

def test_a_torn_last_row_is_rebuilt_from_the_checkpoint_before_it(gspo, three_steps, tmp_path):
    run = _copy(three_steps, tmp_path)
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # step 3 cut in half
    result = gspo.invoke("train", f"resume={run}")
    assert result.exit_code == 0, (result.exception, result.output)
    assert "no readable row for step(s) 3; rebuilding them from step_000002" in result.stderr
    rows = read_jsonl(metrics)
    assert without_timing(rows) == without_timing(read_jsonl(three_steps / "metrics.jsonl"))  # exactly step 3 again
    assert without_timing(read_jsonl(run / "evals.jsonl")) == without_timing(read_jsonl(three_steps / "evals.jsonl"))
    assert (run / SET_ASIDE / "metrics.jsonl").read_text() == lines[-1][: len(lines[-1]) // 2] + "\n"
    weights = "checkpoints/step_000003/model.safetensors"
    assert (run / weights).read_bytes() == (three_steps / weights).read_bytes()
    assert not list((run / "checkpoints").glob("superseded-*"))  # the old step 3 went once step 3 was saved again


def test_a_damaged_row_no_checkpoint_covers_is_said_and_reported(gspo, three_steps, tmp_path):
    run = _copy(three_steps, tmp_path)
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    lines[1] = "#" + lines[1][1:]  # step 1 damaged; the oldest checkpoint kept is step 2
    metrics.write_text("".join(lines))
    result = gspo.invoke("train", f"resume={run}", "train.steps=4")
    assert result.exit_code == 0, (result.exception, result.output)
    said = [ln for ln in result.stderr.splitlines() if "no readable row" in ln]
    assert len(said) == 1 and "step(s) 1 and no kept checkpoint precedes them" in said[0]
    assert _steps(metrics) == [0, 2, 3, 4]
    assert json.loads((run / "run.json").read_text())["unreadable_steps"] == [1]
    assert unread_steps(load_run(run)) == [1]
    report = gspo.invoke("report", str(run), "--out", str(tmp_path / "out"))
    assert report.exit_code == 0, (report.exception, report.output)
    assert "no readable metrics row for step(s) 1" in report.stderr


def test_the_report_names_the_step_of_a_torn_last_row(gspo, three_steps, tmp_path):
    run = _copy(three_steps, tmp_path)
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(lines[:-1]) + lines[-1][:30])
    report = gspo.invoke("report", str(run), "--out", str(tmp_path / "out"))
    assert report.exit_code == 0, (report.exception, report.output)
    assert "no readable metrics row for step(s) 3" in report.stderr


# --- 3. resume extends, never shrinks; a decaying lr schedule is not stretched -------------------------

def _saved_run(tmp_path: Path, *overrides: str) -> Path:
    cfg = compose_config([*TINY, *overrides, f"output_dir={tmp_path}", "run_id=r"])
    (tmp_path / "r").mkdir(parents=True)
    (tmp_path / "r" / "config.yaml").write_text(config_to_yaml(cfg))
    return tmp_path / "r"


def test_resume_refuses_fewer_steps(tmp_path):
    run = _saved_run(tmp_path, "train.steps=8")
    with pytest.raises(GspoError, match=r"^train.steps=3: a resumed run may extend its train.steps=8.*never shrink"):
        compose_config([f"resume={run}", "train.steps=3"])
    assert compose_config([f"resume={run}", "train.steps=8"]).train.steps == 8  # its own value is fine


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_resume_refuses_to_stretch_a_decaying_lr_schedule(tmp_path, schedule):
    run = _saved_run(tmp_path, "train.steps=8", f"train.lr_schedule={schedule}")
    with pytest.raises(GspoError, match=f"train.lr_schedule={schedule} decays over the run's train.steps=8"):
        compose_config([f"resume={run}", "train.steps=12"])
    constant = _saved_run(tmp_path / "c", "train.steps=8", "train.warmup_steps=2")
    assert compose_config([f"resume={constant}", "train.steps=12"]).train.steps == 12


def test_a_constant_schedule_extended_gives_the_lrs_of_a_longer_run():
    """What makes extending a constant schedule sound: its factors never read train.steps (warmup counts
    optimizer steps), while a linear one's do."""
    from gspo.trainer.state import make_optimizer

    def lrs(steps: int, schedule: str) -> list[float]:
        cfg = compose_config([*TINY, f"train.steps={steps}", f"train.lr_schedule={schedule}", "train.warmup_steps=3"])
        opt, sched = make_optimizer([__import__("torch").nn.Parameter(__import__("torch").zeros(1))], cfg.train)
        out = []
        for _ in range(16):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    assert lrs(8, "constant") == lrs(20, "constant")
    assert lrs(8, "linear")[:16] != lrs(20, "linear")[:16]


# --- 4. gspo eval: the run's lock, the checkpoint named, a damaged newest one refused -----------------

EVAL = ("eval.benches=[arith]", "eval.limit=2", "eval.max_new_tokens=4", "eval.greedy=true")


def test_eval_refuses_a_run_being_trained_and_writes_elsewhere_on_request(gspo, three_steps, tmp_path):
    run = _copy(three_steps, tmp_path)
    before = (run / "evals.jsonl").read_text()
    trainer = RunDir.open(str(run.parent), run.name, resume=True)  # a live trainer holds the run's lock
    try:
        result = gspo.invoke("eval", f"eval.run={run}", *EVAL)
        assert isinstance(result.exception, GspoError), result.output
        assert "being written by another gspo process" in str(result.exception) and "eval.output=" in str(result.exception)
        assert (run / "evals.jsonl").read_text() == before
        out = tmp_path / "elsewhere"
        result = gspo.invoke("eval", f"eval.run={run}", f"eval.output={out}", *EVAL)
        assert result.exit_code == 0, (result.exception, result.output)
        assert (run / "evals.jsonl").read_text() == before
        assert {r["step"] for r in read_jsonl(out / "evals.jsonl")} == {3}
    finally:
        trainer.close()


def test_eval_names_its_checkpoint_and_refuses_a_damaged_newest_one(gspo, three_steps, tmp_path):
    run = _copy(three_steps, tmp_path)
    weights = run / "checkpoints" / "step_000003" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    before = (run / "evals.jsonl").read_text()
    result = gspo.invoke("eval", f"eval.run={run}", *EVAL)
    assert isinstance(result.exception, GspoError), result.output
    assert "newest checkpoint" in str(result.exception) and "step_000003 is not intact" in str(result.exception)
    assert "eval.step=2" in str(result.exception) and (run / "evals.jsonl").read_text() == before
    result = gspo.invoke("eval", f"eval.run={run}", "eval.step=2", *EVAL)
    assert result.exit_code == 0, (result.exception, result.output)
    assert f"evaluating {run / 'checkpoints' / 'step_000002'} (step 2)" in result.stderr
    assert {r["step"] for r in read_jsonl(run / "evals.jsonl")[len(before.splitlines()):]} == {2}
    result = gspo.invoke("eval", f"eval.run={run}", "eval.step=3", *EVAL)
    assert isinstance(result.exception, GspoError) and "eval.step=3" in str(result.exception)


@pytest.mark.slow
@as_root
def test_a_read_only_run_is_evaluated_into_a_folder_of_ones_choosing(gspo, three_steps, tmp_path):
    run = _copy(three_steps, tmp_path)
    out = tmp_path / "out"
    script = ('mount --bind -o ro "$0" "$0" && gspo eval eval.run="$0" "${@:2}" 2>&1; echo "rc=$?"; '
              'gspo train -q resume="$0" 2>&1; echo "rc=$?"; '
              'gspo eval eval.run="$0" eval.output="$1" "${@:2}" 2>&1; echo "rc=$?"')
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script, str(run), str(out),
                           *EVAL], env=gspo.env, capture_output=True, text=True, timeout=300, check=False)
    first, resumed, last = proc.stdout.split("rc=")[:3]
    assert f"error: run {run} is not writable" in first and "eval.output=<folder>" in first
    assert first.count("error:") == 1 and "Traceback" not in proc.stdout
    assert resumed.startswith("2") and resumed.count("error:") == 1 and f"run {run} is not writable" in resumed
    assert last.startswith("2") and proc.stdout.endswith("rc=0\n"), proc.stdout
    assert {r["step"] for r in read_jsonl(out / "evals.jsonl")} == {3}


# --- 5. full disks, read-only folders, long names: one line naming path and cause ----------------------

@pytest.mark.slow
@as_root
def test_a_full_disk_is_one_error_line_and_the_run_stays_resumable(gspo, tmp_path):
    """A real 160 KiB tmpfs: the config, logs and first rows fit, the first checkpoint (about 140 KiB
    with the step-0 files) does not. The files are copied out of the private mount before it goes."""
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    script = ('mount -t tmpfs -o size=160k tmpfs "$0" && gspo train -q "${@:2}" output_dir="$0" run_id=full; '
              'rc=$?; cp -a "$0/full" "$1"; exit $rc')
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script, str(disk),
                           str(kept), *CKPT, "train.steps=3"], env=gspo.env, capture_output=True, text=True,
                          timeout=300, check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "Warning" not in ln and "forward_call" not in ln]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "the disk is full" in lines[0], proc.stderr[-3000:]
    assert str(disk / "full") in lines[0] and "Traceback" not in proc.stderr
    status = json.loads((kept / "run.json").read_text())
    assert status["status"] == "failed" and "No space left" in status["error"]
    assert _steps(kept / "metrics.jsonl")[0] == 0
    assert not list((kept / "checkpoints").glob("step_*"))
    resumed = gspo.invoke("train", "-q", f"resume={kept}")  # on a disk with room, the run goes on
    assert resumed.exit_code == 0, (resumed.exception, resumed.output)
    assert _steps(kept / "metrics.jsonl") == [0, 1, 2, 3]


def test_a_full_disk_while_logging_fails_the_run_and_is_one_line(gspo, tmp_path, monkeypatch, capsys):
    """No mount needed: the metrics append of step 2 meets ENOSPC, as on a full disk."""
    real = RunDir.append

    def append(self, log, row):
        if log == "metrics.jsonl" and row.get("step") == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path / log))
        return real(self, log, row)

    monkeypatch.setattr(RunDir, "append", append)
    result = gspo.invoke("train", "-q", *CKPT, "train.steps=3", f"output_dir={tmp_path}", "run_id=r")
    assert isinstance(result.exception, OSError)
    status = json.loads((tmp_path / "r" / "run.json").read_text())
    assert status["status"] == "failed" and "No space left" in status["error"]
    with pytest.raises(SystemExit) as exit_, one_line_errors():  # what the console script prints for it
        raise result.exception
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"error: {tmp_path / 'r' / 'metrics.jsonl'}: the disk is full (No space left on device); free space "
                   "or fix the permissions and run the command again (a run resumes with resume=<run dir>)\n")


def test_a_torch_write_error_on_a_full_disk_names_the_disk(tmp_path, monkeypatch):
    """torch.save on a full disk raises RuntimeError('... unexpected pos ...'): the checkpoint says ENOSPC."""
    run = RunDir(tmp_path / "r")

    def write(folder: Path) -> None:
        raise RuntimeError("[enforce fail at inline_container.cc:783] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed; unexpected pos 3447168 vs 3447060")

    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(1 << 30, 1 << 30, 0))
    with pytest.raises(OSError) as err:
        run.save_checkpoint(1, write)
    assert err.value.errno == errno.ENOSPC and "unexpected pos" in str(err.value.__cause__)
    assert not list(run.checkpoints.iterdir())  # the partial folder went


@pytest.mark.parametrize(("override", "words"), [
    (f"run_id={'a' * 300}", "run_id is 300 characters: at most 200"),
    ("run_id=prüfung", "run_id='prüfung': use a plain name (ASCII"),
    ("seed=18446744073709551616", "seed=18446744073709551616: must fit a 64-bit integer"),
    ("output_dir=/" + "/".join(["d" * 200] * 21), "would pass the system's limit of 4096 bytes"),
])
def test_names_and_seeds_are_checked_before_the_model_loads(override, words):
    with pytest.raises(GspoError) as err:
        compose_config([*TINY, override])
    assert words in str(err.value) and "\n" not in str(err.value)


# --- 6. a broken run.json; a folder with only config.yaml ---------------------------------------------

def test_a_broken_run_json_survives_report_and_resume(gspo, three_steps, tmp_path):
    run = _copy(three_steps, tmp_path)
    (run / "run.json").write_text('{"status": "runn')
    report = gspo.invoke("report", str(run), "--out", str(tmp_path / "out"))
    assert report.exit_code == 0, (report.exception, report.output)
    assert "run.json is unreadable" in report.stderr
    resumed = gspo.invoke("train", "-q", f"resume={run}", "train.steps=4")
    assert resumed.exit_code == 0, (resumed.exception, resumed.output)
    status = json.loads((run / "run.json").read_text())  # rebuilt whole by the run's writer
    assert status["status"] == "finished" and status["step"] == 4 and "versions" in status


def test_a_folder_with_only_its_config_resumes(gspo, tmp_path):
    """A kill between config.yaml and the first run.json: the folder resumes (from step 0)."""
    cfg = compose_config([*CKPT, "train.steps=1", f"output_dir={tmp_path}", "run_id=r"])
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text(config_to_yaml(cfg))
    result = gspo.invoke("train", f"resume={tmp_path / 'r'}")
    assert result.exit_code == 0, (result.exception, result.output)
    assert _steps(tmp_path / "r" / "metrics.jsonl") == [0, 1]
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "finished"


# --- 9. the smaller ones ----------------------------------------------------------------------------

def test_sigterm_exits_143_and_leaves_an_interrupted_run(gspo, tmp_path, monkeypatch):
    """A real SIGTERM, delivered to this process at step 2: 128 + 15, the shell's code for it (Ctrl-C is 130)."""
    _interrupt_at(monkeypatch, 2, sigterm=True)
    result = gspo.invoke("train", *CKPT, "train.steps=3", f"output_dir={tmp_path}", "run_id=r")
    assert result.exit_code == 143, (result.exception, result.output)
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "interrupted"


def test_a_killed_writer_reads_as_dead(tmp_path):
    run = RunDir.open(str(tmp_path), "r", resume=False)
    run.write_config("seed: 0\n")
    run.set_status("running", step=3)
    assert read_status(run.path)["status"] == "running"  # this process lives
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    info = json.loads((run.path / "run.json").read_text())
    (run.path / "run.json").write_text(json.dumps(info | {"pid": int(gone.stdout)}))
    assert read_status(run.path)["status"] == "dead"
    assert run.status()["status"] == "running"  # the writer's own view is the file's
    other = json.loads((run.path / "run.json").read_text()) | {"host": "another-host"}
    (run.path / "run.json").write_text(json.dumps(other))
    assert read_status(run.path)["status"] == "running"  # another host's process cannot be checked


def test_a_runs_files_are_readable_by_the_group(three_steps):
    umask = os.umask(0)
    os.umask(umask)
    if umask & 0o040:
        pytest.skip(f"umask {umask:03o} hides files from the group")
    for path in [three_steps, *three_steps.rglob("*")]:
        mode = path.stat().st_mode
        assert mode & stat.S_IRGRP and (not path.is_dir() or mode & stat.S_IXGRP), (path, oct(mode))


def test_a_null_answer_and_a_csv_file_get_their_own_messages(tmp_path):
    from gspo.evals.records import read_records
    from gspo.trainer.tasks.registry import build_task

    data = tmp_path / "d.jsonl"
    data.write_text('{"problem": "1+1?", "answer": null}\n')
    cfg = compose_config([*TINY, "task=math", f"task.dataset={data}"])
    with pytest.raises(GspoError, match="row 1: field 'answer' is null"):
        build_task(cfg.task)
    csv = tmp_path / "d.csv"
    csv.write_text("question,answer\n1+1?,2\n")
    with pytest.raises(GspoError, match="looks like CSV/TSV: convert it to JSON lines"):
        read_records(csv)
    bom = tmp_path / "bom.jsonl"
    bom.write_text('\ufeff{"question": "1+1?", "answer": "2"}\n', encoding="utf-8")
    assert read_records(bom) == [(1, {"question": "1+1?", "answer": "2"})]


# --- 8. a killed sweep resumes; its report says which jobs died and which never ran ----------------------

KILL_AT_SEED1 = """
import os, signal, sys
from pathlib import Path
from gspo.trainer import loop
marker, real = Path(sys.argv[1]), loop.train_step

def step(n, conf, *args, **kwargs):
    if n == 1 and conf.seed == 1 and marker.exists():  # job 1 (grpo, seed 1), after its step-0 row
        os.kill(os.getpid(), signal.SIGKILL)
    return real(n, conf, *args, **kwargs)

loop.train_step = step
from gspo.cli.main import main
sys.argv = ["gspo", *sys.argv[2:]]
main()
"""


@pytest.mark.slow
def test_a_killed_sweep_resumes_and_its_report_says_what_never_ran(gspo, tmp_path):
    marker = tmp_path / "kill"
    marker.touch()
    args = ["sweep", *TINY, "algo=grpo,gspo", "seed=0,1", "train.steps=1", "train.eval_every=0", "logger.progress=false",
            f"output_dir={tmp_path / 'runs'}", f"hydra.sweep.dir={tmp_path / 'sw'}"]

    def sweep():
        return subprocess.run([sys.executable, "-c", KILL_AT_SEED1, str(marker), *args], env=gspo.env,
                              capture_output=True, text=True, timeout=600, check=False)

    killed = sweep()
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    report = gspo.invoke("report", str(tmp_path / "sw"), "--out", str(tmp_path / "r1"))
    assert report.exit_code == 0, (report.exception, report.output)
    notes = [ln for ln in report.stderr.splitlines() if ln.startswith("note:")]
    assert any("job algo=grpo seed=1 died" in n for n in notes), notes
    assert any("job 2 (algo=gspo seed=0) never ran" in n for n in notes), notes
    assert any("job 3 (algo=gspo seed=1) never ran" in n for n in notes), notes
    first = json.loads((tmp_path / "sw" / "runs" / "1.json").read_text())

    marker.unlink()
    resumed = sweep()  # the same command, the same folder
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "sweep: resuming" in resumed.stderr
    assert "finished already, skipped" in resumed.stderr and "(resuming: it was dead)" in resumed.stderr
    jobs = [json.loads((tmp_path / "sw" / "runs" / f"{n}.json").read_text()) for n in range(4)]
    assert jobs[1]["run_dir"] == first["run_dir"]  # the same run, resumed: its first attempt still listed
    assert jobs[1]["attempts"] == [{"pid": first["pid"], "started": first["started"]}]
    assert [j["outcome"] for j in jobs] == ["finished"] * 4
    assert jobs[0]["attempts"] == [] and jobs[0]["pid"] != jobs[2]["pid"]  # job 0 was skipped: its record is the first
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 4 and all(read_status(r)["status"] == "finished" for r in runs)
    assert all(_steps(r / "metrics.jsonl") == [0, 1] for r in runs)
    report = gspo.invoke("report", str(tmp_path / "sw"), "--out", str(tmp_path / "r2"))
    assert report.exit_code == 0 and "never ran" not in report.stderr and "died" not in report.stderr


def test_a_sweep_resume_needs_its_folder_and_the_same_overrides(gspo, tmp_path):
    folder = tmp_path / "sw"
    result = gspo.invoke("sweep", *TINY, "seed=0,1", "resume=true", f"hydra.sweep.dir={folder}")
    assert isinstance(result.exception, GspoError), result.output
    assert "holds no sweep to resume" in str(result.exception) and "the same overrides and hydra.sweep.dir=" in str(
        result.exception)
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps({"overrides": [*TINY, "seed=0,1"], "params": {}, "stamp": "x"}))
    result = gspo.invoke("sweep", *TINY, "seed=0,1,2", f"hydra.sweep.dir={folder}")
    assert isinstance(result.exception, GspoError) and "holds another sweep" in str(result.exception)
    assert not (folder / "runs").exists()
