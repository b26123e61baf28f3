"""`gspo train model=hf task=math`: a Hugging Face model from a local folder and a math JSONL dataset.

No hub access: the "hub model" is a tiny Qwen3 with random weights and a printable-ASCII character
tokenizer, saved with save_pretrained, which is exactly what from_pretrained reads for a real model.
The reward is math-verify through gspo.evals.grade_math, the grader `gspo eval` uses.
"""

from __future__ import annotations

import json
import string

import pytest

from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf_model")
    tokenizer = build_char_tokenizer(string.printable)
    model = build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=1, intermediate_size=64, num_heads=2,
                             num_kv_heads=1, seed=0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_train_local_hf_model_on_a_math_jsonl(gspo, local_model, tmp_path):
    data = tmp_path / "math.jsonl"
    rows = [{"question": f"What is {a}+{b}?", "solution": str(a + b)} for a in range(4) for b in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = gspo.invoke(
        "train", "-q", "model=hf", f"model.name={local_model}", "model.dtype=float32",
        "model.gradient_checkpointing=false", "model.chat_template=false", "task=math", f"task.dataset={data}",
        "task.question_field=question", "task.answer_field=solution", "task.eval_size=2", "train.steps=1",
        "train.prompts_per_step=2", "train.group_size=2", "train.minibatches=2", "rollout.max_new_tokens=8",
        "logger=local", f"output_dir={tmp_path / 'runs'}", "run_id=math",
    )
    assert result.exit_code == 0, (result.exception, result.output)
    run = tmp_path / "runs" / "math"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    assert "reward/math" in metrics[1] and 0.0 <= metrics[1]["reward/math"] <= 1.0
    assert "eval/math/accuracy" in metrics[0] and "eval/math/accuracy" in metrics[1]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples[0]["prompt"].startswith("What is ") and "\\boxed{}" in samples[0]["prompt"]
    assert (run / "checkpoints" / "latest").exists()


TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."


@pytest.fixture(scope="module")
def boxed_model(local_model, tmp_path_factory):
    """The local model taught to answer every question of ROWS with `\\boxed{3}` and its eos."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("boxed") / "model"
    shutil.copytree(local_model, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(10):
        for row in ROWS:
            prompt = tokenizer(TEMPLATE.format(question=row["question"]))["input_ids"]
            ids = torch.tensor([prompt + tokenizer("\\boxed{3}")["input_ids"] + [tokenizer.eos_token_id]])
            labels = ids.clone()
            labels[:, : len(prompt)] = -100
            model(input_ids=ids, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad()
    model.save_pretrained(folder)
    return folder


ROWS = [{"question": f"Question {i}?", "solution": "3" if i % 3 else "5"} for i in range(12)]


def test_math_reward_and_eval_are_the_graders_verdicts(gspo, boxed_model, tmp_path):
    """A model that always answers \\boxed{3}: the reward of each completion is 1 exactly when the gold is 3,
    so reward/math and eval/math/accuracy are the share of 3s among the step's and the held-out golds."""
    from gspo.conf import compose_config
    from gspo.trainer.tasks.registry import build_task

    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    task_args = ["task=math", f"task.dataset={data}", "task.question_field=question", "task.answer_field=solution",
                 "task.eval_size=3"]
    result = gspo.invoke(
        "train", "-q", "model=hf", f"model.name={boxed_model}", "model.dtype=float32",
        "model.gradient_checkpointing=false", "model.chat_template=false", *task_args, "train.steps=1",
        "train.prompts_per_step=4", "train.group_size=2", "train.minibatches=2", "rollout.max_new_tokens=12",
        "rollout.temperature=0.1", "logger=local", "logger.samples_per_step=8", "seed=1",
        f"output_dir={tmp_path / 'runs'}", "run_id=boxed",
    )
    assert result.exit_code == 0, (result.exception, result.output)
    run = tmp_path / "runs" / "boxed"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8 and all(s["completion"].strip() == "\\boxed{3}" for s in samples)
    assert [s["reward"] for s in samples] == [1.0 if s["gold"] == "3" else 0.0 for s in samples]
    share = sum(s["gold"] == "3" for s in samples) / 8
    assert 0 < share < 1, "seed=1 draws prompts with both golds"
    assert metrics[1]["reward/math"] == share and metrics[1]["reward/mean"] == share
    held_out = build_task(compose_config(["model=hf", f"model.name={boxed_model}", *task_args]).task).eval_items
    want = sum(it.gold == "3" for it in held_out) / 3
    assert metrics[0]["eval/math/accuracy"] == pytest.approx(want, abs=0)


def test_math_dataset_missing_question_field_names_it(gspo, local_model, tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    result = gspo.invoke("train", "model=hf", f"model.name={local_model}", "task=math", f"task.dataset={data}",
                         "task.question_field=question", f"output_dir={tmp_path / 'runs'}")
    assert result.exit_code != 0
    assert "row 1 has no field 'question'" in str(result.exception)
