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
return value is compared after a JSON round trip (so nested tuples also count as lists). Comparisons are
streamed (a line and a token at a time, stopped at the first difference) so that no output, up to the
sandbox's 16 MiB cap (beyond: output_limit), makes lists of its lines, tokens or numbers in the grader's
process; a functional return value over 4 times the expected answer's JSON (plus 64 KiB) is output_limit,
not parsed. CodeForces' token comparison splits on testlib's whitespace (space, tab, CR, LF) only.
"""

from __future__ import annotations

import decimal
import json
import math
import re
import secrets
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from typing import Literal

from gspo.conf.errors import GspoError
from gspo.evals.graders.screen import REFUSED_STATUS, checker_program
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
# functional mode: output longer than this many times the expected answer's JSON (plus the slack) is not
# parsed: json.loads of 16 MiB of "[{},{},...]" alone would take the grader ~420 MiB
_JSON_FACTOR, _JSON_SLACK = 4, 1 << 16
_ACCEPT = ("1", "ok", "yes", "true")  # a checker's explicit yes (first token of its stdout, any case)
_REJECT = ("0", "no", "false", "wrong", "wa")
_CHECKER_CPU_S = 20.0  # the screen (linear: a few seconds at worst on 16 MiB) and the checker together


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
    """LiveCodeBench's stdin comparison: stripped lines, exact or as equal Decimal token lists. Streamed: one
    line and one token at a time, stopped at the first difference, on spans of `output` (no copy of it, its
    lines or its tokens but a token parsed as a number), so no output shape grows the grader beyond the
    text itself. One departure: a token over _TOKEN_SLACK + 4 x the expected token's length is unequal
    (LiveCodeBench would equal "1" to "1" followed by 16 MiB of "0" after a point).

    >>> lcb_output_matches("1.50 2\\n", "1.5 2")
    True
    >>> lcb_output_matches("1 2", "1\\n2")
    False
    """
    return all(a is not None and b is not None and _line_matches(output, a, expected[b[0]:b[1]])
               for a, b in zip_longest(_line_spans(output), _line_spans(expected)))


def _line_matches(text: str, span: tuple[int, int], want: str) -> bool:
    """text[span] is `want`, or its tokens (split as str.split does) are pairwise equal finite decimals;
    NaN, sNaN and Infinity compare as text only (comparing an sNaN raises decimal.InvalidOperation, and a
    grader must not be crashed by output)."""
    lo, hi = span
    if _is_at(text, lo, hi, want):
        return True
    for a, b in zip_longest(_UNICODE_TOKEN.finditer(text, lo, hi), _UNICODE_TOKEN.finditer(want)):
        if a is None or b is None or a.end() - a.start() > _TOKEN_SLACK + 4 * len(b.group()):
            return False
        x, y = _decimal(a), _decimal(b)
        if x is None or y is None or x != y:
            return False
    return True


def tokens_match(output: str, expected: str) -> bool:
    """Whitespace-token comparison (testlib's default checker): line breaks and spacing are free, and
    whitespace is testlib's (space, tab, CR, LF): a no-break or ideographic space is part of a token.
    Streamed and stopped at the first difference, on spans of `output`, as lcb_output_matches.

    >>> tokens_match("1\\n 2 ", "1 2"), tokens_match("1\\u00a02", "1 2")
    (True, False)
    """
    return all(a is not None and b is not None and _is_at(output, a.start(), a.end(), b.group())
               for a, b in zip_longest(_ASCII_TOKEN.finditer(output), _ASCII_TOKEN.finditer(expected)))


_ASCII_TOKEN = re.compile(r"[^ \t\r\n]+")
_UNICODE_TOKEN = re.compile(r"\S+")  # str.split()'s whitespace: re's \s is Py_UNICODE_ISSPACE too
_TOKEN_SLACK = 4096  # characters a token may exceed 4 x the expected token by and still be parsed


def _is_at(text: str, lo: int, hi: int, want: str) -> bool:
    """text[lo:hi] == want, without the slice."""
    return hi - lo == len(want) and text.startswith(want, lo)


def _line_spans(text: str) -> Iterator[tuple[int, int]]:
    """The spans of text.strip().split("\\n"), each line stripped, one line at a time, without copying."""
    lo, hi = _stripped(text, 0, len(text))
    while (end := text.find("\n", lo, hi)) >= 0:
        yield _stripped(text, lo, end)
        lo = end + 1
    yield _stripped(text, lo, hi)


def _stripped(text: str, lo: int, hi: int) -> tuple[int, int]:
    """The span of text[lo:hi].strip(): the last whitespace sought 64 KiB at a time (a copy of at most that)."""
    first = _NON_SPACE.search(text, lo, hi)
    if first is None:
        return lo, lo
    lo = first.start()
    while hi > lo:
        start = max(lo, hi - (1 << 16))
        kept = len(text[start:hi].rstrip())
        if kept:
            return lo, start + kept
        hi = start
    return lo, hi


_NON_SPACE = re.compile(r"\S")


def _decimal(token: re.Match | None) -> decimal.Decimal | None:
    """The token as a finite decimal, or None (no token, not a number, or NaN/sNaN/Infinity)."""
    if token is None:
        return None
    try:
        number = decimal.Decimal(token.group())
    except (decimal.InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def run_code(code: str | None, tests: list[dict], *, fn_name: str | None = None, timeout_s: float,
             memory_mb: int, prelude: bool = True, compare: Literal["lines", "tokens"] = "lines",
             checker: str | None = None, stop_on_failure: bool = True, backend: str | None = None) -> CodeResult:
    """Run `code` on `tests` ({"input": str, "output": str}, LiveCodeBench layout) in one sandbox.

    timeout_s is the CPU-time limit per test, memory_mb the address-space limit per test. fn_name
    selects functional mode. prelude gives the LiveCodeBench harness's implicit imports and SystemExit
    handling. compare: "lines" (LiveCodeBench) or "tokens" (testlib's default). checker: Python source
    run as `checker.py input.txt correct_output.txt solution_output.txt`; it must say yes explicitly: exit 0
    with a first stdout token of 1/ok/yes/true (any case) or a finite score >= 1. It rejects by exiting 1
    or 2, or exiting 0 with 0/no/false/wrong/wa or a score below 1; anything else (silence, a crash, another
    exit code, an unparsable reply) is checker_error, never accepted. Output a checker could be fooled by
    is a wrong answer before the checker runs, in the checker's sandboxed job (graders.screen): a token that
    float() or Decimal reads as NaN or an infinity, split as JSON and CSV are ("1e309", "[NaN, NaN]",
    "nan,nan"), an empty output, or a count of numbers (whatever separates them) other than a real-valued
    answer's, or none for an integer one ("[]"). The checker's eval reads literals only (the answer as data).
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
    if checker is not None:  # the screen ("1e309", "[NaN, NaN]", "[]", empty) runs in the checker's job
        result.verdict, result.message = _run_checker(sandbox, checker, test["input"], expected, raw.stdout)
        return result
    if fn_name:
        want = json.loads(expected)
        bound = _JSON_FACTOR * len(json.dumps(want)) + _JSON_SLACK
        if len(raw.stdout) > bound:
            result.verdict = "output_limit"
            result.message = f"returned {len(raw.stdout)} characters of JSON for an answer of {len(expected)}: not parsed"
            return result
        try:
            ok = json.loads(raw.stdout) == want
        except (ValueError, RecursionError):  # any bytes give a verdict: "[" * 10**6 recurses
            ok = False
    else:
        ok = (lcb_output_matches if compare == "lines" else tokens_match)(raw.stdout, expected)
    if not ok:
        result.verdict = "wrong_answer"
        result.message = f"expected {expected[:200]!r}, got {raw.stdout[:200]!r}"
    return result


def _run_checker(sandbox: Sandbox, checker: str, test_input: str, expected: str, output: str) -> tuple[str, str]:
    """The checker's verdict, in a sandboxed job that first screens the output (graders.screen, under the
    job's limits: none of it runs in the grader's process) and gives the checker `eval` for data only."""
    files = {"input.txt": test_input, "correct_output.txt": expected, "solution_output.txt": output}
    nonce = secrets.token_hex(8)
    raw = sandbox.run(Job(code=checker_program(checker, nonce), cpu_s=_CHECKER_CPU_S, memory_mb=1024,
                          filename="checker.py", argv=("checker.py", *files), files=files))
    if raw.exit_code == REFUSED_STATUS and raw.stdout.startswith(nonce + " ") and not (raw.error or raw.limit):
        return "wrong_answer", raw.stdout[len(nonce) + 1:].strip()[:200]
    if raw.error or not raw.compiled or raw.limit or raw.exit_code not in (0, 1, 2):
        return "checker_error", f"checker failed: {raw.error or raw.stderr.strip()[-200:] or raw.limit}"
    reply = raw.stdout.strip()[:200]
    if raw.exit_code != 0:
        return "wrong_answer", f"checker: {reply or 'rejected'}"
    said = _UNICODE_TOKEN.search(raw.stdout)
    if said is None:
        return "checker_error", "checker exited 0 without a reply: it must say yes (1, ok, yes, true or a score >= 1)"
    word = said.group().lower()
    score = _score(word)
    if word in _ACCEPT or (score is not None and score >= 1):
        return "accepted", ""
    if word in _REJECT or score is not None:
        return "wrong_answer", f"checker: {reply}"
    return "checker_error", f"checker's reply is neither yes nor no: {reply[:100]!r}"


def _score(token: str) -> float | None:
    """The token as a finite score, or None."""
    try:
        score = float(token)
    except ValueError:
        return None
    return score if math.isfinite(score) else None
