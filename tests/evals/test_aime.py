"""AIME loaders on the real records in ../shared/data; column auto-detection; malformed rows."""

import json
from pathlib import Path

import pytest

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks import load_benchmark
from gspo.evals.benchmarks.aime import PROMPT_TEMPLATE

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _path(name: str) -> Path:
    path = DATA / f"{name}.jsonl"
    if not path.is_file():
        pytest.skip(f"reference data {path} absent")
    return path


@pytest.mark.parametrize("name", ["aime24", "aime25"])
def test_loads_thirty_problems_with_integer_answers(name):
    bench = load_benchmark(name, path=str(_path(name)))
    assert bench.name == name and len(bench.problems) == 30
    assert len({p.id for p in bench.problems}) == 30
    for p in bench.problems:
        assert p.gold.isdigit() and 0 <= int(p.gold) <= 999
        assert p.prompt.endswith("Please reason step by step, and put your final answer within \\boxed{}.")


def test_first_aime24_problem_and_grading():
    bench = load_benchmark("aime24", path=str(_path("aime24")), limit=2)
    assert len(bench.problems) == 2
    p = bench.problems[0]
    assert p.id == "2024-I-1" and p.gold == "204" and p.prompt.startswith("Every morning Aya")
    verdicts = bench.grade(p, ["... \\boxed{204}", "The answer is 204.", "I give up", "\\boxed{240}"])
    assert [v.verdict for v in verdicts] == ["correct", "correct", "wrong_answer", "wrong_answer"]
    assert [v.reward for v in verdicts] == [1.0, 1.0, 0.0, 0.0]
    other = bench.grade(bench.problems[1], ["x", "x", "x", "x"])
    # avg@4: (2/4 + 0)/2; pass@4: (1 + 0)/2
    assert bench.score([verdicts, other], k=4) == pytest.approx(
        {"avg@4": 0.25, "pass@1": 0.25, "pass@4": 0.5, "n_problems": 2, "n_skipped": 0}
    )


def test_question_column_and_json_list_autodetected(tmp_path):
    path = tmp_path / "aime.json"
    path.write_text(json.dumps([{"question": "What is 6*7?", "answer": 42}]))
    (p,) = load_benchmark("aime25", path=str(path)).problems
    assert p.id == "1" and p.gold == "42" and p.prompt == PROMPT_TEMPLATE.format(problem="What is 6*7?")


def test_solution_column_works_as_gold(tmp_path):
    path = tmp_path / "aime.jsonl"
    path.write_text(json.dumps({"Problem": "p", "solution": "so the sum is \\boxed{\\frac{3}{4}}"}) + "\n")
    bench = load_benchmark("aime24", path=str(path))
    assert [v.correct for v in bench.grade(bench.problems[0], ["The answer is 0.75", "\\boxed{3/5}"])] == [
        True,
        False,
    ]


def test_explicit_keys(tmp_path):
    path = tmp_path / "aime.jsonl"
    path.write_text(json.dumps({"q": "p", "a": "7", "problem": "not this"}) + "\n")
    (p,) = load_benchmark("aime24", path=str(path), problem_key="q", answer_key="a").problems
    assert p.gold == "7" and p.prompt.startswith("p\n")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"answer": "1"}, r"row 2 has no problem text \(looked for problem/question"),
        ({"problem": "p"}, r"row 2 has no answer \(looked for answer"),
        ({"problem": "p", "answer": ""}, r"row 2 has no answer"),
    ],
)
def test_malformed_row_named_by_number(tmp_path, row, message):
    path = tmp_path / "aime.jsonl"
    path.write_text(json.dumps({"problem": "ok", "answer": "1"}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(GspoError, match=message):
        load_benchmark("aime24", path=str(path))
