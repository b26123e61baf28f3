"""A new task kind is one module (its builder), one register line and one yaml: a throwaway task trains."""

from __future__ import annotations

import json

import pytest

from gspo.evals.arith import make_split
from gspo.trainer.tasks.registry import TASKS, TRAINS, register_task, task_kind
from gspo.trainer.tasks.task_types import Item, Task, uniform_draw
from tests.conftest import LEARNING_SEED

ONE_STEP = (f"seed={LEARNING_SEED}", "train.steps=1", "train.eval_every=0", "logger.progress=false",
            "logger.samples_per_step=8", "train.eval_greedy=false")


def _digit_count(responses: list[str], golds: list[str]) -> list[float]:
    """The throwaway reward, a rule no built-in grader follows: the response's length mod 5, over 4."""
    return [(len(r) % 5) / 4 for r in responses]


def build_digits(cfg) -> Task:
    """The throwaway task's builder: the arith problems, scored by `_digit_count`."""
    items = [Item(p.prompt, p.gold) for p in make_split("train", 64, seed=1, min_digits=cfg.min_digits,
                                                         max_digits=cfg.max_digits, ops=cfg.ops)]
    return Task(name=cfg.name, eval_items=items[:4], _draw=uniform_draw(items[4:]), _score=_digit_count,
                grader="digits")


def test_a_new_task_kind_is_one_builder_one_register_line_and_one_yaml(gspo, tmp_path):
    conf = tmp_path / "conf"
    (conf / "task").mkdir(parents=True)
    (conf / "task" / "digits.yaml").write_text("kind: digits\nname: digits\n")
    register_task("digits", build_digits, on_tiny=TRAINS)
    try:
        search = f"hydra.searchpath=[file://{conf}]"
        run = gspo.train(tmp_path, "digits", *ONE_STEP, search, "task=digits")
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        # the task's own scorer made the rewards: each sample's reward is _digit_count of its completion
        assert samples and all(s["grader"] == "digits" for s in samples)
        want = _digit_count([s["completion"] for s in samples], [s["gold"] for s in samples])
        assert [s["reward"] for s in samples] == pytest.approx(want, abs=1e-6)
        assert len(set(want)) > 1  # the rule told the completions apart: an arith grade could not pass by chance
        assert "reward/digits" in rows[1] and "eval/digits/accuracy" in rows[0]
        # without the yaml the kind is not a choice: a one-line error naming the known kinds
        bad = gspo.invoke("train", "-q", f"output_dir={tmp_path / 'bad'}", "task.kind=digits")
        assert "task.kind='digits': use one of arith, code, math" in str(bad.exception)
    finally:
        del TASKS["digits"]


def test_every_task_preset_kind_is_registered():
    from gspo.conf.compose import declared

    assert sorted(set(declared()["task"])) == sorted(TASKS) == ["arith", "code", "math"]
    assert task_kind("arith").bench_options["arith"] is not None
