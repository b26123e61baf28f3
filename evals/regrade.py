"""Regrade saved responses without a model: `gspo grade math|code FILE.jsonl`.

Each input row is written back with its verdict (`correct`, `reward`, `verdict`, and for code the
sandbox's `detail`) to FILE.graded.jsonl next to the input, atomically (temp file + os.replace), so an
interrupted run never leaves a half-written file. Rows are numbered from 1 in error messages.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks.livecodebench import MEMORY_MB, TIMEOUT_S, decode_tests, grade_code_response
from gspo.evals.benchmarks.types import Verdict
from gspo.evals.graders.math import grade_math_batch
from gspo.evals.parallel import parallel_map
from gspo.evals.records import is_missing, read_records


@dataclass
class RegradeSummary:
    n: int
    n_correct: int
    output: Path
    verdicts: dict[str, int] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.n_correct / self.n if self.n else 0.0


def _response(rec: dict) -> str | None:
    """The graded text: `response` (gspo eval's eval_samples.jsonl, most tools) or `completion` (a run's
    samples.jsonl)."""
    text = rec.get("response", rec.get("completion"))
    return text if isinstance(text, str) else None


def regrade_math(path: str | Path, *, workers: int = 1) -> RegradeSummary:
    """Grade rows with `response` (or `completion`) and `gold` (or `answer`) by grade_math."""
    rows = _read_nonempty(path)
    responses, golds = [], []
    for row, rec in rows:
        if _response(rec) is None:
            raise GspoError(f"{path}: row {row} has no response or completion (a string)")
        gold = rec.get("gold", rec.get("answer"))
        if is_missing(gold):
            raise GspoError(f"{path}: row {row} has no gold (or answer)")
        responses.append(_response(rec))
        golds.append(str(gold))
    correct = grade_math_batch(responses, golds, workers=workers)
    verdicts = [Verdict(ok, float(ok), "correct" if ok else "wrong_answer") for ok in correct]
    return _write(path, [rec for _, rec in rows], verdicts, with_detail=False)


def regrade_code(
    path: str | Path,
    *,
    timeout_s: float = TIMEOUT_S,
    memory_mb: int = MEMORY_MB,
    workers: int = 1,
    progress: bool = False,
) -> RegradeSummary:
    """Grade rows with `code` (or a `response` to extract code from) on tests in the LCB layout.

    Tests: `tests`, `gold` (eval_samples.jsonl), or `public_test_cases` + `private_test_cases` (lists, JSON,
    or LCB-compressed);
    function name: `fn_name` or `metadata.func_name`. Rows run `workers` at a time, each in its own
    sandbox; `progress` shows a progress bar.
    """
    rows = _read_nonempty(path)
    jobs = [_code_job(rec, row, str(path)) for row, rec in rows]

    def grade(job: dict) -> Verdict:
        return grade_code_response(
            job["response"],
            job["tests"],
            code=job["code"],
            fn_name=job["fn_name"],
            timeout_s=timeout_s,
            memory_mb=memory_mb,
        )

    verdicts = parallel_map(grade, jobs, workers=workers, progress=progress, description="grading code")
    return _write(path, [rec for _, rec in rows], verdicts, with_detail=True)


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


def _write(
    path: str | Path, records: list[dict], verdicts: list[Verdict], *, with_detail: bool
) -> RegradeSummary:
    out = graded_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for rec, v in zip(records, verdicts, strict=True):
                graded = {**rec, "correct": v.correct, "reward": v.reward, "verdict": v.verdict}
                if with_detail:
                    graded["detail"] = v.detail
                f.write(json.dumps(graded, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return RegradeSummary(
        n=len(verdicts),
        n_correct=sum(v.correct for v in verdicts),
        output=out,
        verdicts=dict(sorted(Counter(v.verdict for v in verdicts).items(), key=lambda kv: (-kv[1], kv[0]))),
    )
