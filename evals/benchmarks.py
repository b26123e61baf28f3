"""Benchmark registry: a name -> a loaded Benchmark (problems + grader + metrics).

A factory is called as `factory(path=..., limit=..., **options)` and returns a Benchmark. The
built-in ones import their module on first use, so loading `aime24` never imports the code sandbox.
This module also holds what every loader shares: reading local JSON/JSONL records with row numbers,
loading rows from the Hugging Face hub with a one-line error, and scoring verdicts into metrics.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gspo.conf.errors import GspoError
from gspo.evals.passk import aggregate


@dataclass(frozen=True)
class Problem:
    id: str
    prompt: str  # the text the model sees (benchmark template applied; chat template is the model side's)
    gold: Any  # answer string, or test cases
    meta: dict = field(default_factory=dict)  # anything else (fn_name, limits, platform, system prompt...)


@dataclass
class Verdict:
    correct: bool
    reward: float  # 1.0/0.0 for these benchmarks
    verdict: str  # "correct"/"wrong_answer"/"accepted"/...; "skipped" is excluded from metrics
    detail: dict = field(default_factory=dict)


class Benchmark(Protocol):
    name: str
    problems: list[Problem]

    def grade(self, problem: Problem, responses: list[str], *, workers: int = 1) -> list[Verdict]: ...

    def score(self, verdicts: list[list[Verdict]], k: int) -> dict[str, float]: ...


_BUILTIN = {
    "arith": "gspo.evals.arith:arith_benchmark",
    "aime24": "gspo.evals.aime:aime24",
    "aime25": "gspo.evals.aime:aime25",
    "livecodebench": "gspo.evals.livecodebench:livecodebench",
    "codeforces": "gspo.evals.benchmarks:codeforces_benchmark",
}
_REGISTRY: dict[str, Callable[..., Benchmark] | str] = dict(_BUILTIN)
BENCHMARK_NAMES: list[str] = sorted(_REGISTRY)  # kept in step with the registry, in place


def register_benchmark(name: str, factory: Callable[..., Benchmark]) -> None:
    """Make `load_benchmark(name, ...)` call `factory(path=..., limit=..., **options)`."""
    _REGISTRY[name] = factory
    BENCHMARK_NAMES[:] = sorted(_REGISTRY)


def load_benchmark(name: str, *, path: str | None = None, limit: int | None = None, **options) -> Benchmark:
    """Load a benchmark by name; `path` is a local file overriding the hub, `limit` keeps the first N."""
    if name not in _REGISTRY:
        raise GspoError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARK_NAMES)}")
    if limit is not None and limit < 1:
        raise GspoError(f"benchmark limit must be a positive number of problems, got {limit}")
    factory = _resolve(_REGISTRY[name])
    try:
        inspect.signature(factory).bind(path=path, limit=limit, **options)
    except TypeError:
        known = [p for p in inspect.signature(factory).parameters if p not in ("path", "limit")]
        unknown = sorted(set(options) - set(known)) or sorted(options)
        raise GspoError(
            f"unknown option for benchmark {name!r}: {', '.join(unknown)}; known: {', '.join(known) or 'none'}"
        ) from None
    return factory(path=path, limit=limit, **options)


def _resolve(entry: Callable[..., Benchmark] | str) -> Callable[..., Benchmark]:
    if callable(entry):
        return entry
    module, attr = entry.split(":")
    return getattr(importlib.import_module(module), attr)


CF_HUB_ID = "open-r1/codeforces"
_CF_META = (
    "contest_id", "index", "time_limit_ms", "memory_limit_mb", "interactive", "may_need_checker", "checker",
    "title", "rating", "tags",
)  # fmt: skip


@dataclass
class CodeforcesBenchmark:
    """CodeForces problems (gold: tests; meta: limits, interactive, checker) judged by gspo.evals.codeforces.

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
        from gspo.evals.codeforces import grade_codeforces
        from gspo.evals.sandbox import parallel_map

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
        from gspo.evals import codeforces

        attempts: dict[int, dict[str, list[bool]]] = {}
        for problem, per in zip(self.problems, verdicts, strict=True):
            tries = [v.correct for v in per[:k] if v.verdict != "skipped"]
            contest = attempts.setdefault(problem.meta["contest_id"], {})
            if tries:
                contest[problem.meta["index"]] = tries
        if self.contests == "fetch":
            cache = Path(self.cache_dir).expanduser()
            standings = {cid: codeforces.fetch_contest(cid, cache) for cid in attempts}
        else:
            standings = codeforces.load_contests(self.contests)
        return codeforces.codeelo_rating(attempts, standings)["rating"]


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
    from gspo.evals.codeforces import parse_codeforces_row
    from gspo.evals.livecodebench import SYSTEM_MESSAGE, lcb_prompt

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


def read_records(path: str | Path) -> list[tuple[int, dict]]:
    """(row number, record) from a .jsonl file (one object a line) or a .json list of objects."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise GspoError(f"file not found: {p}" if not p.exists() else f"not a file: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise GspoError(f"{p}: not UTF-8 text (byte {e.start}); convert it, e.g. iconv -f latin1 -t utf-8") from None
    if p.suffix == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise GspoError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise GspoError(f"{p}: expected a JSON list of records")
        rows = list(enumerate(data, start=1))
    else:
        rows = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((i, json.loads(line)))
            except json.JSONDecodeError as e:
                raise GspoError(f"{p}: row {i} is not valid JSON ({e.msg})") from None
    for i, rec in rows:
        if not isinstance(rec, dict):
            raise GspoError(f"{p}: row {i} is not a JSON object")
    return rows


def load_hub_rows(
    hub_id: str,
    *,
    split: str = "train",
    subsets: Iterable[str | None] = (None,),
    data_files: list[str] | None = None,
) -> list[dict]:
    """All rows of a hub dataset split (concatenated over subsets), or of JSON files in a hub dataset
    repo (data_files, for repos whose loading script `datasets` no longer runs). Any failure is one
    GspoError line."""
    try:
        import datasets

        if data_files is not None:
            urls = [f"hf://datasets/{hub_id}/{name}" for name in data_files]
            return list(datasets.load_dataset("json", data_files=urls, split="train"))
        rows: list[dict] = []
        for subset in subsets:
            rows.extend(datasets.load_dataset(hub_id, subset, split=split))
        return rows
    except Exception as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise GspoError(
            f"cannot load {hub_id!r} from the Hugging Face hub ({type(e).__name__}: {reason}); "
            "check the network or use a local file instead"
        ) from None


def pick_key(record: dict, wanted: str | None, candidates: tuple[str, ...]) -> str | None:
    """The column to read: the one asked for, else the first candidate present."""
    if wanted is not None:
        return wanted if wanted in record else None
    return next((c for c in candidates if c in record), None)


def score_verdicts(verdicts: list[list[Verdict]], k: int) -> dict[str, float]:
    """avg@k, pass@1, pass@k over problems; problems with only skipped verdicts are counted apart."""
    counts = []
    n_skipped = 0
    for per_problem in verdicts:
        graded = [v for v in per_problem if v.verdict != "skipped"]
        if not graded:
            n_skipped += 1
            continue
        counts.append((len(graded), sum(v.correct for v in graded)))
    metrics = aggregate(counts, k)
    metrics["n_problems"] = float(len(counts))
    metrics["n_skipped"] = float(n_skipped)
    return metrics


def is_missing(value: Any) -> bool:
    """None, NaN or a blank string: a cell a loader cannot use."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()
