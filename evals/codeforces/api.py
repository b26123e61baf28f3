"""The Codeforces API client: a contest's standings and old ratings, in the contest-file layout of
gspo.evals.codeforces.rating, cached as JSON (needs network; tests pass their own `opener`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from gspo.conf.errors import GspoError

_API = "https://codeforces.com/api"


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
