"""CodeForces grading of one response and the pass rate (problems: gspo.evals.codeforces.problems; rating:
gspo.evals.codeforces.rating).

Grading: each test under the problem's own limits (time_limit_ms as the CPU limit per test), output
compared as whitespace tokens (testlib's default checker). Interactive problems are never run: their
verdict is "skipped" and the pass rate counts them apart. Problems that may accept several answers are
judged by their checker when the row has one, else by token comparison with the note "no_checker".
"""

from __future__ import annotations

from gspo.evals.graders.code import CodeResult, extract_code, run_code


def grade_codeforces(response: str, problem: dict, *, extract: bool = True, time_scale: float = 1.0,
                     backend: str | None = None) -> CodeResult:
    """Judge a model response (or, with extract=False, a program) on one problem."""
    if problem["interactive"]:
        return CodeResult("skipped", n_tests=len(problem["tests"]), message="interactive problem: not graded")
    code = extract_code(response) if extract else response
    if code is None:
        return CodeResult("wrong_answer", n_tests=len(problem["tests"]), message="no code block in the response")
    checker = problem.get("checker")
    result = run_code(code, problem["tests"], timeout_s=problem["time_limit_ms"] / 1000 * time_scale,
                      memory_mb=problem["memory_limit_mb"], prelude=False, compare="tokens", checker=checker,
                      backend=backend)
    if problem["may_need_checker"] and checker is None:
        result.notes.append("no_checker")
    return result


def codeforces_pass_rate(results: list[CodeResult]) -> dict[str, float]:
    """Share of graded (non-interactive) results accepted; skipped and no-checker results counted apart."""
    graded = [r for r in results if r.verdict != "skipped"]
    accepted = sum(r.passed for r in graded)
    return {"pass_rate": accepted / len(graded) if graded else 0.0, "graded": len(graded), "accepted": accepted,
            "skipped_interactive": len(results) - len(graded),
            "no_checker": sum("no_checker" in r.notes for r in graded)}
