"""grade_math on the real AIME answers and the answer forms models write; off the main thread too."""

import doctest
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import gspo.evals.graders.math as math_mod
from gspo.evals.graders.math import grade_math, grade_math_batch, math_reward

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _aime_rows(name: str) -> list[dict]:
    path = DATA / f"{name}.jsonl"
    if not path.is_file():
        pytest.skip(f"reference data {path} absent")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["aime24", "aime25"])
def test_real_aime_answers_boxed_right_and_off_by_one_wrong(name):
    rows = _aime_rows(name)
    assert len(rows) == 30
    for row in rows:
        gold = row["answer"]
        assert grade_math(f"Thus the total is \\boxed{{{gold}}}.", gold), row["id"]
        assert not grade_math(f"Thus the total is \\boxed{{{int(gold) + 1}}}.", gold), row["id"]


@pytest.mark.parametrize(
    "response",
    [
        "so she walks 204 minutes. \\boxed{204}",
        "The answer is 204.",
        "The final answer is $\\boxed{204}$",
        "**Answer:** 204",
        "Final answer: 204",
        "$$\\boxed{204}$$",
    ],
)
def test_answer_forms_accepted(response):
    assert grade_math(response, "204")


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("The answer is $\\frac{1}{2}$.", "0.5"),
        ("The answer is 0.5", "\\frac{1}{2}"),
        ("\\boxed{\\dfrac{1}{2}}", "1/2"),
        ("\\boxed{2x+2}", "2(x+1)"),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\sqrt{2}/2"),
    ],
)
def test_equivalent_forms(response, gold):
    assert grade_math(response, gold)


@pytest.mark.parametrize(
    "response",
    [
        "",
        "   ",
        "I don't know.",
        "Maybe 204 apples, or 3 oranges.",  # numbers, but no answer is stated
        "\\boxed{}",
        "\\boxed{203}",
    ],
)
def test_no_or_wrong_answer_is_false_not_an_error(response):
    assert grade_math(response, "204") is False


def test_missing_gold_is_false():
    assert grade_math("\\boxed{204}", "") is False
    assert grade_math("\\boxed{204}", None) is False


def test_reward_is_float_one_or_zero():
    assert math_reward("\\boxed{113}", "113") == 1.0
    assert math_reward("\\boxed{112}", "113") == 0.0


def test_off_main_thread_gives_the_same_verdicts():
    cases = [("\\boxed{204}", "204", True), ("The answer is 0.5", "\\frac{1}{2}", True), ("no", "204", False)]

    def grade(case):
        assert threading.current_thread() is not threading.main_thread()
        return grade_math(case[0], case[1])

    with ThreadPoolExecutor(max_workers=3) as pool:
        got = list(pool.map(grade, cases * 2))
    assert got == [c[2] for c in cases] * 2


def test_batch_with_worker_processes_matches_serial():
    responses = ["\\boxed{70}", "The answer is 588.", "nothing", "\\boxed{17}"]
    golds = ["70", "588", "16", "117"]
    assert grade_math_batch(responses, golds, workers=2) == [True, True, False, False]
    assert grade_math_batch(responses, golds) == [True, True, False, False]


def test_docstring_examples():
    result = doctest.testmod(math_mod)
    assert result.attempted >= 5 and result.failed == 0
