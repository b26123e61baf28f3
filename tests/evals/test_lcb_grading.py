"""LiveCodeBench grading end to end on real sample problems: own solutions pass, broken ones fail."""

from pathlib import Path

import pytest

from gspo.evals.benchmarks import load_benchmark

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="module")
def bench():
    path = DATA / "lcb_sample.jsonl"
    if not path.is_file():
        pytest.skip(f"reference data {path} absent")
    return load_benchmark("livecodebench", path=str(path), timeout_s=2.0, memory_mb=512)


def _problem(bench, qid):
    return next(p for p in bench.problems if p.id == qid)


def _fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nIt runs in O(log n)."


def test_stdin_problem(bench):
    ctz = _problem(bench, "abc336_b")  # trailing zeros of N in binary
    responses = [
        _fenced("n = int(input())\nprint((n & -n).bit_length() - 1)"),
        _fenced("n = int(input())\nprint(bin(n).count('0'))"),  # counts the "0b" prefix's 0 too
        _fenced("n = int(input())\nprint(1 // (n - n))"),
        "I would count the trailing zeros.",  # no code block
    ]
    verdicts = bench.grade(ctz, responses, workers=2)
    assert [v.verdict for v in verdicts] == ["accepted", "wrong_answer", "runtime_error", "wrong_answer"]
    assert [v.reward for v in verdicts] == [1.0, 0.0, 0.0, 0.0]
    assert verdicts[0].detail["passed"] and verdicts[0].detail["n_tests"] == len(ctz.gold)
    assert verdicts[3].detail["message"] == "no code to run" and verdicts[3].detail["tests"] == []


def test_functional_problem(bench):
    words = _problem(bench, "3194")  # findWordsContaining(words, x)
    assert words.meta["fn_name"] == "findWordsContaining"
    good = (
        "class Solution:\n"
        "    def findWordsContaining(self, words: List[str], x: str) -> List[int]:\n"
        "        return [i for i, w in enumerate(words) if x in w]"
    )
    off_by_one = good.replace("[i for", "[i + 1 for")
    verdicts = bench.grade(words, [_fenced(good), _fenced(off_by_one)])
    assert [v.verdict for v in verdicts] == ["accepted", "wrong_answer"]
    metrics = bench.score([verdicts], k=2)
    assert metrics == pytest.approx(
        {"avg@2": 0.5, "pass@1": 0.5, "pass@2": 1.0, "n_problems": 1, "n_skipped": 0}
    )
