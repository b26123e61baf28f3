"""What a benchmark is: its problems, the verdicts its grader gives, and how verdicts become metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

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


def is_count(name: str) -> bool:
    """`n_problems`, `n_skipped`, `n_no_checker`: how many problems a score is over, not a score; evals.jsonl
    keeps them as fields of each metric row."""
    return name.startswith("n_")


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
