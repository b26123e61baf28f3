"""CodeForces problems in the open-r1/codeforces layout.

Problems (one JSON object per line): id, contest_id, index, problem, time_limit_ms, memory_limit_mb,
tests [{"input", "output"}], interactive, may_need_checker, optional checker (Python source). Rows with
the Hugging Face open-r1/codeforces names (time_limit in seconds, memory_limit, official_tests,
generated_checker, interaction_format, description) are accepted too.
"""

from __future__ import annotations

import json
from pathlib import Path

from gspo.conf.errors import GspoError

_FIELDS = {"id": str, "contest_id": int, "index": str, "problem": str, "time_limit_ms": int,
           "memory_limit_mb": int, "tests": list, "interactive": bool, "may_need_checker": bool}


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
