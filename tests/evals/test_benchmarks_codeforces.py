"""The codeforces benchmark on the real sample: loading, judged solutions, skipped interactive, rating."""

import json
from pathlib import Path

import pytest

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks import Verdict, load_benchmark

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

MIN_MAX = "t = int(input())\nfor _ in range(t):\n    x, y = map(int, input().split())\n    print(min(x, y), max(x, y))"


def _path() -> Path:
    path = DATA / "cf_sample.jsonl"
    if not path.is_file():
        pytest.skip(f"reference data {path} absent")
    return path


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("codeforces", path=str(_path()))


def _fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_loads_sample_with_limits(bench):
    assert len(bench.problems) == 20
    a = next(p for p in bench.problems if p.id == "1971A")
    assert a.meta["time_limit_ms"] == 1000 and a.meta["memory_limit_mb"] == 256
    assert a.meta["contest_id"] == 1971 and a.meta["index"] == "A"
    assert a.prompt.startswith("### Question:\n") and "Read the inputs from stdin" in a.prompt
    assert [p.id for p in bench.problems if p.meta["interactive"]] == ["1973D"]


def test_grading_and_score_with_skipped_interactive(bench):
    a = next(p for p in bench.problems if p.id == "1971A")
    d = next(p for p in bench.problems if p.id == "1973D")
    a_verdicts = bench.grade(
        a, [_fenced(MIN_MAX), _fenced(MIN_MAX.replace("min(x, y), max", "max(x, y), min"))]
    )
    assert [v.verdict for v in a_verdicts] == ["accepted", "wrong_answer"]
    d_verdicts = bench.grade(d, [_fenced("print(1)")] * 2)
    assert [v.verdict for v in d_verdicts] == ["skipped", "skipped"]
    assert bench.score([a_verdicts, d_verdicts], k=2) == pytest.approx(
        {"avg@2": 0.5, "pass@1": 0.5, "pass@2": 1.0, "n_problems": 1, "n_skipped": 1, "n_no_checker": 0}
    )


def test_rating_from_a_contest_file(tmp_path):
    contests = tmp_path / "contests.json"
    participants = [
        {"handle": "p", "rating": 1500, "points": 2, "penalty": 30},
        {"handle": "q", "rating": 1500, "points": 0, "penalty": 0},
    ]
    contests.write_text(
        json.dumps({"contests": [{"contest_id": 1971, "format": "icpc", "participants": participants}]})
    )
    bench = load_benchmark("codeforces", path=str(_path()), limit=2, contests=str(contests))
    assert [p.id for p in bench.problems] == ["1971A", "1971B"]
    ok, bad = Verdict(True, 1.0, "accepted"), Verdict(False, 0.0, "wrong_answer")
    # solves A only: rank 1 + 1 better = 2; 1 + 2 / (1 + 10^((r - 1500)/400)) = 2 gives r = 1500
    assert bench.score([[ok, bad], [bad, bad]], k=2)["rating"] == pytest.approx(1500, abs=1e-6)


def test_malformed_row_named_by_number(tmp_path):
    rows = [json.loads(line) for line in _path().read_text().splitlines()[:2]]
    del rows[1]["time_limit_ms"]
    path = tmp_path / "cf.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(GspoError, match=r"row 2: missing field 'time_limit_ms'"):
        load_benchmark("codeforces", path=str(path))


def test_row_without_tests_is_an_error(tmp_path):
    row = {**json.loads(_path().read_text().splitlines()[0]), "tests": []}
    path = tmp_path / "cf.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(GspoError, match="row 1 has no tests"):
        load_benchmark("codeforces", path=str(path))
