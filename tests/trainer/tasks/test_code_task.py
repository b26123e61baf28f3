"""task=code: LiveCodeBench / CodeForces problems as training prompts, rewarded by running the code.

Hand-made "model outputs" for real problems of ../shared/data (read by path): abc320_a (stdin: print
A^B + B^A, three tests), LeetCode 3447 clear-digits (functional, two tests), CodeForces 1971A.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gspo.conf import compose_config
from gspo.trainer.loop import format_prompts
from gspo.trainer.model.models import build_char_tokenizer
from gspo.trainer.tasks.registry import build_task

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
LCB, CF = DATA / "lcb_sample.jsonl", DATA / "cf_sample.jsonl"


def _fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


LEYLAND = _fenced("A, B = map(int, input().split())\nprint(A**B + B**A)")
LEYLAND_BUT_9_9 = _fenced("A, B = map(int, input().split())\nprint(0 if A == 9 else A**B + B**A)")  # fails test 2 of 3
CLEAR_DIGITS = _fenced(
    "class Solution:\n"
    "    def clearDigits(self, s: str) -> str:\n"
    "        out = []\n"
    "        for c in s:\n"
    "            out.pop() if c.isdigit() else out.append(c)\n"
    "        return ''.join(out)"
)


def _task(*overrides: str):
    return build_task(compose_config(["task=code", f"task.dataset={LCB}", "task.eval_size=4", *overrides]).task)


def test_correct_code_gets_reward_1_and_anything_else_0():
    task = _task()
    responses = [LEYLAND, LEYLAND_BUT_9_9, "print(320)", CLEAR_DIGITS, _fenced("class Solution: pass")]
    golds = ["abc320_a", "abc320_a", "abc320_a", "3447", "3447"]
    assert task.rewards(responses, golds) == [1.0, 0.0, 0.0, 1.0, 0.0]  # "print(320)": no code block


def test_fraction_reward_is_the_share_of_tests_passed():
    task = _task("task.code_reward=fraction")
    assert task.rewards([LEYLAND, LEYLAND_BUT_9_9], ["abc320_a", "abc320_a"]) == [1.0, pytest.approx(2 / 3)]


def test_prompts_are_the_evals_and_held_out_problems_stay_out_of_training():
    task = _task()
    rows = [json.loads(line) for line in LCB.read_text().splitlines()]
    assert len(task.eval_items) == 4
    train = {it.gold for step in range(20) for it in task.train_items(seed=0, step=step, n=8)}
    assert train and not train & {it.gold for it in task.eval_items} and len(train | {it.gold for it in task.eval_items}) <= len(rows)
    item = next(it for it in task.eval_items + task.train_items(seed=0, step=0, n=1))
    assert item.prompt.startswith("### Question:\n") and item.system.startswith("You are an expert Python programmer")
    tokenizer = build_char_tokenizer("abc")
    assert format_prompts(tokenizer, [item], chat=False, repeat=2) == [item.prompt] * 2


def test_codeforces_layout_is_graded_with_its_own_limits():
    task = build_task(compose_config(["task=code", f"task.dataset={CF}", "task.benchmark=codeforces",
                                      "task.eval_size=2"]).task)
    rows = {str(r["id"]): r for r in map(json.loads, CF.read_text().splitlines())}
    first = next(r for r in rows.values() if not r["interactive"] and not r["may_need_checker"])
    echo_expected = "import sys\n" + "print({!r}[sys.stdin.read()], end='')".format(
        {t["input"]: t["output"] for t in first["tests"]})
    assert task.rewards([_fenced(echo_expected), _fenced("print(-1)")], [str(first["id"])] * 2) == [1.0, 0.0]
    interactive = {str(r["id"]) for r in rows.values() if r["interactive"]}
    drawn = {it.gold for step in range(20) for it in task.train_items(seed=0, step=step, n=8)}
    assert interactive and not interactive & (drawn | {it.gold for it in task.eval_items})


def test_train_on_code_logs_reward_code(gspo, tmp_path):
    run = gspo.train(tmp_path, "code", "task=code", f"task.dataset={LCB}", "task.eval_size=2", "train.steps=1",
                     "rollout.max_new_tokens=8", "train.eval_greedy=false")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["step"] == 1 and rows[1]["reward/code"] == 0.0  # the tiny model writes no code
    assert "eval/code/accuracy" in rows[-1]
