"""The embedded task's held-out split as a benchmark (`bench=arith`), so that every run has an eval with
no network: the same problems `gspo train` evaluates with the same settings."""

from __future__ import annotations

from dataclasses import dataclass

from gspo.conf.errors import GspoError
from gspo.conf.schema import TaskConfig
from gspo.evals.arith import extract_answer, grade_arith, make_split
from gspo.evals.benchmarks.types import Problem, Verdict, score_verdicts


@dataclass
class ArithBenchmark:
    """The embedded task's held-out split as a benchmark, so that every run has an eval with no network."""

    name: str
    problems: list[Problem]

    def grade(self, problem: Problem, responses: list[str], *, workers: int = 1) -> list[Verdict]:
        return [Verdict(ok, float(ok), "correct" if ok else "wrong_answer", {"extracted": extract_answer(r)})
                for r in responses for ok in [grade_arith(r, problem.gold)]]

    def score(self, verdicts: list[list[Verdict]], k: int) -> dict[str, float]:
        return score_verdicts(verdicts, k)


def arith_benchmark(*, path: str | None = None, limit: int | None = None, min_digits: int = TaskConfig.min_digits,
                    max_digits: int = TaskConfig.max_digits, ops: str = TaskConfig.ops, n: int = 128) -> ArithBenchmark:
    """The held-out arithmetic problems (the same ones `gspo train` evaluates with these settings; the digits and
    ops default to the schema's arith task)."""
    if path is not None:
        raise GspoError("the arith benchmark is generated, not read: drop its path")
    problems = make_split("test", limit or n, seed=0, min_digits=min_digits, max_digits=max_digits, ops=ops)
    return ArithBenchmark("arith", [Problem(id=p.prompt, prompt=p.prompt, gold=p.gold) for p in problems])
