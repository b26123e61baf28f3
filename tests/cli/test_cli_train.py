"""`gspo train` end to end on the TINY config: the run directory, reproducibility, resume after a kill.

Runs go through the real command (Typer's CliRunner in-process, and the installed console script once).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml
from conftest import LEARNING_SEED, TINY, without_timing
from omegaconf import OmegaConf

from gspo.conf.schema import Config
from gspo.trainer.run.rundir import read_jsonl

# DESIGN.md's metric names (an interface: reports and W&B panels read them), logged at every training step.
STEP_METRICS = (
    "reward/mean", "reward/std", "reward/arith", "reward/frac_zero_std_groups",
    "completion/len_mean", "completion/len_max", "completion/truncated_frac",
    "clip/token_frac", "clip/seq_frac", "clip/low_frac", "clip/high_frac", "clip/ratio_out_of_band_frac",
    "ratio/token_mean", "ratio/token_min", "ratio/token_max", "ratio/seq_mean", "ratio/seq_min", "ratio/seq_max",
    "policy/entropy", "policy/kl_old", "optim/grad_norm", "optim/lr",
    "time/rollout_s", "time/update_s", "time/step_s", "throughput/tokens_per_s",
)
FRACTIONS = ("reward/mean", "reward/arith", "reward/frac_zero_std_groups", "completion/truncated_frac",
             "clip/token_frac", "clip/seq_frac", "clip/low_frac", "clip/high_frac", "clip/ratio_out_of_band_frac")
EVAL = "eval/arith/accuracy"


def _metrics(run: Path) -> list[dict]:
    return read_jsonl(run / "metrics.jsonl")


def test_two_step_run_directory(finished_run):
    run = finished_run
    assert sorted(p.name for p in run.iterdir()) == [
        "checkpoints", "config.yaml", "estimator.txt", "evals.jsonl", "metrics.jsonl", "run.json", "samples.jsonl"]

    # config.yaml: fully resolved, and valid against the schema
    text = (run / "config.yaml").read_text()
    assert "${" not in text
    config = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.create(text))
    assert (config.train.steps, config.seed, config.algo.name, config.train.group_size) == (2, LEARNING_SEED, "gspo", 4)
    assert config.run_id == "finished" and config.model.tiny.hidden_size == 32

    rows = _metrics(run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        missing = [k for k in STEP_METRICS if k not in row]
        assert not missing, f"step {row['step']} lacks {missing}"
        assert all(isinstance(row[k], float | int) and math.isfinite(row[k]) for k in STEP_METRICS)
        assert all(0.0 <= row[k] <= 1.0 for k in FRACTIONS), row
        assert 1 <= row["completion/len_mean"] <= row["completion/len_max"] <= 16  # rollout.max_new_tokens
        assert row["optim/lr"] == pytest.approx(1e-4, rel=1e-6)  # float32 of the default lr
        assert row["ratio/token_min"] <= row["ratio/token_mean"] <= row["ratio/token_max"]
        assert row["time/step_s"] > 0 and row["throughput/tokens_per_s"] > 0
    # the learning signal the reproducibility and resume tests rely on
    assert rows[1]["reward/frac_zero_std_groups"] < 1 and rows[1]["optim/grad_norm"] > 0
    # held-out eval at step 0 and at the end, nowhere else (train.eval_every=10 > steps)
    assert [EVAL in r for r in rows] == [True, False, True]
    assert all(0.0 <= r[EVAL] <= 1.0 for r in (rows[0], rows[2]))

    evals = read_jsonl(run / "evals.jsonl")
    accuracy = {(e["step"], e["metric"], e["temperature"]): e["value"] for e in evals if e["benchmark"] == "arith"}
    assert accuracy[(0, "pass@1", 1.0)] == rows[0][EVAL] and accuracy[(2, "pass@1", 1.0)] == rows[2][EVAL]
    assert accuracy[(2, "pass@1", 0.0)] == rows[2][EVAL.replace("accuracy", "accuracy_greedy")]
    assert all((e["top_p"], e["max_new_tokens"]) == (1.0, 16) for e in evals)
    # k samples per problem: train.eval_k = 1, but train.final_eval_k = 16 at the final step's sampled eval
    assert [(e["step"], e["temperature"], e["k"]) for e in evals] == [(0, 1.0, 1), (0, 0.0, 1), (2, 1.0, 16), (2, 0.0, 1)]
    assert {e["n_problems"] for e in evals} == {8}  # task.eval_size
    # per problem, the samples right (of k) and the problems' fingerprint, what a paired report reads
    assert all(len(e["correct"]) == 8 and sum(e["correct"]) / (8 * e["k"]) == e["value"] for e in evals)
    assert len({e["problems"] for e in evals}) == 1
    assert [("time/eval_s" in r) for r in rows] == [True, False, True] and rows[0]["time/eval_s"] > 0

    samples = read_jsonl(run / "samples.jsonl")
    assert {s["step"] for s in samples} == {1, 2}
    assert all({"prompt", "completion", "gold", "reward", "truncated"} <= s.keys() for s in samples)
    assert all(s["reward"] in (0.0, 1.0) and re.fullmatch(r"\d+[+*]\d+=", s["prompt"]) for s in samples)

    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "finished" and status["step"] == 2 and status["run_id"] == "finished"
    assert {"torch", "transformers"} <= status["versions"].keys()

    ckpts = run / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_000002"
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step_000002"]  # save_every=0: final only
    assert json.loads((ckpts / "step_000002" / "trainer_state.json").read_text()) == {"step": 2}
    assert (ckpts / "step_000002" / "model.safetensors").stat().st_size > 0
    assert not [p for p in run.rglob(".*")], "temporary files left behind"


@pytest.mark.slow  # ~15-20 s: a fresh interpreter imports torch and transformers
def test_console_script_default_run_dir_and_same_numbers(gspo, finished_run, tmp_path):
    """The installed `gspo` script, no output_dir: the run lands in ./results/runs/<time>-<algo>-s<seed>/,
    with exactly the numbers of the same run made in-process."""
    proc = gspo.subprocess("train", "-q", *TINY, f"seed={LEARNING_SEED}", "train.steps=2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "results" / "runs").iterdir()
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-gspo-s{LEARNING_SEED}-[0-9a-f]{{6}}", run.name)  # random: no collisions
    assert f"run finished: {Path('results') / 'runs' / run.name}" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "it/s" not in proc.stderr  # -q: no progress bars, ours or the libraries'
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert without_timing(_metrics(run)) == without_timing(_metrics(finished_run))


def test_cfg_prints_resolved_yaml_and_writes_nothing(gspo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = gspo.invoke("train", "--cfg", "algo=grpo", "train.steps=7", "seed=3")
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(result.stdout)
    assert config["algo"] == {**config["algo"], "name": "grpo", "clip_low": 0.2, "clip_high": 0.27}
    assert (config["train"]["steps"], config["seed"]) == (7, 3)
    assert set(config) >= {"algo", "model", "task", "rollout", "logger", "train", "seed", "output_dir", "run_id"}
    assert "${" not in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_help_lists_every_group_and_option(gspo):
    result = gspo.invoke("train", "--help")
    assert result.exit_code == 0
    text = "".join(result.stdout.split())  # the terminal may wrap a long list after any "|"
    root = resources.files("gspo.conf")
    for group in ("algo", "model", "task", "rollout", "logger"):
        options = sorted(p.name.removesuffix(".yaml") for p in root.joinpath(group).iterdir() if p.name.endswith(".yaml"))
        assert f"{group}={'|'.join(options)};" in text or f"{group}={'|'.join(options)}." in text
    presets = sorted(p.name.removesuffix(".yaml") for p in resources.files("gspo.conf").joinpath("algo").iterdir()
                     if p.name.endswith(".yaml"))
    assert "algo=" + "|".join(presets) in text
    assert "--cfg" in text


def test_same_seed_same_numbers_other_seed_differs(gspo, finished_run, tmp_path):
    again = gspo.train(tmp_path, "again", f"seed={LEARNING_SEED}", "train.steps=2")
    other = gspo.train(tmp_path, "other", f"seed={LEARNING_SEED + 1}", "train.steps=2")
    assert without_timing(_metrics(again)) == without_timing(_metrics(finished_run))
    assert read_jsonl(again / "samples.jsonl") == read_jsonl(finished_run / "samples.jsonl")
    assert without_timing(_metrics(other))[1:] != without_timing(_metrics(finished_run))[1:]
    assert read_jsonl(other / "samples.jsonl") != read_jsonl(finished_run / "samples.jsonl")


def _status(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def test_resume_continues_like_an_uninterrupted_run(gspo, tmp_path):
    # eval every step: the same rows either way, with the final eval's k the intermediate one's (step 2 is the
    # first run's final eval and the straight run's intermediate one)
    common = (f"seed={LEARNING_SEED}", "train.eval_every=1", "train.final_eval_k=1")
    first = gspo.train(tmp_path, "r", *common, "train.steps=2", "train.save_every=1")
    assert sorted(p.name for p in (first / "checkpoints").iterdir()) == ["latest", "step_000001", "step_000002"]
    resumed = gspo.train(tmp_path, "r", *common, "train.steps=3", "resume=true")
    straight = gspo.train(tmp_path, "straight", *common, "train.steps=3")

    rows = _metrics(resumed)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert without_timing(rows) == without_timing(_metrics(straight))
    assert rows[1]["optim/grad_norm"] > 0  # the weights moved, and step 1's AdamW momentum moves them on after
    assert [s["step"] for s in read_jsonl(resumed / "samples.jsonl")] == [
        s["step"] for s in read_jsonl(straight / "samples.jsonl")]
    assert _status(resumed)["status"] == "finished" and _status(resumed)["step"] == 3
    assert (resumed / "checkpoints" / "latest").read_text().strip() == "step_000003"
    assert OmegaConf.load(resumed / "config.yaml").train.steps == 3


def test_killed_run_is_readable_and_resumes_to_the_same_numbers(gspo, finished_run, tmp_path):
    """Simulate a kill during step 2: its metrics row and a torn line were written, the step-2 checkpoint
    was not pointed to, run.json still says running. The logs stay readable and resume redoes step 2."""
    run = gspo.train(tmp_path, "killed", f"seed={LEARNING_SEED}", "train.steps=2", "train.save_every=1")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/me')  # torn: the process died mid-write
    (run / "checkpoints" / "latest").write_text("step_000001\n")
    shutil.rmtree(run / "checkpoints" / "step_000002")
    status = _status(run) | {"status": "running", "step": 1}
    (run / "run.json").write_text(json.dumps(status))

    assert [r["step"] for r in _metrics(run)] == [0, 1, 2]  # the torn line is skipped, not an error
    resumed = gspo.train(tmp_path, "killed", f"seed={LEARNING_SEED}", "train.steps=2", "resume=true")
    rows = _metrics(resumed)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert (run / "metrics.jsonl").read_text().endswith("}\n")  # the torn tail is gone from the file too
    assert without_timing(rows) == without_timing(_metrics(finished_run))
    assert read_jsonl(resumed / "samples.jsonl") == read_jsonl(finished_run / "samples.jsonl")
    assert _status(resumed)["status"] == "finished"
    assert (resumed / "checkpoints" / "latest").read_text().strip() == "step_000002"
