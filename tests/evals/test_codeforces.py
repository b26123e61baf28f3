"""CodeForces on the real sample (read from ../shared/data, never copied): the loader and the benchmark
(judged solutions, skipped interactive problems), grading with the problems' own limits, checkers,
interactive problems, the pass rate, and the CodeElo rating against contests small enough to solve by hand."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks import Verdict, load_benchmark
from gspo.evals.codeforces.api import contest_from_api, fetch_contest
from gspo.evals.codeforces.problems import load_codeforces, parse_codeforces_row
from gspo.evals.codeforces.rating import (
    codeelo_rating,
    contest_rank,
    expected_rank,
    load_contests,
    model_score,
    performance_rating,
)
from gspo.evals.graders.codeforces import codeforces_pass_rate, grade_codeforces

DATA = Path(__file__).parents[3] / "shared" / "data"


@pytest.fixture(scope="module")
def cf() -> dict[str, dict]:
    path = DATA / "cf_sample.jsonl"
    if not path.is_file():
        pytest.skip(f"reference data not found at {path}")
    return {p["id"]: p for p in load_codeforces(path)}


def respond(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


SOLUTIONS = {
    "1971A": "for _ in range(int(input())):\n    x, y = map(int, input().split())\n    print(min(x, y), max(x, y))",
    "1971C": ("for _ in range(int(input())):\n    a, b, c, d = map(int, input().split())\n    lo, hi = sorted((a, b))\n"
              "    print('YES' if (lo < c < hi) != (lo < d < hi) else 'NO')"),
    "1971D": ("for _ in range(int(input())):\n    s = input().strip()\n"
              "    cuts = sum(s[i] != s[i + 1] for i in range(len(s) - 1))\n    print(cuts + 1 - ('01' in s))"),
    "1976A": "for _ in range(int(input())):\n    input()\n    s = input().strip()\n    print('YES' if s == ''.join(sorted(s)) else 'NO')",
    "1971E": ("import sys\nfrom bisect import bisect_left\ndata = sys.stdin.buffer.read().split()\npos = 1\nout = []\n"
              "for _ in range(int(data[0])):\n    n, k, q = map(int, data[pos:pos + 3]); pos += 3\n"
              "    a = [0] + list(map(int, data[pos:pos + k])); pos += k\n"
              "    b = [0] + list(map(int, data[pos:pos + k])); pos += k\n    res = []\n"
              "    for d in map(int, data[pos:pos + q]):\n        i = bisect_left(a, d)\n"
              "        res.append(b[i] if a[i] == d else b[i - 1] + (d - a[i - 1]) * (b[i] - b[i - 1]) // (a[i] - a[i - 1]))\n"
              "    pos += q\n    out.append(' '.join(map(str, res)))\nprint('\\n'.join(out))"),
}

# 1971B accepts any rearrangement different from s; a rotation by one differs from the sample answer.
ROTATE = ("for _ in range(int(input())):\n    s = input().strip()\n"
          "    print('NO' if len(set(s)) == 1 else 'YES\\n' + s[1:] + s[0])")
CHECKER_1971B = """import sys
inp, ans, out = (open(p).read().split() for p in sys.argv[1:4])
cases, ok, j = inp[1:], True, 0
it = iter(out)
for s, want in zip(cases, [t for t in ans if t.upper() in ("YES", "NO")]):
    got = next(it, "").upper()
    if got != want.upper():
        ok = False
    elif got == "YES":
        r = next(it, "")
        ok = ok and sorted(r) == sorted(s) and r != s
print(1 if ok and next(it, None) is None else 0)
"""


@pytest.mark.parametrize("pid", sorted(SOLUTIONS))
def test_correct_solutions_pass_under_the_problems_limits(cf, pid):
    result = grade_codeforces(respond(SOLUTIONS[pid]), cf[pid])
    assert result.verdict == "accepted", result.to_dict()
    assert result.notes == []


@pytest.mark.parametrize(("code", "verdict"), [
    ("for _ in range(int(input())):\n    x, y = map(int, input().split())\n    print(max(x, y), min(x, y))", "wrong_answer"),
    ("print(undefined_name)", "runtime_error"),
    ("while True:\n    pass", "time_limit"),
    ("x = [0] * (400 << 20)", "memory_limit"),
    ("for _ in range(:", "compile_error"),
])
def test_broken_solutions_fail_with_the_right_verdict(cf, code, verdict):
    problem = cf["1971A"]
    assert (problem["time_limit_ms"], problem["memory_limit_mb"]) == (1000, 256)
    result = grade_codeforces(respond(code), problem)
    assert result.verdict == verdict, result.to_dict()


def test_time_limit_is_the_problems_own(cf):
    slow = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.4:\n    pass\n" + SOLUTIONS["1971D"]
    assert grade_codeforces(respond(slow), cf["1971D"]).passed  # 2000 ms problem
    assert grade_codeforces(respond(slow), cf["1971D"], time_scale=0.5).verdict == "time_limit"


def test_several_answers_without_a_checker_are_flagged(cf):
    problem = cf["1971B"]
    assert problem["may_need_checker"] and problem.get("checker") is None
    result = grade_codeforces(respond(ROTATE), problem)
    assert result.verdict == "wrong_answer" and result.notes == ["no_checker"]


def test_several_answers_with_a_checker(cf):
    problem = {**cf["1971B"], "checker": CHECKER_1971B}
    assert grade_codeforces(respond(ROTATE), problem).passed
    echo = "for _ in range(int(input())):\n    s = input().strip()\n    print('NO' if len(set(s)) == 1 else 'YES\\n' + s)"
    assert grade_codeforces(respond(echo), problem).verdict == "wrong_answer"
    broken = {**problem, "checker": "raise SystemExit(3)"}
    assert grade_codeforces(respond(ROTATE), broken).verdict == "checker_error"


def test_interactive_problems_are_skipped_and_counted_apart(cf):
    interactive = grade_codeforces(respond("print('! 1')"), cf["1973D"])
    assert interactive.verdict == "skipped" and not interactive.passed
    results = [interactive, grade_codeforces(respond(SOLUTIONS["1971A"]), cf["1971A"]),
               grade_codeforces(respond("print(0)"), cf["1971C"]), grade_codeforces(respond(ROTATE), cf["1971B"])]
    rate = codeforces_pass_rate(results)
    assert rate == {"pass_rate": 1 / 3, "graded": 3, "accepted": 1, "skipped_interactive": 1, "no_checker": 1}


def test_a_response_without_code_is_a_wrong_answer(cf):
    assert grade_codeforces("I think the answer is 42.", cf["1971A"]).verdict == "wrong_answer"


# --- loader -------------------------------------------------------------------------------------------


def test_loader_reads_the_real_sample(cf):
    assert len(cf) == 20
    assert cf["1973D"]["interactive"] and {p for p in cf if cf[p]["may_need_checker"]} == {"1971B", "1973C"}
    assert all(isinstance(t["input"], str) for p in cf.values() for t in p["tests"])


GOOD = {"id": "9A", "contest_id": 9, "index": "A", "problem": "Add.", "time_limit_ms": 1000, "memory_limit_mb": 256,
        "tests": [{"input": "1 2", "output": "3"}], "interactive": False, "may_need_checker": False}


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", r"bad\.jsonl:2: not valid JSON"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "tests"}), r"bad\.jsonl:2: missing field 'tests'"),
    (json.dumps({**GOOD, "time_limit_ms": "1s"}), r"bad\.jsonl:2: field 'time_limit_ms' must be int"),
    (json.dumps({**GOOD, "tests": [{"input": "1"}]}), r"bad\.jsonl:2: test 0 needs"),
    ("[1, 2]", r"bad\.jsonl:2: a problem must be a JSON object"),
])
def test_malformed_rows_are_reported_with_their_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + line + "\n")
    with pytest.raises(GspoError, match=message):
        load_codeforces(path)


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(GspoError, match="no such file"):
        load_codeforces(tmp_path / "nope.jsonl")


def test_hub_layout_rows_are_accepted():
    hub = {"id": "9A", "contest_id": 9, "index": "A", "description": "Add.", "time_limit": 1.5, "memory_limit": 256.0,
           "official_tests": [{"input": "1 2", "output": "3"}], "interaction_format": None,
           "generated_checker": "print(1)"}
    row = parse_codeforces_row(hub, "hub row 0")
    assert (row["time_limit_ms"], row["memory_limit_mb"], row["interactive"]) == (1500, 256, False)
    assert row["may_need_checker"] and row["checker"] == "print(1)" and row["tests"] == hub["official_tests"]


# --- CodeElo rating ---------------------------------------------------------------------------------

ICPC = {"contest_id": 1, "format": "icpc", "penalty_minutes": 10, "participants": [
    {"handle": "a", "rating": 1500, "points": 3, "penalty": 50},
    {"handle": "b", "rating": 1500, "points": 2, "penalty": 30},
    {"handle": "c", "rating": 1500, "points": 2, "penalty": 60},
    {"handle": "d", "rating": 1500, "points": 0, "penalty": 0}]}
CF_ROUND = {"contest_id": 2, "format": "cf", "problems": {"A": 500, "B": 1000}, "participants": [
    {"handle": "x", "rating": 1100, "points": 1000, "penalty": 0},
    {"handle": "y", "rating": 1500, "points": 450, "penalty": 0},
    {"handle": "z", "rating": 1900, "points": 300, "penalty": 0}]}


def test_score_comes_from_the_first_accepted_attempt():
    # A at once; B after one failure (+10 min); C never; later attempts after an accept do not count
    attempts = {"A": [True, False], "B": [False, True], "C": [False, False]}
    assert model_score(attempts, ICPC) == (2, 10)
    assert model_score({"A": [False, True], "B": [False]}, CF_ROUND) == (450, 0)  # 500 - 50
    assert model_score({"B": [False] * 20 + [True]}, CF_ROUND) == (300, 0)  # floor: 30% of 1000


def test_rank_counts_better_participants_and_half_the_ties():
    assert contest_rank(2, 10, ICPC) == 2  # only a (3 solved) is better; b has more penalty
    assert contest_rank(2, 30, ICPC) == 2.5  # tied with b
    assert contest_rank(0, 0, ICPC) == 4.5  # everyone better but d, tied
    assert contest_rank(450, 0, CF_ROUND) == 2.5  # penalty is ignored in scored rounds


def test_performance_rating_matches_closed_forms():
    # one opponent: 1 / (1 + 10^((r - R)/400)) = m - 1  =>  r = R + 400 log10(1/(m - 1) - 1)
    assert performance_rating(1.5, [1500]) == pytest.approx(1500, abs=1e-6)
    assert performance_rating(1.2, [1500]) == pytest.approx(1500 + 400 * math.log10(4), abs=1e-6)
    # n equal opponents: r = R + 400 log10(n/(m - 1) - 1)
    assert performance_rating(2, [1500] * 4) == pytest.approx(1500 + 400 * math.log10(3), abs=1e-6)
    # symmetric fields: the centre
    assert performance_rating(2, [1000, 2000]) == pytest.approx(1500, abs=1e-6)
    assert performance_rating(2.5, [1100, 1500, 1900]) == pytest.approx(1500, abs=1e-6)
    r = performance_rating(2.2, [1234, 1800, 2500, 900])
    assert expected_rank(r, [1234, 1800, 2500, 900]) == pytest.approx(2.2, abs=1e-9)


def test_codeelo_rating_is_the_mean_over_contests():
    attempts = {1: {"A": [True], "B": [False, True], "C": [False]}, 2: {"A": [False, True], "B": [False]}}
    out = codeelo_rating(attempts, {1: ICPC, 2: CF_ROUND})
    assert out["contests"][1]["rank"] == 2 and out["contests"][2]["rank"] == 2.5
    assert out["contests"][1]["rating"] == pytest.approx(1500 + 400 * math.log10(3), abs=1e-6)
    assert out["rating"] == pytest.approx((1500 + 400 * math.log10(3) + 1500) / 2, abs=1e-6)
    with pytest.raises(GspoError, match="no standings for contest 3"):
        codeelo_rating({3: {"A": [True]}}, {1: ICPC})


def test_contest_file_round_trip(tmp_path):
    path = tmp_path / "contests.json"
    path.write_text(json.dumps({"contests": [ICPC, CF_ROUND]}))
    contests = load_contests(path)
    assert set(contests) == {1, 2} and contests[1]["participants"][0]["rating"] == 1500.0
    path.write_text(json.dumps({"contests": [{"contest_id": 1, "format": "ioi", "participants": []}]}))
    with pytest.raises(GspoError, match="format must be"):
        load_contests(path)
    path.write_text(json.dumps({"contests": [{"contest_id": 1}]}))
    with pytest.raises(GspoError, match="not a contest file"):
        load_contests(path)


STANDINGS = {"contest": {"id": 7, "type": "ICPC"}, "problems": [{"index": "A"}, {"index": "B"}], "rows": [
    {"party": {"members": [{"handle": "p"}], "participantType": "CONTESTANT"}, "points": 2.0, "penalty": 40},
    {"party": {"members": [{"handle": "q"}], "participantType": "CONTESTANT"}, "points": 1.0, "penalty": 5},
    {"party": {"members": [{"handle": "v"}], "participantType": "VIRTUAL"}, "points": 2.0, "penalty": 1},
    {"party": {"members": [{"handle": "u"}], "participantType": "CONTESTANT"}, "points": 0.0, "penalty": 0}]}
RATING_CHANGES = [{"handle": "p", "oldRating": 1700, "newRating": 1750},
                  {"handle": "q", "oldRating": 1300, "newRating": 1290}]


def test_api_results_become_a_contest_of_rated_contestants():
    contest = contest_from_api(STANDINGS, RATING_CHANGES)
    assert contest["format"] == "icpc" and contest["contest_id"] == 7
    assert [(p["handle"], p["rating"], p["points"], p["penalty"]) for p in contest["participants"]] == [
        ("p", 1700, 2.0, 40), ("q", 1300, 1.0, 5)]  # virtual and unrated rows dropped
    with pytest.raises(GspoError, match="not supported"):
        contest_from_api({**STANDINGS, "contest": {"id": 8, "type": "IOI"}}, [])


def test_fetch_uses_the_api_once_then_the_cache(tmp_path):
    calls = []

    def fake_urlopen(url, timeout):
        calls.append(url)
        result = STANDINGS if "standings" in url else RATING_CHANGES
        return io.BytesIO(json.dumps({"status": "OK", "result": result}).encode())

    first = fetch_contest(7, tmp_path, opener=fake_urlopen)
    again = fetch_contest(7, tmp_path, opener=lambda *a, **k: pytest.fail("the cache was not used"))
    assert first == again and len(calls) == 2
    assert "contest.standings?contestId=7" in calls[0] and "contest.ratingChanges?contestId=7" in calls[1]


def test_fetch_errors_are_one_clear_line(tmp_path):
    def failing(url, timeout):
        return io.BytesIO(json.dumps({"status": "FAILED", "comment": "contestId: Contest with id 1 not found"}).encode())

    with pytest.raises(GspoError, match="not found"):
        fetch_contest(1, tmp_path, opener=failing)


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
