"""CodeElo-style rating of a model from its attempts and contest standings.

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
icpc)}, ...]}, ...]}. gspo.evals.codeforces.api.fetch_contest builds the same from the Codeforces API and caches it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gspo.conf.errors import GspoError

_RATING_RANGE = (-1000.0, 5000.0)


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
