"""The CodeForces benchmark (open-r1/codeforces, or a local file in its layout): problems with their
official tests, judged by gspo.evals.graders.codeforces; CodeElo-style rating given contest standings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks.livecodebench import SYSTEM_MESSAGE, lcb_prompt
from gspo.evals.benchmarks.types import Problem, Verdict, score_verdicts
from gspo.evals.codeforces.api import fetch_contest
from gspo.evals.codeforces.problems import parse_codeforces_row
from gspo.evals.codeforces.rating import codeelo_rating, load_contests
from gspo.evals.graders.codeforces import grade_codeforces
from gspo.evals.parallel import parallel_map
from gspo.evals.records import load_hub_rows, read_records

CF_HUB_ID = "open-r1/codeforces"
_CF_META = (
    "contest_id", "index", "time_limit_ms", "memory_limit_mb", "interactive", "may_need_checker", "checker",
    "title", "rating", "tags",
)  # fmt: skip


@dataclass
class CodeforcesBenchmark:
    """CodeForces problems (gold: tests; meta: limits, interactive, checker) judged by gspo.evals.graders.codeforces.

    Interactive problems are "skipped", never counted as wrong. With contest standings (a local file, or
    "fetch" for the Codeforces API with a cache), score() adds the CodeElo-style mean `rating`, taking
    each problem's first k samples as its submissions in order.
    """

    name: str
    problems: list[Problem]
    contests: str | None = None
    cache_dir: str = "~/.cache/gspo/codeforces"
    time_scale: float = 1.0  # multiplies every time limit (slower machines than Codeforces' judges)

    def grade(self, problem: Problem, responses: list[str], *, workers: int = 1) -> list[Verdict]:
        row = {**problem.meta, "tests": problem.gold}

        def one(response: str) -> Verdict:
            result = grade_codeforces(response, row, time_scale=self.time_scale)
            return Verdict(result.passed, float(result.passed), result.verdict, result.to_dict())

        return parallel_map(one, responses, workers=workers)

    def score(self, verdicts: list[list[Verdict]], k: int) -> dict[str, float]:
        metrics = score_verdicts(verdicts, k)
        metrics["n_no_checker"] = float(
            sum("no_checker" in v.detail.get("notes", ()) for per in verdicts for v in per)
        )
        if self.contests is not None:
            metrics["rating"] = self._rating(verdicts, k)
        return metrics

    def _rating(self, verdicts: list[list[Verdict]], k: int) -> float:
        attempts: dict[int, dict[str, list[bool]]] = {}
        for problem, per in zip(self.problems, verdicts, strict=True):
            tries = [v.correct for v in per[:k] if v.verdict != "skipped"]
            contest = attempts.setdefault(problem.meta["contest_id"], {})
            if tries:
                contest[problem.meta["index"]] = tries
        if self.contests == "fetch":
            cache = Path(self.cache_dir).expanduser()
            standings = {cid: fetch_contest(cid, cache) for cid in attempts}
        else:
            standings = load_contests(self.contests)
        return codeelo_rating(attempts, standings)["rating"]


def codeforces_benchmark(
    *,
    path: str | None = None,
    limit: int | None = None,
    hub_id: str = CF_HUB_ID,
    subset: str = "verifiable",
    split: str = "test",
    contests: str | None = None,
    cache_dir: str = "~/.cache/gspo/codeforces",
    time_scale: float = 1.0,
) -> CodeforcesBenchmark:
    """Codeforces problems from a local file (cf_sample layout) or the hub (open-r1/codeforces).

    Hub rows use their official tests only (the generated tests are separate files); hub problems with
    no official tests and no interaction are dropped, since a program would pass zero tests vacuously.
    """
    if path is not None:
        source, rows = str(path), read_records(path)
    else:
        source = hub_id
        rows = list(enumerate(load_hub_rows(hub_id, split=split, subsets=[subset]), start=1))
    problems = []
    for row, rec in rows:
        parsed = parse_codeforces_row(_cf_local_names(rec), f"{source}: row {row}")
        if not parsed["tests"] and not parsed["interactive"]:
            if path is not None:
                raise GspoError(f"{source}: row {row} has no tests")
            continue
        meta = {key: parsed[key] for key in _CF_META if key in parsed}
        meta["system"] = SYSTEM_MESSAGE
        prompt = lcb_prompt(parsed["problem"].strip(), "")  # LCB's stdin template, as LCB uses for Codeforces
        problems.append(Problem(id=str(parsed["id"]), prompt=prompt, gold=parsed["tests"], meta=meta))
    if not problems:
        raise GspoError(f"{source}: no problems with tests")
    return CodeforcesBenchmark(
        "codeforces", problems[:limit], contests=contests, cache_dir=cache_dir, time_scale=time_scale
    )


def _cf_local_names(rec: dict) -> dict:
    """Hub rows carry contest_id as a string and the statement in parts; join them as the local layout."""
    out = dict(rec)
    if isinstance(out.get("contest_id"), str) and out["contest_id"].isdigit():
        out["contest_id"] = int(out["contest_id"])
    if "problem" not in out and isinstance(out.get("description"), str):
        parts = [out["description"]]
        for title, key in (
            ("Input Format", "input_format"),
            ("Output Format", "output_format"),
            ("Note", "note"),
        ):
            if out.get(key):
                parts.append(f"{title}:\n{out[key]}")
        out["problem"] = "\n\n".join(parts)
    return out
