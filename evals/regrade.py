"""Regrade saved responses without a model: `gspo grade arith|math|code FILE.jsonl`.

Each row is graded by the grader that produced it: a run's eval_samples.jsonl names its `benchmark`
(arith, aime24, livecodebench...) and its samples.jsonl its training task's `grader` (older runs: the
`task.kind` of the run's config.yaml next to the file); only rows that say neither are graded by the
command's own grader. A row's stored verdict (`correct`, or a samples row's `reward`) is compared with the
regrade and the disagreements are counted. Each input row is written back with its verdict (`correct`,
`reward`, `verdict`, for code the sandbox's `detail`, and `grader`) to FILE.graded.jsonl next to the input,
atomically (temp file + os.replace), so an interrupted run never leaves a half-written file. Rows are
numbered from 1 in error messages.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from gspo.conf.errors import GspoError
from gspo.evals.arith import extract_answer, grade_arith
from gspo.evals.benchmarks.livecodebench import MEMORY_MB, TIMEOUT_S, decode_tests, grade_code_response
from gspo.evals.benchmarks.registry import BENCHMARK_NAMES, benchmark_grader
from gspo.evals.benchmarks.types import Verdict
from gspo.evals.graders.math import grade_math_batch
from gspo.evals.parallel import parallel_map
from gspo.evals.records import is_missing, read_records

GRADERS = ("arith", "math", "code")

SKIPPED = {
    "codeforces": "codeforces rows: judged with the problem's own checker and limits, which the row does not keep",
    "task code": "code-task training samples: their gold is the problem's id, not its tests",
}


@dataclass
class RegradeSummary:
    n: int
    n_correct: int
    output: Path
    verdicts: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, tuple[int, int]] = field(default_factory=dict)  # source -> (correct, graded)
    disagree: list[int] = field(default_factory=list)  # row numbers whose stored verdict differs
    n_stored: int = 0  # rows that carried a stored verdict
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows left ungraded

    @property
    def accuracy(self) -> float:
        return self.n_correct / self.n if self.n else 0.0


def _response(rec: dict) -> str | None:
    """The graded text: `response` (gspo eval's eval_samples.jsonl, most tools) or `completion` (a run's
    samples.jsonl)."""
    text = rec.get("response", rec.get("completion"))
    return text if isinstance(text, str) else None


def regrade(path: str | Path, default: str, *, workers: int = 1, timeout_s: float = TIMEOUT_S,
            memory_mb: int = MEMORY_MB, progress: bool = False) -> RegradeSummary:
    """Grade each row of `path` by its own benchmark or task, else by `default` (arith, math or code)."""
    rows = _read_nonempty(path)
    run_kind = _run_task_kind(path)
    sources = [_source(rec, default, run_kind) for _, rec in rows]
    skipped: Counter = Counter()
    verdicts: list[Verdict | None] = [None] * len(rows)
    for grader in GRADERS:
        picked = [i for i, (_, g) in enumerate(sources) if g == grader]
        if not picked:
            continue
        chosen = [rows[i] for i in picked]
        if grader == "code":
            graded = _grade_code(chosen, str(path), timeout_s, memory_mb, workers, progress)
        else:
            graded = _grade_answers(chosen, str(path), grader, workers)
        for i, v in zip(picked, graded, strict=True):
            verdicts[i] = v
    for source, grader in sources:
        if grader is None:
            skipped[SKIPPED.get(source, source)] += 1
    return _write(path, rows, sources, verdicts, skipped)


def _source(rec: dict, default: str, run_kind: str | None) -> tuple[str, str | None]:
    """(the row's source, its grader): its benchmark, its training task's grader, the run's task kind (a
    samples.jsonl row of an older run), else the command's own grader."""
    bench = rec.get("benchmark")
    if isinstance(bench, str) and bench in BENCHMARK_NAMES:  # its grader is the one it registered with
        return bench, benchmark_grader(bench)
    grader = rec.get("grader")
    if grader not in GRADERS and "completion" in rec:
        grader = run_kind
    if grader in GRADERS:
        # a code task's training sample keeps its problem's id as gold, not the tests
        return f"task {grader}", (None if grader == "code" and "completion" in rec else grader)
    return default, default


def _run_task_kind(path: str | Path) -> str | None:
    """The task.kind of the run whose samples.jsonl `path` is (its config.yaml alongside), else None."""
    config = Path(path).expanduser().parent / "config.yaml"
    try:
        kind = OmegaConf.select(OmegaConf.load(config), "task.kind")
    except Exception:  # no config, not YAML, not a mapping: a foreign file, graded by the command's grader
        return None
    return kind if isinstance(kind, str) else None


def _grade_answers(rows: list[tuple[int, dict]], source: str, grader: str, workers: int) -> list[Verdict]:
    """Final-answer graders: arith (the embedded task's integer answer) or math (math-verify)."""
    responses, golds = [], []
    for row, rec in rows:
        if _response(rec) is None:
            raise GspoError(f"{source}: row {row} has no response or completion (a string)")
        gold = rec.get("gold", rec.get("answer"))
        if is_missing(gold):
            raise GspoError(f"{source}: row {row} has no gold (or answer)")
        responses.append(_response(rec))
        golds.append(str(gold))
    if grader == "arith":
        bad = next((row for (row, _), g in zip(rows, golds, strict=True) if not g.lstrip("-").isdigit()), None)
        if bad is not None:
            raise GspoError(f"{source}: row {bad}'s gold is not an integer, as the arith grader needs")
        return [Verdict(ok, float(ok), "correct" if ok else "wrong_answer", {"extracted": extract_answer(r)})
                for r, g in zip(responses, golds, strict=True) for ok in [grade_arith(r, g)]]
    correct = grade_math_batch(responses, golds, workers=workers)
    return [Verdict(ok, float(ok), "correct" if ok else "wrong_answer") for ok in correct]


def _grade_code(rows: list[tuple[int, dict]], source: str, timeout_s: float, memory_mb: int, workers: int,
                progress: bool) -> list[Verdict]:
    """Code in the sandbox on the row's tests; a row passes only if every test passes."""
    jobs = [_code_job(rec, row, source) for row, rec in rows]

    def grade(job: dict) -> Verdict:
        return grade_code_response(job["response"], job["tests"], code=job["code"], fn_name=job["fn_name"],
                                   timeout_s=timeout_s, memory_mb=memory_mb)

    return parallel_map(grade, jobs, workers=workers, progress=progress, description="grading code")


def _read_nonempty(path: str | Path) -> list[tuple[int, dict]]:
    rows = read_records(path)
    if not rows:
        raise GspoError(f"{path}: no rows to grade")
    return rows


def _code_job(rec: dict, row: int, source: str) -> dict:
    where = f"{source}: row {row}"
    code, response = rec.get("code"), _response(rec)
    if not isinstance(code, str) and response is None:
        raise GspoError(f"{where} has neither code nor response")
    if "tests" in rec or "gold" in rec:  # eval_samples.jsonl keeps a code problem's tests as its gold
        field = "tests" if "tests" in rec else "gold"
        tests = decode_tests(rec[field], where, field)
    else:
        tests = decode_tests(rec.get("public_test_cases"), where, "public_test_cases")
        tests += decode_tests(rec.get("private_test_cases"), where, "private_test_cases")
    if not tests:
        raise GspoError(f"{where} has no tests (tests, or public_test_cases/private_test_cases)")
    metadata = rec.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            raise GspoError(f"{where}: metadata is not valid JSON") from None
    fn_name = rec.get("fn_name") or (metadata.get("func_name") if isinstance(metadata, dict) else None)
    return {
        "code": code if isinstance(code, str) else None,
        "response": response or "",
        "tests": tests,
        "fn_name": fn_name or None,
    }


def graded_path(path: str | Path) -> Path:
    """FILE.jsonl -> FILE.graded.jsonl, next to the input."""
    p = Path(path)
    return p.with_name(p.name.removesuffix(p.suffix) + ".graded.jsonl")


def _stored(rec: dict) -> bool | None:
    """The row's own verdict: `correct` (eval_samples.jsonl), else a 0/1 `reward` (samples.jsonl)."""
    if isinstance(rec.get("correct"), bool):
        return rec["correct"]
    reward = rec.get("reward")
    if isinstance(reward, (int, float)) and not isinstance(reward, bool) and reward in (0, 1):
        return reward == 1
    return None


def _write(path: str | Path, rows: list[tuple[int, dict]], sources: list[tuple[str, str | None]],
           verdicts: list[Verdict | None], skipped: Counter) -> RegradeSummary:
    out = graded_path(path)
    by_source: dict[str, list[int]] = {}
    disagree, n_stored = [], 0
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for (row, rec), (source, grader), v in zip(rows, sources, verdicts, strict=True):
                if v is None:
                    f.write(json.dumps({**rec, "verdict": "skipped"}, ensure_ascii=False) + "\n")
                    continue
                stored = _stored(rec)
                if stored is not None:
                    n_stored += 1
                    if stored != v.correct:
                        disagree.append(row)
                tally = by_source.setdefault(source, [0, 0])
                tally[0] += v.correct
                tally[1] += 1
                graded = {**rec, "correct": v.correct, "reward": v.reward, "verdict": v.verdict, "grader": grader}
                if grader == "code":
                    graded["detail"] = v.detail
                f.write(json.dumps(graded, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    done = [v for v in verdicts if v is not None]
    return RegradeSummary(
        n=len(done),
        n_correct=sum(v.correct for v in done),
        output=out,
        verdicts=dict(sorted(Counter(v.verdict for v in done).items(), key=lambda kv: (-kv[1], kv[0]))),
        by_source={s: (c, n) for s, (c, n) in by_source.items()},
        disagree=disagree,
        n_stored=n_stored,
        skipped=dict(skipped),
    )
