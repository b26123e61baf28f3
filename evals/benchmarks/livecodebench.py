"""LiveCodeBench code generation (livecodebench/code_generation_lite), graded in the code sandbox.

Rows follow the hub layout: question_content, starter_code, platform, contest_date, difficulty,
public_test_cases (JSON string), private_test_cases (JSON string, or base64(zlib(pickle(JSON string)))
as the official harness stores it), metadata (JSON string; LeetCode's func_name). Parsed lists/dicts
are accepted too. A problem with starter code is functional (call `func_name`), else stdin/stdout.

The hub repo is a set of JSONL files, one per release; its loading script is not run by current
`datasets`, so the files of a `version_tag` are read directly (the same table as the script). A local
path may be one file (no version tag applies) or a directory of those files (a clone of the repo).
Prompts are LCB's generic template; the system message is in `meta["system"]`. A sample passes only
if every public and private test passes (grading in gspo.evals.graders.code). Metrics: pass@1, pass@k.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from gspo.conf.errors import GspoError
from gspo.conf.schema import TaskConfig
from gspo.evals.benchmarks.types import Problem, Verdict, score_verdicts
from gspo.evals.graders.code import extract_code, run_code
from gspo.evals.parallel import parallel_map
from gspo.evals.records import is_missing, load_hub_rows, read_records

HUB_ID = "livecodebench/code_generation_lite"
DEFAULT_VERSION_TAG = "release_v6"
TIMEOUT_S = TaskConfig.timeout_s  # CPU seconds per test: the schema's task.timeout_s, LCB's runner's (--timeout 6)
MEMORY_MB = 2048

_FILES = ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]  # release v1..v6, one file each
VERSION_FILES = {f"release_v{i}": _FILES[:i] for i in range(1, 7)}
VERSION_FILES["release_latest"] = _FILES
VERSION_FILES.update({f"v{i}": [_FILES[i - 1]] for i in range(1, 7)})
VERSION_FILES.update({f"v{a}_v{b}": _FILES[a - 1 : b] for a in range(1, 7) for b in range(a + 1, 7)})

SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests."
)
FORMAT_WITH_STARTER_CODE = (
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters."
)
FORMAT_WITHOUT_STARTER_CODE = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
    "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT."
)


def lcb_prompt(question: str, starter_code: str) -> str:
    """LCB's generic user prompt (lcb_runner/prompts/code_generation.py)."""
    prompt = f"### Question:\n{question}\n\n"
    if starter_code:
        prompt += f"### Format: {FORMAT_WITH_STARTER_CODE}\n```python\n{starter_code}\n```\n\n"
    else:
        prompt += f"### Format: {FORMAT_WITHOUT_STARTER_CODE}\n```python\n# YOUR CODE HERE\n```\n\n"
    return prompt + "### Answer: (use the provided format with backticks)\n\n"


@dataclass
class CodeBenchmark:
    """Problems whose gold is a list of tests; a response passes only if its code passes them all."""

    name: str
    problems: list[Problem]
    timeout_s: float = TIMEOUT_S
    memory_mb: int = MEMORY_MB

    def grade(self, problem: Problem, responses: list[str], *, workers: int = 1) -> list[Verdict]:
        def one(response: str) -> Verdict:
            return grade_code_response(
                response,
                problem.gold,
                fn_name=problem.meta.get("fn_name"),
                timeout_s=self.timeout_s,
                memory_mb=self.memory_mb,
            )

        return parallel_map(one, responses, workers=workers)

    def score(self, verdicts: list[list[Verdict]], k: int) -> dict[str, float]:
        return score_verdicts(verdicts, k)


def grade_code_response(
    response: str,
    tests: list[dict],
    *,
    fn_name: str | None,
    timeout_s: float,
    memory_mb: int,
    code: str | None = None,
) -> Verdict:
    """Extract the code from a model response (unless `code` is given) and run it on all tests.

    No code block is a wrong answer (the sandbox's verdict vocabulary), with the reason in the detail.
    """
    if code is None:
        code = extract_code(response or "")
    result = run_code(code, tests, fn_name=fn_name, timeout_s=timeout_s, memory_mb=memory_mb)
    return Verdict(
        correct=bool(result.passed),
        reward=float(result.passed),
        verdict=result.verdict,
        detail=result.to_dict(),
    )


def livecodebench(
    *,
    path: str | None = None,
    limit: int | None = None,
    version_tag: str | None = None,
    start_date: str | date | None = None,
    end_date: str | date | None = None,
    platform: str | None = None,
    difficulty: str | None = None,
    hub_id: str = HUB_ID,
    timeout_s: float = TIMEOUT_S,
    memory_mb: int = MEMORY_MB,
) -> CodeBenchmark:
    """Load LCB problems; the date window [start_date, end_date] is inclusive, on contest_date's day."""
    start, end = _date(start_date, "start_date"), _date(end_date, "end_date")
    source, rows = _rows(path, version_tag, hub_id)
    problems = []
    for row_source, row, rec in rows:
        problem = lcb_problem(rec, row, row_source)
        day = problem.meta["contest_date"] and date.fromisoformat(problem.meta["contest_date"])
        if (start or end) and (day is None or (start and day < start) or (end and day > end)):
            continue
        if platform and problem.meta["platform"] != platform:
            continue
        if difficulty and problem.meta["difficulty"] != difficulty:
            continue
        problems.append(problem)
    if not problems:
        raise GspoError(
            f"{source}: no problems match (version_tag, dates {start}..{end}, platform, difficulty)"
        )
    return CodeBenchmark("livecodebench", problems[:limit], timeout_s=timeout_s, memory_mb=memory_mb)


def _rows(path: str | None, version_tag: str | None, hub_id: str) -> tuple[str, list[tuple[str, int, dict]]]:
    """(source, [(file the row is in, row number, record)]) from the hub, one file, or a directory."""
    tag = version_tag or DEFAULT_VERSION_TAG
    if tag not in VERSION_FILES:
        raise GspoError(
            f"unknown LiveCodeBench version_tag {tag!r}; known: release_v1..release_v6, release_latest, "
            "v1..v6, vA_vB (A < B)"
        )
    if path is None:
        rows = load_hub_rows(hub_id, data_files=VERSION_FILES[tag])
        return hub_id, [(hub_id, i, rec) for i, rec in enumerate(rows, start=1)]
    p = Path(path).expanduser()
    if not p.is_dir():
        if version_tag is not None:
            raise GspoError(f"version_tag selects release files of a directory or the hub; {p} is one file")
        return str(p), [(str(p), i, rec) for i, rec in read_records(p)]
    rows = []
    for name in VERSION_FILES[tag]:
        if not (p / name).is_file():
            raise GspoError(f"{p}: {name} missing for version_tag {tag}")
        rows.extend((str(p / name), i, rec) for i, rec in read_records(p / name))
    return str(p), rows


def lcb_problem(rec: dict, row: int, source: str) -> Problem:
    """One LCB row as a Problem (gold: public + private tests); a malformed row is a GspoError."""
    for key in ("question_content", "public_test_cases"):
        if key not in rec or is_missing(rec[key]):
            raise GspoError(f"{source}: row {row} has no {key}")
    where = f"{source}: row {row}"
    public = decode_tests(rec["public_test_cases"], where, "public_test_cases")
    tests = public + decode_tests(rec.get("private_test_cases"), where, "private_test_cases")
    metadata = _json_field(rec.get("metadata"), where, "metadata") or {}
    starter = rec.get("starter_code") or ""
    if not isinstance(starter, str):
        raise GspoError(f"{where}: starter_code is {json.dumps(starter)[:40]}, not text (the function's signature, "
                        "or empty for a stdin problem)")
    functional = bool(starter.strip()) or any(t.get("testtype") == "functional" for t in tests)
    fn_name = metadata.get("func_name") if isinstance(metadata, dict) else None
    if functional and not fn_name:
        raise GspoError(f"{where} is a functional problem but metadata has no func_name")
    return Problem(
        id=str(rec.get("question_id") or row),
        prompt=lcb_prompt(str(rec["question_content"]), starter),
        gold=tests,
        meta={
            "system": SYSTEM_MESSAGE,
            "fn_name": fn_name if functional else None,
            "starter_code": starter,
            "platform": rec.get("platform"),
            "difficulty": rec.get("difficulty"),
            "contest_date": _contest_day(rec.get("contest_date"), where),
            "title": rec.get("question_title"),
            "n_public_tests": len(public),
        },
    )


def decode_tests(value: Any, where: str, field: str) -> list[dict]:
    """Tests from a list, a JSON string, or the official base64+zlib+pickle compressed JSON string."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    tests = _json_field(value, where, field, compressed_ok=True)
    if not isinstance(tests, list):
        raise GspoError(f"{where}: {field} is not a list of tests")
    for i, test in enumerate(tests, start=1):
        if not isinstance(test, dict) or "input" not in test or "output" not in test:
            raise GspoError(f"{where}: {field} test {i} lacks input or output")
    return tests


def _json_field(value: Any, where: str, field: str, compressed_ok: bool = False) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        if not compressed_ok:
            raise GspoError(f"{where}: {field} is not valid JSON") from None
    try:
        return json.loads(_StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load())
    except Exception:
        raise GspoError(f"{where}: {field} is neither JSON nor base64+zlib+pickle of JSON") from None


class _StringsOnly(pickle.Unpickler):
    """The compressed field pickles a plain str; refusing every global makes loading it inert."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing {module}.{name}")


def _contest_day(value: Any, where: str) -> str | None:
    """The contest's day as YYYY-MM-DD (meta stays JSON-serialisable)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.date().isoformat()
    try:
        return datetime.fromisoformat(str(value)).date().isoformat()
    except ValueError:
        raise GspoError(f"{where}: contest_date {value!r} is not an ISO date") from None


def _date(value: str | date | None, name: str) -> date | None:
    if value is None or isinstance(value, date):
        return value.date() if isinstance(value, datetime) else value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise GspoError(f"{name} must be YYYY-MM-DD, got {value!r}") from None
