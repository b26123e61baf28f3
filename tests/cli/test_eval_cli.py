"""`gspo eval` on a run's checkpoint and periodic benchmark evals in `gspo train` (sweeps: test_sweep_report.py).

The tiny test model cannot solve AIME or write code; these tests check the plumbing end to end on the
real benchmark records (rows, metrics, samples, the training engine, the shared graders), and that the
embedded task's eval through `gspo eval` agrees with the one `gspo train` logged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gspo.conf.errors import GspoError
from gspo.trainer.run.rundir import _write_manifest
from tests.conftest import LEARNING_SEED, TINY

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "aime24.jsonl").exists(), reason="../shared/data not beside the repo")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@needs_data
def test_eval_run_checkpoint_on_aime_writes_rows_and_samples(gspo, finished_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = len(_rows(run / "evals.jsonl"))
    result = gspo.invoke("eval", f"eval.run={run}", "eval.benches=[aime24]", f"+eval.paths.aime24={DATA / 'aime24.jsonl'}",
                         "eval.k=2", "eval.limit=3", "eval.max_new_tokens=8")
    assert result.exit_code == 0, (result.exception, result.output)
    rows = _rows(run / "evals.jsonl")[before:]
    by_metric = {r["metric"]: r for r in rows}
    assert set(by_metric) == {"avg@2", "pass@1", "pass@2"}  # the counts are fields, not metric rows
    for r in rows:
        assert r["benchmark"] == "aime24" and r["k"] == 2 and r["n_problems"] == 3 and r["step"] == 2
        assert r["n_skipped"] == 0 and r["source"] == "gspo eval" and r["time"].endswith("+00:00")
        assert r["model"] == "tiny" and r["max_new_tokens"] == 8  # the run's model, at its checkpoint's step
    assert 0.0 <= by_metric["avg@2"]["value"] <= by_metric["pass@2"]["value"] <= 1.0
    samples = _rows(run / "eval_samples.jsonl")
    assert len(samples) == 3 * 2 and {s["id"] for s in samples} == {"2024-I-1", "2024-I-10", "2024-I-11"}
    assert all(s["verdict"] in ("correct", "wrong_answer") for s in samples)


def _memorise(ckpt: Path, problems, steps: int = 30) -> None:
    """Fine-tune the checkpoint's model on the worked solutions of `problems` and save it in place."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        for p in problems:
            ids = torch.tensor([tokenizer(p.prompt + p.solution)["input_ids"] + [tokenizer.eos_token_id]])
            labels = ids.clone()
            labels[:, : len(tokenizer(p.prompt)["input_ids"])] = -100
            model(input_ids=ids, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad()
    model.save_pretrained(ckpt)


def test_eval_arith_agrees_with_the_training_eval(gspo, finished_run, tmp_path):
    """`bench=arith` on a run is that run's held-out set, graded greedily by the same grader as the
    training eval. The run's checkpoint is first taught half of its held-out problems, so the accuracy
    is neither 0 nor 1: `gspo eval` must find exactly the problems the trainer's own eval finds right."""
    from gspo.conf import compose_config
    from gspo.evals.arith import make_split
    from gspo.trainer.engines.registry import make_engine
    from gspo.trainer.evaluate import eval_task
    from gspo.trainer.loop import format_prompts
    from gspo.trainer.model.models import load_pretrained
    from gspo.trainer.tasks.registry import build_task

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    ckpt = run / "checkpoints" / "step_000002"
    cfg = compose_config([*TINY, "seed=4"])
    held_out = make_split("test", 8, seed=0, min_digits=1, max_digits=1, ops=cfg.task.ops)
    _memorise(ckpt, held_out[::2])
    (ckpt / "complete.json").unlink()
    _write_manifest(ckpt, 2)  # the edited checkpoint is a new, whole one: its manifest says so

    task = build_task(cfg.task)
    assert [it.prompt for it in task.eval_items] == [p.prompt for p in held_out]
    model, tokenizer = load_pretrained(str(ckpt))
    engine = make_engine(cfg, model, tokenizer)
    prompts = format_prompts(tokenizer, task.eval_items, chat=False)
    texts = engine.generate(prompts, seed=0, greedy=True).texts
    rewards = task.rewards(texts, [it.gold for it in task.eval_items])
    right = {it.prompt for it, r in zip(task.eval_items, rewards, strict=True) if r == 1.0}
    trainer_accuracy = eval_task(engine, task, prompts, seed=0).metrics["accuracy_greedy"]
    assert 0 < trainer_accuracy < 1 and trainer_accuracy == len(right) / 8
    # avg@k: k samples per problem, counted per problem; the accuracy is their mean over all n * k samples
    many, one = (eval_task(engine, task, prompts, seed=0, greedy=False, k=k) for k in (4, 1))
    assert (many.k, len(many.correct), many.correct_greedy) == (4, 8, None) and all(0 <= c <= 4 for c in many.correct)
    assert many.metrics["accuracy"] == sum(many.correct) / 32 and one.metrics["accuracy"] == sum(one.correct) / 8
    assert many.problems == one.problems and many.seconds > 0

    result = gspo.invoke("eval", f"eval.run={run}", "eval.benches=[arith]", "eval.greedy=true")
    assert result.exit_code == 0, (result.exception, result.output)
    rows = {r["metric"]: r for r in _rows(run / "evals.jsonl") if r["benchmark"] == "arith" and "sample" not in r}
    assert rows["pass@1"]["n_problems"] == 8
    assert rows["pass@1"]["value"] == pytest.approx(trainer_accuracy, abs=0)
    samples = _rows(run / "eval_samples.jsonl")
    assert sorted(s["id"] for s in samples) == sorted(it.prompt for it in task.eval_items)
    assert {s["id"] for s in samples if s["verdict"] == "correct"} == right


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["eval.benches=[nope]"], "unknown benchmark 'nope'"),
        (["eval.benches=[aime24]", "+eval.paths.aime24=/nonexistent/aime.jsonl"], "not found"),
        (["eval.benches=[arith]", "eval.k=0"], "eval.k=0"),
        (["eval.benches=[arith]", "frobnicate=1"], "frobnicate"),
        (["eval.benches=[arith]", "eval.k=two"], "eval.k"),
        (["model=hf", "model.name=/nonexistent/checkpoint", "eval.benches=[arith]"], "model path not found"),
        ([], "no benchmark given"),
        (["bench=arith"], "bench: no such key"),
        (["eval.benches=[arith]", "limit=3"], "limit: no such key"),
        (["model=/some/checkpoint", "eval.benches=[arith]"], "model=hf model.name=/some/checkpoint"),
        (["eval.benches=[arith]", "algo=grpo"], "only eval, rollout, logger, seed, device may be set"),
    ],
)
def test_eval_bad_input_is_one_line(gspo, finished_run, args, needle):
    """In-process: each bad input raises GspoError with a one-line message, which is exactly what the
    console script's handler prints as `error: ...` with exit code 2 (any other exception would print a
    traceback); the test below runs that handler for real."""
    has_model = any(a.startswith("model=") for a in args)
    result = gspo.invoke("eval", *([] if has_model else [f"eval.run={finished_run}"]), *args)
    assert isinstance(result.exception, GspoError), (result.exception, result.output)
    assert needle in str(result.exception) and "\n" not in str(result.exception)


@pytest.mark.parametrize(("args", "needle"), [(["eval.benches=[arith]", "eval.k=two"], "eval.k"),
                                              (["bench=arith"], "bench: no such key"),
                                              (["model=hf", "model.name=/nonexistent/checkpoint", "eval.benches=[arith]"],
                                               "model path not found")])
def test_eval_bad_input_through_the_console_script(gspo, finished_run, args, needle):
    has_model = any(a.startswith("model=") for a in args)
    result = gspo.subprocess("eval", *([] if has_model else [f"eval.run={finished_run}"]), *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr


def test_eval_run_without_checkpoint_or_config(gspo, tmp_path):
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    result = gspo.subprocess("eval", f"eval.run={empty}", "eval.benches=[arith]")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "not a run directory" in result.stderr.strip().splitlines()[-1]


def test_train_refuses_eval_run(gspo, finished_run):
    result = gspo.invoke("train", f"eval.run={finished_run}")
    assert isinstance(result.exception, GspoError) and "gspo eval" in str(result.exception)


def test_periodic_eval_and_gspo_eval_write_identical_rows(gspo, tmp_path):
    """One eval spine: a run evaluating `arith` as a benchmark during training, then `gspo eval` of its
    final checkpoint with the same settings, sampled (not greedy): the rows and graded samples of the
    training's last eval and of `gspo eval` are equal, value for value (same weights, same draws)."""
    run = gspo.train(tmp_path, "spine", f"seed={LEARNING_SEED}", "train.steps=2", "eval.benches=[arith]", "eval.k=8")
    training, training_samples = _rows(run / "evals.jsonl"), _rows(run / "eval_samples.jsonl")
    result = gspo.invoke("eval", f"eval.run={run}", "eval.benches=[arith]", "eval.k=8")
    assert result.exit_code == 0, (result.exception, result.output)
    evaluated = _rows(run / "evals.jsonl")[len(training):]
    samples = _rows(run / "eval_samples.jsonl")[len(training_samples):]
    assert {r["metric"] for r in evaluated} == {"pass@1", "pass@8", "avg@8"}
    assert all(r["step"] == 2 and r["temperature"] == 1.0 and r["k"] == 8 and r["n_problems"] == 8 for r in evaluated)
    assert {r["source"] for r in training} == {"train"} and {r["source"] for r in evaluated} == {"gspo eval"}
    assert training[-1]["time"] <= evaluated[0]["time"]

    def how(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in ("source", "time")} for r in rows]

    assert how(training[-len(evaluated):]) == how(evaluated)
    # the samples carry their eval's source and time too: apart from those, the same rows
    assert {s["source"] for s in training_samples} == {"train"} and {s["source"] for s in samples} == {"gspo eval"}
    assert {s["time"] for s in samples} == {evaluated[0]["time"]} and training_samples[-1]["time"] == training[-1]["time"]
    assert how(training_samples[-len(samples):]) == how(samples) and len(samples) == 8 * 8
    assert 0 < sum(s["correct"] for s in samples) < len(samples)  # the values compared are not all 0 or all 1


def test_eval_multirun_and_cfg(gspo, finished_run, tmp_path):
    """`gspo eval -m`: one job per combination, each through the same eval; `--cfg` prints the config."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = len(_rows(run / "evals.jsonl"))
    result = gspo.subprocess("eval", "-m", f"eval.run={run}", "eval.benches=[arith]", "eval.k=1,2", "eval.limit=3",
                             f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = _rows(run / "evals.jsonl")[before:]
    assert {(r["k"], r["n_problems"]) for r in rows} == {(1, 3), (2, 3)}
    result = gspo.invoke("eval", "--cfg", f"eval.run={run}", "eval.benches=[aime24]")
    assert result.exit_code == 0 and "benches: [aime24]" in result.output and f"run: {run}" in result.output


@needs_data
def test_train_periodic_benchmark_eval_logs_eval_bench_metrics(gspo, tmp_path):
    run = gspo.train(tmp_path, "bench", "train.steps=1", "eval.benches=[aime24]",
                     f"+eval.paths.aime24={DATA / 'aime24.jsonl'}", "eval.limit=2", "eval.max_new_tokens=4")
    rows = _rows(run / "metrics.jsonl")
    for r in rows:  # step 0 and the final step
        assert r["eval/aime24/pass@1"] == 0.0 and r["eval/aime24/n_problems"] == 2.0
        assert "eval/arith/accuracy" in r
    evals = _rows(run / "evals.jsonl")
    assert {(e["benchmark"], e["step"]) for e in evals} == {("arith", 0), ("arith", 1), ("aime24", 0), ("aime24", 1)}
    assert len(_rows(run / "eval_samples.jsonl")) == 2 * 2


def test_eval_logs_to_wandb_when_enabled(gspo, finished_run, tmp_path):
    from tests.trainer.run.test_wandb_logger import history_by_step, read_records

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    result = gspo.subprocess("eval", f"eval.run={run}", "eval.benches=[arith]", "eval.greedy=true", "logger.wandb=offline")
    assert result.returncode == 0, result.stderr[-2000:]
    logs = [p for p in (run / "eval" / "wandb").glob("offline-run-*/run-*.wandb")]
    assert len(logs) == 1 and not (run / "wandb").exists()  # apart from the training run's own wandb/
    folder = logs[0].parent
    assert f"W&B offline run: {folder}; upload it with: wandb sync {folder}\n" in result.stderr
    records = read_records(logs[0])
    (record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (record.run_group, record.job_type) == ("finished", "eval")  # the training run's own group
    history = history_by_step(records)
    logged = {k: v for step in history.values() for k, v in step.items() if k.startswith("eval/")}
    (row,) = [r for r in _rows(run / "evals.jsonl") if r["benchmark"] == "arith" and r["step"] == 2
              and r["metric"] == "pass@1" and r["source"] == "gspo eval"]
    assert logged["eval/arith/pass@1"] == row["value"] and logged["eval/arith/n_problems"] == row["n_problems"] == 8


def test_unreachable_hub_fails_at_once_with_one_line(gspo, tmp_path):
    """No network: the CLI goes offline before huggingface_hub loads, so a hub id fails in one line
    instead of a minute of retries (`.invalid` never resolves)."""
    import subprocess

    env = {k: v for k, v in gspo.env.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_ENDPOINT"] = "https://hub.gspo-test.invalid"
    result = subprocess.run(["gspo", "eval", "model=hf", "model.name=some-org/some-model", "eval.benches=[arith]"],
                            cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert "Retrying" not in result.stderr and "Traceback" not in result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert errors == ["error: offline (HF_HUB_OFFLINE=1) and not in the Hugging Face cache: model.name some-org/some-model; "
                      "fetch it first, with the network: gspo fetch task=arith eval.benches=[arith] model=hf "
                      "model.name=some-org/some-model"]  # named before anything loads (trainer/assets.py)
