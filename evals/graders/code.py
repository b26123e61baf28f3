"""Code grader: run a program on tests in the sandbox and judge it as LiveCodeBench's harness does.

Follows lcb_runner/evaluation/testing_util.py (LiveCodeBench):
- stdin mode: the program reads stdin; its stdout and the expected output are stripped, split on "\\n",
  each line stripped; the line counts must match; lines match exactly, or else as lists of
  whitespace-separated tokens that all parse as `decimal.Decimal` and are equal.
- functional mode (LeetCode, `fn_name`): each input line is one JSON argument; `Solution().fn_name(*args)`
  when the code has `class Solution`, else the module-level function; the value must equal the JSON
  expected output (tuples count as lists).
- the harness's implicit imports (`from math import *`, `from typing import *`, ...) are visible to the
  program, and SystemExit ends a run normally, as in the harness (`prelude=True`).
- a sample passes only if every test passes; grading stops at the first failure.
Departures, all deliberate: each test runs in a fresh process (not one process for all tests), the
time limit is CPU time (the harness uses a wall-clock alarm; CPU time does not depend on machine load)
with a wall-clock backstop of 2 * timeout_s + 1 for programs that sleep or block, and a functional
return value is compared after a JSON round trip (so nested tuples also count as lists).
"""

from __future__ import annotations

import decimal
import json
from dataclasses import asdict, dataclass, field
from typing import Literal

from gspo.conf.errors import GspoError
from gspo.evals.parallel import parallel_map
from gspo.evals.sandbox import Job, RunResult, Sandbox

# The LiveCodeBench harness's import_string, without its sys.setrecursionlimit(50000) (a Job field).
LCB_PRELUDE = "\n".join(f"from {m} import *" for m in (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
    "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing")) + "\n" + "\n".join(
    f"import {m}" for m in ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
                            "random", "statistics", "itertools", "functools", "operator", "io", "sys", "json"))
LCB_RECURSION_LIMIT = 50000
_SHOW = 1000  # characters of stdout/stderr/expected kept per test


@dataclass
class TestResult:
    """One executed test. Times in seconds (cpu_s is what the limit applies to)."""

    verdict: str
    cpu_s: float
    wall_s: float
    exit_code: int | None
    stdout: str  # truncated
    stderr: str  # truncated, last part
    message: str = ""


@dataclass
class CodeResult:
    """A program's verdict on a list of tests: the first failing test's verdict, or accepted."""

    verdict: str
    tests: list[TestResult] = field(default_factory=list)  # the tests that ran, in order
    n_tests: int = 0
    message: str = ""
    notes: list[str] = field(default_factory=list)  # e.g. "no_checker"

    @property
    def passed(self) -> bool:
        return self.verdict == "accepted"

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def extract_code(response: str) -> str | None:
    """The code between the last two lines containing ``` of a model response, as LiveCodeBench
    extracts it (so the last fenced block of a well-formed answer); None when there is none.

    >>> extract_code("Plan...\\n```python\\nprint(1)\\n```\\nDone.")
    'print(1)'
    >>> extract_code("no code here") is None
    True
    """
    lines = response.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return None
    return "\n".join(lines[fences[-2] + 1: fences[-1]])


def lcb_output_matches(output: str, expected: str) -> bool:
    """LiveCodeBench's stdin comparison: stripped lines, exact or as equal Decimal token lists.

    >>> lcb_output_matches("1.50 2\\n", "1.5 2")
    True
    >>> lcb_output_matches("1 2", "1\\n2")
    False
    """
    got, want = _stripped_lines(output), _stripped_lines(expected)
    if len(got) != len(want):
        return False
    return all(_line_matches(a, b) for a, b in zip(got, want, strict=True))


def _line_matches(got: str, want: str) -> bool:
    if got == want:
        return True
    got_numbers = _decimals(got)
    return got_numbers is not None and got_numbers == _decimals(want)


def tokens_match(output: str, expected: str) -> bool:
    """Whitespace-token comparison (testlib's default checker): line breaks and spacing are free."""
    return output.split() == expected.split()


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[decimal.Decimal] | None:
    """The line's tokens as finite decimals, or None: NaN, sNaN and Infinity compare as text only
    (comparing an sNaN raises decimal.InvalidOperation, and a grader must not be crashed by output)."""
    try:
        numbers = [decimal.Decimal(token) for token in line.split()]
    except (decimal.InvalidOperation, ValueError):
        return None
    return numbers if all(n.is_finite() for n in numbers) else None


def run_code(code: str | None, tests: list[dict], *, fn_name: str | None = None, timeout_s: float,
             memory_mb: int, prelude: bool = True, compare: Literal["lines", "tokens"] = "lines",
             checker: str | None = None, stop_on_failure: bool = True, backend: str | None = None) -> CodeResult:
    """Run `code` on `tests` ({"input": str, "output": str}, LiveCodeBench layout) in one sandbox.

    timeout_s is the CPU-time limit per test, memory_mb the address-space limit per test. fn_name
    selects functional mode. prelude gives the LiveCodeBench harness's implicit imports and SystemExit
    handling. compare: "lines" (LiveCodeBench) or "tokens" (testlib's default). checker: Python source
    run as `checker.py input.txt correct_output.txt solution_output.txt` that accepts by exiting 0 with
    an empty stdout or a first token of 1/ok/yes/true (or a score >= 1), and rejects by exiting 1 or 2.
    """
    _check_tests(tests, fn_name)
    if not code or not code.strip():
        return CodeResult("wrong_answer", n_tests=len(tests), message="no code to run")
    results: list[TestResult] = []
    with Sandbox(backend) as sandbox:
        for test in tests:
            job = Job(code=code, stdin=test["input"], cpu_s=timeout_s, memory_mb=memory_mb, fn_name=fn_name,
                      prelude=LCB_PRELUDE if prelude else "", exit_ok=prelude,
                      recursion_limit=LCB_RECURSION_LIMIT if prelude else 1000)
            raw = sandbox.run(job)
            result = _judge(raw, timeout_s, memory_mb)
            if result.verdict == "accepted":
                result = _compare(sandbox, raw, result, test, fn_name=fn_name, compare=compare, checker=checker)
            results.append(result)
            if result.verdict != "accepted" and (stop_on_failure or result.verdict == "compile_error"):
                break
    failed = [r for r in results if r.verdict != "accepted"]
    verdict = failed[0].verdict if failed else "accepted"
    return CodeResult(verdict, results, len(tests), failed[0].message if failed else "")


def run_code_many(items: list[dict], *, workers: int | None = None, progress: bool = False) -> list[CodeResult]:
    """`run_code(**item)` for each item, in parallel (one sandbox per item); results in input order."""
    return parallel_map(lambda item: run_code(**item), items, workers=workers, progress=progress,
                        description="running code")


def _check_tests(tests: list[dict], fn_name: str | None) -> None:
    if not isinstance(tests, list):
        raise GspoError(f"tests must be a list of {{'input', 'output'}} dicts, got {type(tests).__name__}")
    for i, test in enumerate(tests):
        if not isinstance(test, dict) or not isinstance(test.get("input"), str) or not isinstance(
                test.get("output"), str):
            raise GspoError(f"test {i}: needs string fields 'input' and 'output'")
        if test.get("testtype") == "functional" and not fn_name:
            raise GspoError(f"test {i} is functional (LeetCode) but no fn_name was given")


def _judge(raw: RunResult, timeout_s: float, memory_mb: int) -> TestResult:
    """Verdict from how the run ended; "accepted" here means "ran cleanly, now compare"."""
    stderr_tail = raw.stderr[-_SHOW:]
    result = TestResult("accepted", raw.cpu_s, raw.wall_s, raw.exit_code, raw.stdout[:_SHOW], stderr_tail)
    last_line = stderr_tail.strip().splitlines()[-1] if stderr_tail.strip() else ""
    if raw.error:
        result.verdict, result.message = "runtime_error", raw.error
    elif not raw.compiled:
        result.verdict, result.message = "compile_error", last_line or "does not compile"
    elif raw.limit == "output":
        result.verdict, result.message = "output_limit", "output exceeded the limit"
    elif raw.limit == "wall":
        result.verdict, result.message = "time_limit", f"wall-clock limit ({raw.wall_s:.1f}s) exceeded"
    elif raw.limit == "cpu" or raw.cpu_s > timeout_s:
        result.verdict, result.message = "time_limit", f"CPU time limit ({timeout_s:g}s) exceeded"
    elif raw.limit == "memory":
        result.verdict, result.message = "memory_limit", f"memory limit ({memory_mb} MB) exceeded by its processes together"
    elif raw.exit_code != 0 and last_line.startswith("MemoryError"):
        # a run that failed with the runner's traceback ending in MemoryError (RLIMIT_AS refused an
        # allocation); words a program writes never turn a run that exited 0 into a failure
        result.verdict, result.message = "memory_limit", f"memory limit ({memory_mb} MB) exceeded"
    elif raw.exit_code != 0:
        result.verdict = "runtime_error"
        how = f"signal {raw.signal}" if raw.signal else f"exit code {raw.exit_code}"
        result.message = f"{how}: {last_line}" if last_line else how
    return result


def _compare(sandbox: Sandbox, raw: RunResult, result: TestResult, test: dict, *, fn_name: str | None,
             compare: str, checker: str | None) -> TestResult:
    expected = test["output"]
    if checker is not None:
        result.verdict, result.message = _run_checker(sandbox, checker, test["input"], expected, raw.stdout)
        return result
    if fn_name:
        try:
            ok = json.loads(raw.stdout) == json.loads(expected)
        except (ValueError, RecursionError):  # any bytes give a verdict: "[" * 10**6 recurses
            ok = False
    else:
        ok = (lcb_output_matches if compare == "lines" else tokens_match)(raw.stdout, expected)
    if not ok:
        result.verdict = "wrong_answer"
        result.message = f"expected {expected[:200]!r}, got {raw.stdout[:200]!r}"
    return result


def _run_checker(sandbox: Sandbox, checker: str, test_input: str, expected: str, output: str) -> tuple[str, str]:
    files = {"input.txt": test_input, "correct_output.txt": expected, "solution_output.txt": output}
    raw = sandbox.run(Job(code=checker, cpu_s=10.0, memory_mb=1024, filename="checker.py",
                          argv=("checker.py", *files), files=files))
    said = raw.stdout.split()[:1]
    if raw.error or not raw.compiled or raw.limit or raw.exit_code not in (0, 1, 2):
        return "checker_error", f"checker failed: {raw.error or raw.stderr.strip()[-200:] or raw.limit}"
    if raw.exit_code == 0 and (not said or said[0].lower() in ("1", "ok", "yes", "true") or _score(said[0]) >= 1):
        return "accepted", ""
    return "wrong_answer", f"checker: {raw.stdout.strip()[:200] or 'rejected'}"


def _score(token: str) -> float:
    try:
        return float(token)
    except ValueError:
        return 0.0
