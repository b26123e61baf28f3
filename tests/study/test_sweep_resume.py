"""A sweep run again in its folder (issue 37): a resumed job runs under its run's saved config or is refused in
one line naming the keys, never mixes two configs; records that travel with a copied tree; the folder and stamp
of a new sweep; the command an interrupted `gspo compare` prints is one that resumes it.

One finished one-job sweep (relative output_dir and hydra.sweep.dir) is copied and damaged per test.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY

from gspo.conf import GspoError, compose_config
from gspo.conf.resume import continued_config, saved_config
from gspo.study import sweep as sweep_cli
from gspo.study.sweep import new_stamp, sweep_folder
from gspo.trainer.run.rundir import read_jsonl
from gspo.trainer.run.sweepdir import sweep_runs

SWEEP = (*TINY, "seed=0", "train.steps=1", "train.eval_every=0", "logger.progress=false", "output_dir=runs",
         "hydra.sweep.dir=sw")


@pytest.fixture(scope="module")
def one_job(gspo, tmp_path_factory) -> Path:
    """A folder holding sw/ (a finished one-job sweep) and runs/ (its run): copy it, never change it."""
    root = tmp_path_factory.mktemp("one_job")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        result = gspo.invoke("sweep", *SWEEP)
    assert result.exit_code == 0, (result.exception, result.output)
    return root


@pytest.fixture(autouse=True)
def _sweep_argv(monkeypatch):
    """run_sweep sets sys.argv for its Hydra jobs: put it back after each test."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))


def _copy(one_job: Path, tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """(the copied tree, its run), the working directory set to the tree."""
    root = Path(shutil.copytree(one_job, tmp_path / "copy"))
    monkeypatch.chdir(root)
    (run,) = (root / "runs").iterdir()
    return root, run


def _interrupted(run: Path) -> None:
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(info | {"status": "interrupted"}))


def test_a_resumed_job_refuses_a_config_the_sweep_now_composes_differently(gspo, one_job, tmp_path, monkeypatch):
    """The issue's case: the preset said temperature 1.0 when the run started, 0.5 now (here the run's saved
    config is edited instead of the preset: the same difference). Before: steps 1-2 at 1.0, 3-4 at 0.5."""
    _root, run = _copy(one_job, tmp_path, monkeypatch)
    _interrupted(run)
    saved = (run / "config.yaml").read_text().replace("  temperature: 1.0\n", "  temperature: 0.5\n")
    (run / "config.yaml").write_text(saved)
    rows = (run / "metrics.jsonl").read_text()
    result = gspo.invoke("sweep", *SWEEP)
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: {run}: the sweep now composes another config than this run started with "
                      "(rollout.temperature=0.5 -> 1.0: a preset or a default changed); resuming would mix the two "
                      "in one run: restore them, or run the sweep in a new hydra.sweep.dir="]
    assert (run / "config.yaml").read_text() == saved and (run / "metrics.jsonl").read_text() == rows


def test_a_resumed_job_continues_under_its_saved_config(gspo, one_job, tmp_path, monkeypatch):
    """A run saved before a schema key existed (train.compile dropped from its config.yaml) resumes: the key
    takes the schema's default, as `gspo train resume=` reads it; the config stays the run's own."""
    _root, run = _copy(one_job, tmp_path, monkeypatch)
    _interrupted(run)
    saved = (run / "config.yaml").read_text()
    assert "  compile: false\n" in saved
    (run / "config.yaml").write_text(saved.replace("  compile: false\n", ""))
    result = gspo.invoke("sweep", *SWEEP)
    assert result.exit_code == 0, (result.exception, result.output)
    assert "(resuming: it was interrupted)" in result.stderr
    assert (run / "config.yaml").read_text() == saved.replace("\nresume: false\n", "\nresume: true\n")  # as resume= writes
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1]


def test_continued_config_names_every_changed_key_and_applies_what_resume_may_change(finished_run):
    composed = saved_config(finished_run, "test")
    composed.train.lr, composed.seed, composed.train.eval_every = 5e-4, 3, 7
    with pytest.raises(GspoError) as err:
        continued_config(composed, finished_run)
    assert "(seed=10 -> 3, train.lr=0.0001 -> 0.0005: a preset or a default changed)" in str(err.value)
    composed = saved_config(finished_run, "test")
    composed.train.eval_every, composed.train.steps = 7, 1
    with pytest.raises(GspoError, match="a resumed run may extend its train.steps=2"):
        continued_config(composed, finished_run)
    composed.train.steps = 2
    assert continued_config(composed, finished_run).train.eval_every == 7  # as `gspo train resume=` allows


def test_a_copied_tree_reads_its_own_runs_and_old_absolute_records_still_read(one_job, tmp_path, monkeypatch):
    """Before: runs/N.json held absolute paths, so a copied sweep reported the original runs."""
    root, run = _copy(one_job, tmp_path, monkeypatch)
    record = json.loads((root / "sw" / "runs" / "0.json").read_text())
    assert record["run_dir"] == f"../runs/{run.name}"
    assert sweep_runs(root / "sw") == [run]
    (root / "sw" / "runs" / "0.json").write_text(json.dumps(record | {"run_dir": str(run)}))  # an older gspo's
    assert sweep_runs(root / "sw") == [run]


def test_a_sweep_folder_with_now_is_filled_in_and_another_interpolation_is_one_line(gspo, tmp_path, monkeypatch):
    """Before: hydra.sweep.dir=out/${now:%Y} wrote sweep.json into a literal `${now:%Y}` folder and reported 0 runs."""
    assert sweep_folder("out/${now:%Y-%m}/x") == f"out/{time.strftime('%Y-%m')}/x"
    monkeypatch.chdir(tmp_path)
    result = gspo.invoke("sweep", *TINY, "seed=0,1", "hydra.sweep.dir=out/${hydra.job.name}")
    assert isinstance(result.exception, GspoError)
    assert str(result.exception) == ("hydra.sweep.dir=out/${hydra.job.name}: only ${now:FORMAT} is filled in here "
                                     "(the sweep's folder is made before Hydra starts); give a plain path")
    assert list(tmp_path.iterdir()) == []


def test_two_sweeps_in_one_second_get_their_own_stamps():
    """Before: two sweeps started in the same second shared results/sweeps/<stamp> and their jobs' run ids."""
    stamps = {new_stamp() for _ in range(20)}
    assert len(stamps) == 20 and all(re.fullmatch(r"\d{8}-\d{6}_[0-9a-f]{6}", s) for s in stamps)


@pytest.mark.parametrize(("text", "words"), [
    ("[]", "sweep.json: holds a JSON list, not an object"),
    ('{"overrides": []}', "sweep.json: has no stamp"),
    ('{"overrides": [], "stamp": 5}', "sweep.json: stamp is 5, not text"),
    (b'{"overrides": ["\xff"], "stamp": "x"}', "sweep.json: not UTF-8 text (byte 16)"),
    ('{"overrides": [', "sweep.json: not whole JSON (Expecting value"),
])
def test_a_damaged_sweep_json_is_one_line_on_resume(gspo, tmp_path, text, words):
    """Before: `[]` or no stamp gave a traceback."""
    folder = tmp_path / "sw"
    folder.mkdir()
    (folder / "sweep.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    result = gspo.invoke("sweep", *TINY, "seed=0,1", f"hydra.sweep.dir={folder}")
    assert isinstance(result.exception, GspoError), result.output
    assert str(result.exception).startswith(f"{folder}/{words}") and "\n" not in str(result.exception)
    assert str(result.exception).endswith("; this folder's sweep cannot be resumed; run the sweep in another "
                                          "hydra.sweep.dir=")


def test_an_interrupted_compare_prints_a_command_that_resumes_it(gspo, tmp_path, monkeypatch):
    """Before: it printed `gspo sweep +sweep=compare ...`, which the folder then refused as another sweep (the
    preset's params were not on it), and paths were not quoted."""
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_cli, "hydra_job", interrupted)
    folder = tmp_path / "my sweep"
    result = gspo.invoke("compare", "seed=0", f"hydra.sweep.dir={folder}")
    assert result.exit_code == 130, result.output
    (hint,) = [ln.split("resume it (finished jobs skipped): ", 1)[1] for ln in result.stderr.splitlines()
               if "resume it (finished jobs skipped): " in ln]
    assert hint == f"gspo compare seed=0 'hydra.sweep.dir={folder}'"
    again = gspo.invoke(*shlex.split(hint)[1:])
    assert again.exit_code == 130, again.output  # it got as far as the jobs: the folder took it as its own sweep
    assert f"sweep: resuming {folder}" in again.stderr


def test_resume_dot_names_the_folder_it_is_in(finished_run, tmp_path, monkeypatch):
    """Before: `gspo train resume=.` inside a run said run_id=''."""
    run = Path(shutil.copytree(finished_run, tmp_path / "copied"))
    monkeypatch.chdir(run)
    cfg = compose_config(["resume=."])
    assert (cfg.run_id, Path(cfg.output_dir)) == ("copied", tmp_path)
    monkeypatch.chdir(run / "checkpoints")
    assert compose_config(["resume=.."]).run_id == "copied"
    assert os.path.samefile(compose_config(["resume=.."]).output_dir, tmp_path)
