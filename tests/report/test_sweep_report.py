"""`gspo sweep` then `gspo report` on TINY runs: the files, the numbers against the runs' own metrics,
intervals, plots that are not blank, the page in a headless browser, and bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
import yaml

from gspo.report.load import loaded
from gspo.report.page import fmt
from gspo.report.runs import load_run

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _runs(sweep: Path) -> list[Path]:
    jobs = [json.loads(f.read_text()) for f in sorted((sweep / "runs").glob("*.json"))]
    assert all(job["started"] < job["ended"] for job in jobs)
    return [Path(os.path.normpath(sweep / job["run_dir"])) for job in jobs]  # relative to the sweep folder


@pytest.fixture(scope="module")
def report(gspo, sweep_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "out"
    result = gspo.invoke("report", str(sweep_dir), "--out", str(out))
    assert result.exit_code == 0, (result.exception, result.output)
    assert f"report: {out / 'report.html'}" in result.stdout
    return out


def test_sweep_runs_four_jobs_and_records_them(sweep_dir):
    runs = _runs(sweep_dir)
    assert [r.name.split("-", 2)[2] for r in runs] == ["0-grpo-s0", "1-grpo-s1", "2-gspo-s0", "3-gspo-s1"]
    for run in runs:
        assert json.loads((run / "run.json").read_text())["status"] == "finished"
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["logger"]["group"] == f"sweep-{run.name.split('-')[0]}-{run.name.split('-')[1]}"
        assert config["logger"]["tags"] == [f"algo={config['algo']['name']}", f"seed={config['seed']}"]


def test_report_writes_every_file(report, sweep_dir):
    names = {p.name for p in report.iterdir()}
    assert {"report.md", "report.html", "summary.csv"} <= names
    # a run that ran under a high load has its times left out (report/load.py): on a busy machine all four may
    timed = [r for r in _runs(sweep_dir) if not loaded(load_run(r))]
    for metric in ("reward_mean", "eval_arith_accuracy", "eval_arith_accuracy_greedy"):
        assert {f"{metric}_by_{x}.png" for x in ("step", "tokens", *(["time"] if timed else []))} <= names
    for metric in ("clip_token_frac", "clip_seq_frac", "completion_len_mean", "policy_entropy", "optim_grad_norm",
                   *(["time_step_s"] if timed else [])):
        assert f"{metric}_by_step.png" in names
    md = (report / "report.md").read_text()
    for png in (p for p in names if p.endswith(".png")):
        assert f"]({png})" in md
    assert "With 2 seed(s) per arm the intervals say little: bands in the plots are the seeds' min-max" in md
    assert "| GSPO - GRPO |" in md
    assert md.count("| finished | 2 | 2 |") == 4  # each run's status, step and configured steps


def test_summary_and_tables_equal_the_runs_own_metrics(report, sweep_dir):
    summary = pd.read_csv(report / "summary.csv").set_index("run_id")
    md = (report / "report.md").read_text()
    by_algo: dict[str, list[float]] = {}
    for run in _runs(sweep_dir):
        rows = _metrics(run)
        final_acc = [r["eval/arith/accuracy"] for r in rows if "eval/arith/accuracy" in r][-1]
        reward = [r["reward/mean"] for r in rows if r["step"] >= 1]
        clip = [r["clip/token_frac"] for r in rows if r["step"] >= 1]
        got = summary.loc[run.name]
        assert got["eval/arith/accuracy final"] == final_acc
        assert got["reward/mean mean"] == pytest.approx(sum(reward) / len(reward), abs=1e-12)
        assert got["clip/token_frac mean"] == pytest.approx(sum(clip) / len(clip), abs=1e-12)
        assert (got["algo.name"], got["status"], got["step"]) == (run.name.split("-")[3], "finished", 2)
        by_algo.setdefault(got["algo.name"], []).append(sum(clip) / len(clip))
    for algo, values in by_algo.items():  # the clip table's mean cell for each arm, as printed
        mean = sum(values) / len(values)
        assert f"| {algo.upper()} | {fmt(mean)} |" in md


def test_a_copied_run_is_one_seed_not_two(gspo, sweep_dir, tmp_path):
    """The same run in two folders (a copy) is counted once, with a note (issue 56: it made "2 seeds" of one and an
    interval of zero width)."""
    run = _runs(sweep_dir)[0]
    for name in ("a", "b"):
        shutil.copytree(run, tmp_path / name)
    result = gspo.invoke("report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, (result.exception, result.output)
    page = (tmp_path / "out" / "report.md").read_text()
    assert "1 runs: 1 arms x 1 seed(s)" in page and "(a copy): counted once" in page


def test_plots_are_not_blank(report):
    for png in report.glob("*.png"):
        pixels = mpimg.imread(png)[..., :3].reshape(-1, 3)
        colors = np.unique((pixels * 255).astype(np.uint8), axis=0)
        drawn = (pixels < 0.9).any(axis=1).mean()
        assert len(colors) > 20 and drawn > 0.02, png.name


@pytest.mark.skipif(BROWSER is None, reason="no chromium installed (apt-get install chromium)")
def test_page_renders_in_headless_chromium_with_every_image(report, tmp_path):
    page = report / "report.html"
    n_images = page.read_text().count("<img ")
    assert n_images == len(list(report.glob("*.png"))) and "http" not in page.read_text().replace("http-equiv", "")
    dom = subprocess.run([BROWSER, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    assert f'data-images-loaded="{n_images}"' in dom and 'data-images-broken="0"' in dom


def test_two_seed_report_of_a_real_sweep_keeps_bands_in_range_and_says_n_below_3(report, sweep_dir):
    """Every band the report draws from the 2-seed sweep lies within its metric's valid range (the seeds'
    min-max, never a t interval of 12.7 standard errors), and the page says so in words."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from gspo.report.arms import group_arms
    from gspo.report.plots import _panel, key_specs, plot_specs
    from gspo.report.runs import load_runs
    from gspo.report.tables import metric_info

    runs, _ = load_runs([sweep_dir])
    arms = group_arms(runs)
    checked = 0
    for spec in [*key_specs("arith"), *plot_specs("arith")]:
        fig, ax = plt.subplots()
        if _panel(ax, spec, arms, "step"):
            lo, hi = metric_info(spec.metric).valid
            logged = [float(v) for r in runs if spec.metric in r.metrics for v in r.metrics[spec.metric].dropna()]
            for poly in (c for c in ax.collections if isinstance(c, PolyCollection)):
                ys = np.concatenate([p.vertices[:, 1] for p in poly.get_paths()])
                assert lo is None or ys.min() >= min(lo, *logged) - 1e-12, spec.metric
                assert hi is None or ys.max() <= max(hi, *logged) + 1e-12, spec.metric
                assert ys.min() >= min(logged) - 1e-12 and ys.max() <= max(logged) + 1e-12, spec.metric  # min-max
                checked += 1
        plt.close(fig)
    assert checked >= 10
    md = (report / "report.md").read_text()
    assert "With 2 seed(s) per arm the intervals say little" in md and "not a 95% interval" in md


def test_report_of_a_truncated_metrics_file_uses_whole_rows(gspo, sweep_dir, tmp_path):
    run = tmp_path / "torn"
    shutil.copytree(_runs(sweep_dir)[0], run)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/me')
    status = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(status | {"status": "running", "step": 2}))  # as a SIGKILL leaves it:
    # the sweep job's process (its pid) is gone, so the report reads it as dead
    result = gspo.invoke("report", str(run), "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, (result.exception, result.output)
    assert "1 line(s) that are not whole rows" in result.stderr and "its 3 whole rows" in result.stderr
    assert "1 run(s) not finished" in result.stderr
    assert "| torn | all runs | 0 | dead | 2 | 2 |" in (tmp_path / "out" / "report.md").read_text()
    assert pd.read_csv(tmp_path / "out" / "summary.csv")["step"].tolist() == [2]


def _other_task(sweep_dir: Path, tmp_path: Path) -> Path:
    run = tmp_path / "math"
    shutil.copytree(_runs(sweep_dir)[1], run)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("name: arith", "name: gsm8k"))
    return run


@pytest.mark.parametrize("case", ["no-runs", "not-a-run", "missing", "other-task"])
def test_bad_report_input_is_one_line_and_writes_nothing(gspo, sweep_dir, tmp_path, case):
    args = {"no-runs": [], "not-a-run": [str(tmp_path)], "missing": [str(tmp_path / "nope")]}
    if case == "other-task":
        args[case] = [str(_runs(sweep_dir)[0]), str(_other_task(sweep_dir, tmp_path))]
    words = {"no-runs": "no runs given", "not-a-run": "not a run or sweep directory", "missing": "no such run",
             "other-task": "task.name"}
    result = gspo.invoke("report", *args[case], "--out", str(tmp_path / "out"))
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and words[case] in errors[0], result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["sweep"], ["train", "-m"]])
def test_bad_sweep_override_fails_before_any_job(gspo, tmp_path, command):
    result = gspo.subprocess(*command, "seed=0,1", "algo=grpo,nope", cwd=tmp_path, timeout=120)
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "algo/nope" in errors[0], result.stderr
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


def test_train_takes_hydras_flags(gspo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = gspo.invoke("train", "--cfg", "job", "train.steps=3")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["train"]["steps"] == 3
    result = gspo.invoke("train", "--cfg", "hydra")
    assert "sweeper" in yaml.safe_load(result.stdout)["hydra"]
    assert list(tmp_path.iterdir()) == []


def test_eval_rows_say_how_they_were_made_and_grade_reads_our_own_files(gspo, sweep_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(_runs(sweep_dir)[0], run)
    training = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
    result = gspo.invoke("eval", f"eval.run={run}", "eval.benches=[arith]", "eval.greedy=true",
                         "eval.max_new_tokens=12")
    assert result.exit_code == 0, (result.exception, result.output)
    evaluated = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()][len(training):]
    assert [(r["step"], r["temperature"]) for r in training] == [(0, 1.0), (0, 0.0), (2, 1.0), (2, 0.0)]
    assert {r["metric"] for r in training} == {"pass@1"} and {r["metric"] for r in evaluated} == {"pass@1", "avg@1"}
    assert {r["source"] for r in training} == {"train"} and {r["source"] for r in evaluated} == {"gspo eval"}
    assert all((r["top_p"], r["max_new_tokens"]) == (1.0, 16) for r in training)
    assert [r["k"] for r in training] == [1, 1, 16, 1]  # train.final_eval_k at the final step's sampled eval
    assert all((r["temperature"], r["top_p"], r["max_new_tokens"], r["k"]) == (0.0, 1.0, 12, 1) for r in evaluated)
    for name, n in (("samples.jsonl", 2 * 4), ("eval_samples.jsonl", 8)):  # samples_per_step x steps; eval_size
        result = gspo.invoke("grade", "math", str(run / name))
        assert result.exit_code == 0, (name, result.output)
        graded = (run / name.replace(".jsonl", ".graded.jsonl")).read_text().splitlines()
        assert len(graded) == n and f"graded {n} rows" in result.stdout


def test_report_logs_plots_and_summary_to_wandb_when_on(gspo, sweep_dir, tmp_path):
    out = tmp_path / "out"
    result = gspo.invoke("report", str(sweep_dir), "--out", str(out), "--wandb", "offline")
    assert result.exit_code == 0, (result.exception, result.output)
    (files,) = out.glob("wandb/offline-run-*/files")
    assert f"W&B offline run: {files.parent}; upload it with: wandb sync {files.parent}\n" in result.stderr
    pngs = sorted(out.glob("*.png"))
    assert len(list(files.glob("media/images/report/*.png"))) == len(pngs) > 0
    assert len(list(files.glob("media/table/report/summary_*.table.json"))) == 1


def test_the_page_shows_what_each_arm_computes(sweep_dir, report):
    """Each arm's estimator card (its runs' estimator.txt, `gspo explain`'s output) is on the page, under its label."""
    md = (report / "report.md").read_text()
    assert "## What each arm computes" in md
    cards = {r.name.split("-")[-2]: (r / "estimator.txt").read_text().rstrip() for r in _runs(sweep_dir)}
    assert cards["grpo"].startswith("estimator  grpo") and cards["gspo"].startswith("estimator  gspo")
    for label, algo in (("GRPO", "grpo"), ("GSPO", "gspo")):
        assert f"**{label}**\n\n```\n{cards[algo]}\n```" in md, label
    html = (report / "report.html").read_text()
    assert "What each arm computes" in html and "estimator  gspo" in html
