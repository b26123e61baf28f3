"""What a sweep's terminal says (issue 60): ETAs that count the held-out evals from the first estimate and say their
basis, resumed jobs that are not counted as left, labelled whole lines when two jobs run at once, one W&B line per
sweep, and a line per report stage."""

from __future__ import annotations

import json

import yaml
from report_runs import fake_compare

from gspo.report import write_report
from gspo.study.eta import early_eta, job_progress
from gspo.trainer.run.loggers import OFFLINE_NOTE, sweep_note, without_wandb_note
from gspo.trainer.run.progress import Progress, side_by_side


def _job(sweep, num: int, **record) -> None:
    (sweep / "runs").mkdir(exist_ok=True)
    (sweep / "runs" / f"{num}.json").write_text(json.dumps({"run_dir": "x", **record}))


def test_the_first_eta_counts_every_held_out_eval_and_says_its_basis(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"train": {"eval_every": 10, "eval_k": 4, "final_eval_k": 16,
                                                                    "eval_greedy": True}}))
    rows = [{"step": 0, "time/eval_s": 10.0}, {"step": 1, "time/step_s": 2.0}, {"step": 2, "time/step_s": 4.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = early_eta(tmp_path, steps=20, jobs=6)
    # steps: 3 s x (18 + 100) = 354 s; evals per job: steps 0 and 10 at 10 s, the final at (16+1)/(4+1) = 3.4x:
    # 54 s x 6 jobs, less job 1's step-0 eval already done: 314 s; 668 s in all
    assert line.startswith("sweep ETA about 0:11:08 for the 6 jobs (job 1's first 2 steps at 3 s/step; 2 held-out "
                           "eval(s) per job at step 0's 10 s and the final one at 3.4x that;"), line
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    assert "held-out evals not counted: job 1 logged no eval time" in early_eta(tmp_path, steps=20, jobs=6)


def test_a_resumed_sweep_does_not_count_its_finished_jobs_as_left(tmp_path):
    jobs = [f"seed={s}" for s in range(6)]
    for num in (0, 1, 3, 4):  # an earlier attempt finished these; 2 and 5 were interrupted
        _job(tmp_path, num, started=1.0, ended=101.0, outcome="finished")
    _job(tmp_path, 2, started=1.0, ended=5.0, outcome="interrupted")
    line = job_progress(tmp_path, 2, jobs)
    assert line.startswith("sweep job 3/6, ETA 0:03:20 for the 2 left (0:01:40 per job, evals included, over 4 done"), line
    # job 4, finished already (skipped), counts only job 6 as left
    assert job_progress(tmp_path, 3, jobs).startswith("sweep job 4/6, ETA 0:01:40 for the 1 left")


def test_a_job_beside_others_prints_labelled_whole_lines_and_no_live_bar(capfd):
    said = []
    with side_by_side("job 3/6 gspo s0"):
        with Progress(40, label="train") as bar:
            log = bar.wrap(said.append)
            log("step 10: eval/arith/accuracy 0.500")
            for _ in range(40):
                bar.advance({"reward/mean": 0.5, "clip/token_frac": 0.01})
    err = capfd.readouterr().err
    lines = err.splitlines()
    assert said == ["job 3/6 gspo s0: step 10: eval/arith/accuracy 0.500"]
    assert len(lines) == 20 and all(line.startswith("job 3/6 gspo s0: train ") for line in lines), err
    assert lines[-1].startswith("job 3/6 gspo s0: train 40/40 0:00:0") and "reward/mean 0.500" in lines[-1]
    assert "\r" not in err and "\x1b" not in err  # no live bar redrawing a shared line
    with Progress(5, label="train", enabled=False) as bar:  # progress off: no lines either
        bar.advance({})
    assert capfd.readouterr().err == ""


def test_a_sweep_says_w_and_b_once_and_its_jobs_not_at_all(tmp_path):
    runs = []
    for name in ("20261207-1-0-grpo-s0", "20261207-1-1-gspo-s0"):
        (tmp_path / "runs" / name / "wandb" / f"offline-run-2026-{name[-7:]}").mkdir(parents=True)
        runs.append(tmp_path / "runs" / name)
    (tmp_path / "runs" / "other" / "wandb" / "offline-run-x").mkdir(parents=True)  # not the sweep's
    note = sweep_note(runs)
    assert note == (f"W&B: 2 offline run(s) under each run's wandb/; upload them all with: wandb sync "
                    f"{tmp_path / 'runs' / '20261207-1-*' / 'wandb' / 'offline-run-*'}")
    assert len(note) < 200 and sweep_note([tmp_path / "runs" / "other" / "none"]) is None
    said = []
    log = without_wandb_note(said.append)
    log(f"{OFFLINE_NOTE} runs/x/wandb/offline-run-1; upload it with: wandb sync runs/x/wandb/offline-run-1")
    log("step 1: ...")
    assert said == ["step 1: ..."]


def test_the_report_says_a_line_per_stage(tmp_path, monkeypatch):
    import gspo.report.write as write

    monkeypatch.setattr(write, "write_plots", lambda *a, **k: [])  # the stages, not the plots, are under test
    said = []
    write_report(fake_compare(tmp_path / "runs", seeds=2), tmp_path / "out", say=said.append)
    assert [s.split(":")[0] for s in said] == ["report"] * 4, said
    assert said[0] == "report: 4 runs read, 2 arms; statistics ..." and said[-1].startswith("report: page written: ")
