"""The embedded task: worked solutions, the exact grader, and the held-out split (never trained on)."""

from __future__ import annotations

import zlib

import pytest

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.evals.arith import ArithProblem, extract_answer, grade_arith, is_held_out, make_split
from gspo.trainer.tasks.registry import build_task
from tests.conftest import TINY

ONE_DIGIT = {"min_digits": 1, "max_digits": 1, "ops": "+*"}


def test_worked_solutions_by_hand():
    # 95+7: 5+7=12 (carry 1), 9+0+1=10 (carry 1), final carry gives a leading 1
    assert ArithProblem(95, 7, "+").solution == "5+7+0=12|9+0+1=10|#102"
    assert ArithProblem(482, 7, "*").solution == "2*7+0=14|8*7+1=57|4*7+5=33|#3374"
    assert ArithProblem(95, 7, "+").prompt == "95+7=" and ArithProblem(482, 7, "*").gold == "3374"


@pytest.mark.parametrize(("response", "ok"), [
    ("5+7+0=12|9+0+1=10|#102", True),
    ("#0102", True),  # the integer, not the string
    ("#99|#102", True),  # the last answer counts
    ("#102|#99", False),
    ("102", False),  # no answer mark: nothing to grade
    ("#", False),
    ("5+7+0=12|#103", False),
])
def test_grader_reads_the_integer_after_the_last_mark(response, ok):
    assert grade_arith(response, "102") is ok


def test_extract_answer():
    assert extract_answer("1+1+0=02|#2") == "2" and extract_answer("no mark") is None


def test_held_out_is_one_bucket_of_ten_by_prompt_hash():
    # all 153 one-digit problems: 81 sums, 72 products by 2..9; 21 of them hash into the held-out bucket
    every = [ArithProblem(a, b, "+") for a in range(1, 10) for b in range(1, 10)]
    every += [ArithProblem(a, b, "*") for a in range(1, 10) for b in range(2, 10)]
    held = [p for p in every if is_held_out(p)]
    assert len(every) == 153 and len(held) == 21
    assert all(zlib.crc32(p.prompt.encode()) % 10 == 0 for p in held)
    assert {"1+7=", "4+1=", "7+7=", "3*9=", "5*7="} <= {p.prompt for p in held}


def test_splits_are_disjoint_and_deterministic():
    test = make_split("test", 21, seed=0, **ONE_DIGIT)
    assert all(is_held_out(p) for p in test) and len(set(test)) == 21
    assert [p.prompt for p in test[:5]] == ["4+1=", "7+7=", "1+7=", "3*9=", "5*7="]
    for split in ("sft", "train"):
        other = make_split(split, 100, seed=0, **ONE_DIGIT)
        assert not any(is_held_out(p) for p in other) and len(set(other)) == 100
    assert make_split("sft", 10, seed=0, **ONE_DIGIT) != make_split("train", 10, seed=0, **ONE_DIGIT)
    assert make_split("test", 5, seed=0, **ONE_DIGIT) == make_split("test", 5, seed=0, **ONE_DIGIT)
    with pytest.raises(GspoError, match="held-out split with 1..1 digits and ops .* holds 21 distinct problems"):
        make_split("test", 22, seed=0, **ONE_DIGIT)


def test_the_training_task_never_draws_a_held_out_problem():
    task = build_task(compose_config(TINY).task)
    assert [it.prompt for it in task.eval_items] == [p.prompt for p in make_split("test", 8, seed=0, **ONE_DIGIT)]
    held = {it.prompt for it in task.eval_items}
    drawn = [it for step in range(1, 60) for it in task.train_items(seed=0, step=step, n=8)]
    assert not any(it.prompt in held for it in drawn)
    assert len({it.prompt for it in drawn}) > 100  # the draw covers the training space, not a few items
    assert task.rewards([ArithProblem(*_parse(it.prompt)).solution for it in drawn[:20]],
                        [it.gold for it in drawn[:20]]) == [1.0] * 20
    assert task.train_items(seed=0, step=3, n=8) == task.train_items(seed=0, step=3, n=8)
    assert task.train_items(seed=0, step=3, n=8) != task.train_items(seed=1, step=3, n=8)


def _parse(prompt: str) -> tuple[int, int, str]:
    op = "+" if "+" in prompt else "*"
    a, b = prompt.rstrip("=").split(op)
    return int(a), int(b), op
