"""run_code on real LiveCodeBench records (read from ../shared/data, never copied), plus the comparison
and extraction rules of the LiveCodeBench harness."""

from __future__ import annotations

import decimal
import json
import random
import re
from pathlib import Path

import pytest

from gspo.conf.errors import GspoError
from gspo.evals.graders.code import extract_code, lcb_output_matches, run_code, run_code_many, tokens_match

DATA = Path(__file__).parents[3] / "shared" / "data"
LIMITS = {"timeout_s": 2.0, "memory_mb": 256}


@pytest.fixture(scope="module")
def lcb() -> dict[str, dict]:
    path = DATA / "lcb_sample.jsonl"
    if not path.is_file():
        pytest.skip(f"reference data not found at {path}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["question_id"]: row for row in rows}


def problem(lcb: dict, qid: str) -> tuple[list[dict], str | None]:
    """(tests, fn_name) of one record; public_test_cases/metadata may be JSON strings (hub) or parsed."""
    row = lcb[qid]
    tests = row["public_test_cases"]
    tests = json.loads(tests) if isinstance(tests, str) else tests
    meta = row["metadata"]
    meta = json.loads(meta) if isinstance(meta, str) else meta
    return tests, meta.get("func_name")


def grade(lcb: dict, qid: str, code: str, **kw):
    tests, fn_name = problem(lcb, qid)
    return run_code(code, tests, fn_name=fn_name, **{**LIMITS, **kw})


STDIN_SOLUTIONS = {
    # log2 comes from the harness's implicit `from math import *`
    "abc336_b": "n = int(input())\nprint(int(log2(n & -n)))",
    "abc360_a": "s = input()\nprint('Yes' if s.index('R') < s.index('M') else 'No')",
    "abc372_a": "print(input().replace('.', ''))",
    "abc320_a": "a, b = map(int, input().split())\nprint(a**b + b**a)",
    "abc346_a": "input()\na = list(map(int, input().split()))\nprint(*[x * y for x, y in zip(a, a[1:])])",
    "abc388_b": ("import sys\nn, d = map(int, sys.stdin.readline().split())\n"
                 "snakes = [tuple(map(int, sys.stdin.readline().split())) for _ in range(n)]\n"
                 "def main():\n    for k in range(1, d + 1):\n        print(max(t * (l + k) for t, l in snakes))\n"
                 "if __name__ == '__main__':\n    main()"),
}

FUNCTIONAL_SOLUTIONS = {
    "3194": ("class Solution:\n    def findWordsContaining(self, words: List[str], x: str) -> List[int]:\n"
             "        return [i for i, w in enumerate(words) if x in w]"),
    "2824": ("class Solution:\n    def isFascinating(self, n: int) -> bool:\n"
             "        return sorted(f'{n}{2 * n}{3 * n}') == list('123456789')"),
    "3447": ("class Solution:\n    def clearDigits(self, s: str) -> str:\n        stack = []\n"
             "        for c in s:\n            if c.isdigit():\n                stack.pop()\n            else:\n"
             "                stack.append(c)\n        return ''.join(stack)"),
    "3533": ("class Solution:\n    def finalPositionOfSnake(self, n: int, commands: List[str]) -> int:\n"
             "        step = {'UP': -n, 'DOWN': n, 'LEFT': -1, 'RIGHT': 1}\n"
             "        print('debug output must not count')\n        return sum(step[c] for c in commands)"),
    "2902": ("from collections import defaultdict\nclass Solution:\n    def maxSum(self, nums):\n"
             "        best, by_digit = -1, defaultdict(list)\n        for x in nums:\n"
             "            by_digit[max(str(x))].append(x)\n        for xs in by_digit.values():\n"
             "            if len(xs) > 1:\n                best = max(best, sum(sorted(xs)[-2:]))\n        return best"),
}


@pytest.mark.parametrize("qid", sorted(STDIN_SOLUTIONS))
def test_correct_stdin_solutions_pass(lcb, qid):
    result = grade(lcb, qid, STDIN_SOLUTIONS[qid])
    assert result.verdict == "accepted", result.to_dict()
    assert result.passed and len(result.tests) == result.n_tests == len(problem(lcb, qid)[0])


@pytest.mark.parametrize("qid", sorted(FUNCTIONAL_SOLUTIONS))
def test_correct_functional_solutions_pass(lcb, qid):
    result = grade(lcb, qid, FUNCTIONAL_SOLUTIONS[qid])
    assert result.verdict == "accepted", result.to_dict()


@pytest.mark.parametrize(("code", "verdict"), [
    ("n = int(input())\nprint(n.bit_length())", "wrong_answer"),
    ("n = int(input())\nprint(n)\nprint(n)", "wrong_answer"),
    ("n = int(input())\nprint(n // 0)", "runtime_error"),
    ("n = int(input())\nwhile n:\n    n += 1", "time_limit"),
    ("n = int(input()\nprint(n)", "compile_error"),
    ("x = bytearray(1 << 40)", "memory_limit"),
])
def test_broken_stdin_solutions_fail_with_the_right_verdict(lcb, code, verdict):
    result = grade(lcb, "abc336_b", code, timeout_s=0.5)
    assert result.verdict == verdict, result.to_dict()
    assert not result.passed and len(result.tests) == 1, "grading stops at the first failing test"
    assert result.message


@pytest.mark.parametrize(("code", "verdict"), [
    ("class Solution:\n    def isFascinating(self, n):\n        return True", "wrong_answer"),
    ("class Solution:\n    def isFascinating(self, n):\n        return [1, 2][n]", "runtime_error"),
    ("class Solution:\n    def isFascinating(self, n):\n        while True:\n            n += 1", "time_limit"),
    ("class Solution:\n    def isFascinating(self, n)\n        return True", "compile_error"),
    ("class Solution:\n    def somethingElse(self, n):\n        return True", "runtime_error"),
])
def test_broken_functional_solutions_fail_with_the_right_verdict(lcb, code, verdict):
    result = grade(lcb, "2824", code, timeout_s=0.5)
    assert result.verdict == verdict, result.to_dict()


def test_wrong_answer_on_a_later_test_records_the_earlier_ones(lcb):
    result = grade(lcb, "2824", "class Solution:\n    def isFascinating(self, n):\n        return True")
    assert [t.verdict for t in result.tests] == ["accepted", "wrong_answer"]
    assert result.tests[1].stdout == "true" and "false" in result.message


def test_tuples_count_as_lists_and_module_functions_work(lcb):
    tests, _ = problem(lcb, "3194")
    code = "def findWordsContaining(words, x):\n    return tuple(i for i, w in enumerate(words) if x in w)"
    assert run_code(code, tests, fn_name="findWordsContaining", **LIMITS).passed


def test_per_test_detail_has_times_and_output(lcb):
    result = grade(lcb, "abc320_a", STDIN_SOLUTIONS["abc320_a"])
    first = result.tests[0]
    assert first.stdout == "320\n" and first.exit_code == 0
    assert 0 < first.cpu_s < LIMITS["timeout_s"] and first.wall_s > 0
    assert json.loads(json.dumps(result.to_dict()))["passed"] is True


def test_prelude_and_system_exit_follow_the_harness(lcb):
    tests, _ = problem(lcb, "abc336_b")
    uses_prelude = STDIN_SOLUTIONS["abc336_b"]
    assert run_code(uses_prelude, tests, **LIMITS).passed
    assert run_code(uses_prelude, tests, prelude=False, **LIMITS).verdict == "runtime_error"  # NameError
    exits = "n = int(input())\nprint((n & -n).bit_length() - 1)\nexit(1)"
    assert run_code(exits, tests, **LIMITS).passed  # the harness catches SystemExit
    assert run_code(exits, tests, prelude=False, **LIMITS).verdict == "runtime_error"


def test_keep_going_after_a_failure_when_asked(lcb):
    tests, _ = problem(lcb, "abc336_b")
    result = run_code("print(1)", tests, stop_on_failure=False, **LIMITS)
    assert [t.verdict for t in result.tests] == ["wrong_answer", "accepted", "wrong_answer"]
    assert result.verdict == "wrong_answer"


def test_no_code_is_a_wrong_answer_not_a_crash():
    assert run_code(extract_code("I cannot solve this."), [{"input": "", "output": "1"}], **LIMITS).verdict == (
        "wrong_answer")


def test_bad_tests_are_one_clear_error():
    with pytest.raises(GspoError, match="test 0"):
        run_code("print(1)", [{"input": "1"}], **LIMITS)
    with pytest.raises(GspoError, match="fn_name"):
        run_code("print(1)", [{"input": "1", "output": "1", "testtype": "functional"}], **LIMITS)


def test_run_code_many_in_parallel(lcb):
    items = [{"code": STDIN_SOLUTIONS[q], "tests": problem(lcb, q)[0], **LIMITS} for q in sorted(STDIN_SOLUTIONS)]
    items.append({"code": "print(0)", "tests": problem(lcb, "abc320_a")[0], **LIMITS})
    verdicts = [r.verdict for r in run_code_many(items, workers=2)]
    assert verdicts == ["accepted"] * len(STDIN_SOLUTIONS) + ["wrong_answer"]


@pytest.mark.parametrize(("output", "expected", "same"), [
    ("3\n", "3", True),
    ("  1 2 \n\n", "1 2", True),
    ("1.50 2\n", "1.5 2.0", True),  # exact decimals, not a tolerance
    ("0.30000000000000004", "0.3", False),
    ("1e2", "100", True),
    ("Yes", "yes", False),
    ("1 2", "1\n2", False),  # line counts must match
    ("a b", "a  b", False),  # a non-numeric line must match exactly after strip
    ("50000000000000000", "50000000000000001", False),
])
def test_lcb_comparison(output, expected, same):
    assert lcb_output_matches(output, expected) is same


def test_token_comparison_ignores_layout():
    assert tokens_match("1 2\n3\n", "1\n2 3")
    assert not tokens_match("1 2", "1 2 3")


def _lists_lcb(output: str, expected: str) -> bool:
    """LiveCodeBench's comparison as lists (what the grader did before it streamed), the reference."""
    def numbers(line):
        try:
            got = [decimal.Decimal(t) for t in line.split()]
        except (decimal.InvalidOperation, ValueError):
            return None
        return got if all(n.is_finite() for n in got) else None
    got, want = ([x.strip() for x in t.strip().split("\n")] for t in (output, expected))
    return len(got) == len(want) and all(a == b or (numbers(a) is not None and numbers(a) == numbers(b))
                                         for a, b in zip(got, want, strict=True))


def test_streamed_comparisons_agree_with_the_lists():
    """2,000 random texts of numbers, words, NaNs and whitespace (Unicode included): the streamed comparison
    gives the lists' verdict, and the token one testlib's (ASCII whitespace only)."""
    rng = random.Random(0)
    parts = ["1", "1.0", "01", "2", "1e0", "nan", "sNaN", "a", " ", "  ", "\n", "\t", "\r\n", "\u00a0", "\u3000", ""]
    for _ in range(2000):
        a, b = ("".join(rng.choice(parts) for _ in range(rng.randint(0, 6))) for _ in range(2))
        assert lcb_output_matches(a, b) is _lists_lcb(a, b), (a, b)
        assert tokens_match(a, b) is (re.split(r"[ \t\r\n]+", a.strip(" \t\r\n")) == re.split(r"[ \t\r\n]+", b.strip(" \t\r\n"))), (a, b)


@pytest.mark.parametrize(("response", "code"), [
    ("text\n```python\nprint(1)\n```\nmore", "print(1)"),
    ("```python\nfirst()\n```\nthen\n```python\nsecond()\n```", "second()"),
    ("```\nplain()\n```", "plain()"),
    ("no fences", None),
    ("```python\nunterminated()", None),
])
def test_extract_code_takes_the_last_block(response, code):
    assert extract_code(response) == code
