"""CodeForces: problems in the open-r1/codeforces layout, grading, pass rate, CodeElo-style rating.

Problems (one JSON object per line): id, contest_id, index, problem, time_limit_ms, memory_limit_mb,
tests [{"input", "output"}], interactive, may_need_checker, optional checker (Python source). Rows with
the Hugging Face open-r1/codeforces names (time_limit in seconds, memory_limit, official_tests,
generated_checker, interaction_format, description) are accepted too.

Grading: each test under the problem's own limits (time_limit_ms as the CPU limit per test), output
compared as whitespace tokens (testlib's default checker). Interactive problems are never run: their
verdict is "skipped" and the pass rate counts them apart. Problems that may accept several answers are
judged by their checker when the row has one, else by token comparison with the note "no_checker".

Rating (CodeElo, Quan et al. 2025, arXiv 2501.01257), per contest:
1. score from the first accepted attempt per problem, all submitted at minute 0:
   "icpc" format (ICPC rules: Educational, Div. 3, Div. 4 rounds): solved count, then penalty =
   penalty_minutes (default 10) per failed attempt before the accepted one;
   "cf" format (scored rounds): sum over solved problems of max(0.3 * points, points - 50 * failed);
2. rank among the contest's rated participants: 1 + #better + 0.5 * #tied (a tie counts as a draw);
3. the performance rating r with expected rank 1 + sum_j 1 / (1 + 10^((r - r_j) / 400)) equal to that
   rank (r_j: participants' ratings before the contest), by bisection in [-1000, 5000];
then the mean over contests. IOI-style contests are not supported.

Contest file (JSON): {"contests": [{"contest_id": 1971, "format": "icpc" | "cf", "penalty_minutes": 10,
"problems": {"A": 500, ...} (points, "cf" format only), "participants": [{"handle": "x",
"rating": 1500 (before the contest), "points": 3 (solved count for icpc), "penalty": 57 (minutes,
icpc)}, ...]}, ...]}. `fetch_contest` builds the same from the Codeforces API and caches it.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.evals.graders.code import CodeResult, extract_code, run_code

_FIELDS = {"id": str, "contest_id": int, "index": str, "problem": str, "time_limit_ms": int,
           "memory_limit_mb": int, "tests": list, "interactive": bool, "may_need_checker": bool}
_RATING_RANGE = (-1000.0, 5000.0)
_API = "https://codeforces.com/api"


def load_codeforces(path: str | Path) -> list[dict]:
    """Problems from a JSON-lines file; a malformed row raises GspoError naming its line number."""
    path = Path(path)
    if not path.is_file():
        raise GspoError(f"{path}: no such file")
    problems = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise GspoError(f"{path}:{number}: not valid JSON ({e.msg})") from None
            problems.append(parse_codeforces_row(row, f"{path}:{number}"))
    return problems


def parse_codeforces_row(row: object, where: str) -> dict:
    """Validate one problem (either layout) and return it in the local layout."""
    if not isinstance(row, dict):
        raise GspoError(f"{where}: a problem must be a JSON object")
    row = {**_from_hub_names(row), **row}
    for name, kind in _FIELDS.items():
        if name not in row:
            raise GspoError(f"{where}: missing field {name!r}")
        if not isinstance(row[name], kind) or (kind is int and isinstance(row[name], bool)):
            raise GspoError(f"{where}: field {name!r} must be {kind.__name__}, got {type(row[name]).__name__}")
    for i, test in enumerate(row["tests"]):
        if not (isinstance(test, dict) and isinstance(test.get("input"), str) and isinstance(test.get("output"), str)):
            raise GspoError(f"{where}: test {i} needs string fields 'input' and 'output'")
    if row.get("checker") is not None and not isinstance(row["checker"], str):
        raise GspoError(f"{where}: field 'checker' must be Python source (a string)")
    return row


def _from_hub_names(row: dict) -> dict:
    """Local names for a row of Hugging Face open-r1/codeforces (only those that are present)."""
    out: dict = {}
    if isinstance(row.get("time_limit"), int | float):
        out["time_limit_ms"] = round(row["time_limit"] * 1000)
    if isinstance(row.get("memory_limit"), int | float):
        out["memory_limit_mb"] = int(row["memory_limit"])
    if "official_tests" in row:
        out["tests"] = row["official_tests"]
    if "generated_checker" in row:
        out["checker"] = row["generated_checker"]
        out["may_need_checker"] = row["generated_checker"] is not None
    if "interaction_format" in row:
        out["interactive"] = bool(row["interaction_format"])
    if "description" in row:
        out["problem"] = row["description"]
    return out


def grade_codeforces(response: str, problem: dict, *, extract: bool = True, time_scale: float = 1.0,
                     backend: str | None = None) -> CodeResult:
    """Judge a model response (or, with extract=False, a program) on one problem."""
    if problem["interactive"]:
        return CodeResult("skipped", n_tests=len(problem["tests"]), message="interactive problem: not graded")
    code = extract_code(response) if extract else response
    if code is None:
        return CodeResult("wrong_answer", n_tests=len(problem["tests"]), message="no code block in the response")
    checker = problem.get("checker")
    result = run_code(code, problem["tests"], timeout_s=problem["time_limit_ms"] / 1000 * time_scale,
                      memory_mb=problem["memory_limit_mb"], prelude=False, compare="tokens", checker=checker,
                      backend=backend)
    if problem["may_need_checker"] and checker is None:
        result.notes.append("no_checker")
    return result


def codeforces_pass_rate(results: list[CodeResult]) -> dict[str, float]:
    """Share of graded (non-interactive) results accepted; skipped and no-checker results counted apart."""
    graded = [r for r in results if r.verdict != "skipped"]
    accepted = sum(r.passed for r in graded)
    return {"pass_rate": accepted / len(graded) if graded else 0.0, "graded": len(graded), "accepted": accepted,
            "skipped_interactive": len(results) - len(graded),
            "no_checker": sum("no_checker" in r.notes for r in graded)}


def model_score(attempts: dict[str, list[bool]], contest: dict) -> tuple[float, float]:
    """(points, penalty) of a model whose attempts per problem index are given in submission order."""
    points = penalty = 0.0
    for index, passed in attempts.items():
        if True not in passed:
            continue
        failed = passed.index(True)
        if contest["format"] == "icpc":
            points += 1
            penalty += contest.get("penalty_minutes", 10) * failed
        else:
            worth = contest["problems"][index]
            points += max(0.3 * worth, worth - 50 * failed)
    return points, penalty


def contest_rank(points: float, penalty: float, contest: dict) -> float:
    """1 + participants strictly better + half of those tied (penalty only breaks icpc ties)."""
    use_penalty = contest["format"] == "icpc"
    better = tied = 0
    for p in contest["participants"]:
        mine, theirs = (points, -penalty if use_penalty else 0.0), (p["points"], -p["penalty"] if use_penalty else 0.0)
        better += theirs > mine
        tied += theirs == mine
    return 1 + better + 0.5 * tied


def expected_rank(rating: float, ratings: list[float]) -> float:
    """Elo expected rank: 1 + sum_j P(participant j beats a player of this rating)."""
    return 1 + sum(1 / (1 + 10 ** ((rating - r) / 400)) for r in ratings)


def performance_rating(rank: float, ratings: list[float]) -> float:
    """The rating whose expected rank among `ratings` equals `rank` (bisection; clamped to the range)."""
    lo, hi = _RATING_RANGE
    for _ in range(100):
        mid = (lo + hi) / 2
        if expected_rank(mid, ratings) > rank:  # expected rank falls as rating rises
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def codeelo_rating(attempts: dict[int, dict[str, list[bool]]], contests: dict[int, dict]) -> dict:
    """Mean performance rating over contests; attempts[contest_id][problem index] = [passed, ...]."""
    per_contest = {}
    for contest_id, tries in attempts.items():
        if contest_id not in contests:
            raise GspoError(f"no standings for contest {contest_id}; add it to the contest file or fetch it")
        contest = contests[contest_id]
        points, penalty = model_score(tries, contest)
        rank = contest_rank(points, penalty, contest)
        rating = performance_rating(rank, [p["rating"] for p in contest["participants"]])
        per_contest[contest_id] = {"points": points, "penalty": penalty, "rank": rank, "rating": rating}
    mean = sum(c["rating"] for c in per_contest.values()) / len(per_contest) if per_contest else math.nan
    return {"rating": mean, "contests": per_contest}


def load_contests(path: str | Path) -> dict[int, dict]:
    """Contest standings and ratings from a local JSON file (format in the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise GspoError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        contests = {c["contest_id"]: c for c in data["contests"]}
        for c in contests.values():
            if c["format"] not in ("icpc", "cf"):
                raise GspoError(f"{path}: contest {c['contest_id']}: format must be 'icpc' or 'cf'")
            c["participants"] = [{**p, "rating": float(p["rating"]), "points": float(p["points"]),
                                  "penalty": float(p.get("penalty", 0))} for p in c["participants"]]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise GspoError(f"{path}: not a contest file ({type(e).__name__}: {e})") from None
    return contests


def contest_from_api(standings: dict, rating_changes: list[dict]) -> dict:
    """Local contest record from the API's contest.standings and contest.ratingChanges results."""
    kind = standings["contest"]["type"]
    if kind not in ("CF", "ICPC"):
        raise GspoError(f"contest {standings['contest']['id']}: {kind} contests are not supported")
    old = {c["handle"]: c["oldRating"] for c in rating_changes}
    participants = []
    for row in standings["rows"]:
        members = row["party"]["members"]
        if row["party"]["participantType"] == "CONTESTANT" and len(members) == 1 and members[0]["handle"] in old:
            handle = members[0]["handle"]
            participants.append({"handle": handle, "rating": old[handle], "points": row["points"],
                                 "penalty": row.get("penalty", 0)})
    return {"contest_id": standings["contest"]["id"], "format": kind.lower(), "penalty_minutes": 10,
            "problems": {p["index"]: p.get("points", 0) for p in standings["problems"]}, "participants": participants}


def fetch_contest(contest_id: int, cache_dir: str | Path,
                  opener: Callable = urllib.request.urlopen) -> dict:
    """Standings and old ratings of one contest from the Codeforces API, cached as JSON (needs network)."""
    cache = Path(cache_dir) / f"codeforces_contest_{contest_id}.json"
    if cache.is_file():
        return json.loads(cache.read_text(encoding="utf-8"))
    standings = _api(opener, f"contest.standings?contestId={contest_id}&showUnofficial=false")
    contest = contest_from_api(standings, _api(opener, f"contest.ratingChanges?contestId={contest_id}"))
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(contest), encoding="utf-8")
    return contest


def _api(opener: Callable, method: str) -> dict | list:
    try:
        with opener(f"{_API}/{method}", timeout=60) as response:
            reply = json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise GspoError(f"Codeforces API {method.split('?')[0]} failed: {e}") from None
    if reply.get("status") != "OK":
        raise GspoError(f"Codeforces API {method.split('?')[0]}: {reply.get('comment', 'error')}")
    return reply["result"]
