"""AIME 2024 and 2025 (30 problems each, integer answers) and MATH-500, graded by grade_math.

Defaults are the hub datasets users know: HuggingFaceH4/aime_2024 (split train; id, problem, solution,
answer) and math-ai/aime25 (split test; id, problem, answer). Any local .jsonl/.json file or other hub
id works too, e.g. opencompass/AIME2025 with subset=["AIME2025-I", "AIME2025-II"], split="test"
(question, answer): columns are auto-detected (problem/question, answer/solution) or named with
problem_key/answer_key/id_key. A `solution` column works as gold because grade_math reads its \\boxed{}.
The prompt is the standard "Please reason step by step, and put your final answer within \\boxed{}."
suffix (Qwen2.5-Math, DeepSeek-R1). Metrics: avg@k (the paper reports avg@32) and unbiased pass@k.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks.types import Problem, Verdict, score_verdicts
from gspo.evals.graders.math import grade_math_batch
from gspo.evals.records import is_missing, load_hub_rows, pick_key, read_records

PROMPT_TEMPLATE = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{{}}."

# name -> (hub id, split)
HUB_DEFAULTS = {
    "aime24": ("HuggingFaceH4/aime_2024", "train"),
    "aime25": ("math-ai/aime25", "test"),
    "math500": ("HuggingFaceH4/MATH-500", "test"),  # Lightman et al.'s 500 MATH test problems (problem, answer)
}
PROBLEM_KEYS = ("problem", "question", "Problem", "Question", "prompt")
ANSWER_KEYS = ("answer", "Answer", "expected_answer", "solution", "Solution")
ID_KEYS = ("id", "ID", "problem_idx", "idx", "question_id", "unique_id")


@dataclass
class MathBenchmark:
    """Problems whose gold is an answer string, graded by grade_math."""

    name: str
    problems: list[Problem]

    def grade(self, problem: Problem, responses: list[str], *, workers: int = 1) -> list[Verdict]:
        results = grade_math_batch(responses, [problem.gold] * len(responses), workers=workers)
        return [
            Verdict(correct=ok, reward=float(ok), verdict="correct" if ok else "wrong_answer", detail={})
            for ok in results
        ]

    def score(self, verdicts: list[list[Verdict]], k: int) -> dict[str, float]:
        return score_verdicts(verdicts, k)


def _aime(
    name: str,
    *,
    path: str | None = None,
    limit: int | None = None,
    hub_id: str | None = None,
    split: str | None = None,
    subset: str | list[str] | None = None,
    problem_key: str | None = None,
    answer_key: str | None = None,
    id_key: str | None = None,
    prompt_template: str = PROMPT_TEMPLATE,
) -> MathBenchmark:
    if path is not None:
        source, rows = str(path), read_records(path)
    else:
        default_id, default_split = HUB_DEFAULTS[name]
        source = hub_id or default_id
        subsets = subset if isinstance(subset, list | tuple) else [subset]
        hub_rows = load_hub_rows(source, split=split or default_split, subsets=subsets)
        rows = list(enumerate(hub_rows, start=1))
    problems = [
        _problem(rec, row, source, problem_key, answer_key, id_key, prompt_template) for row, rec in rows
    ]
    if not problems:
        raise GspoError(f"{source}: no problems found")
    return MathBenchmark(name=name, problems=problems[:limit])


# Registry factories; partial keeps _aime's keyword signature, which load_benchmark checks options against.
aime24 = partial(_aime, "aime24")
aime25 = partial(_aime, "aime25")
math500 = partial(_aime, "math500")  # MATH-500: the same kind of benchmark (a boxed answer graded by grade_math)


def _problem(
    rec: dict,
    row: int,
    source: str,
    problem_key: str | None,
    answer_key: str | None,
    id_key: str | None,
    template: str,
) -> Problem:
    pkey = pick_key(rec, problem_key, PROBLEM_KEYS)
    akey = pick_key(rec, answer_key, ANSWER_KEYS)
    if pkey is None or is_missing(rec[pkey]):
        raise GspoError(f"{source}: row {row} has no problem text ({_looked(problem_key, PROBLEM_KEYS)})")
    if akey is None or is_missing(rec[akey]):
        raise GspoError(f"{source}: row {row} has no answer ({_looked(answer_key, ANSWER_KEYS)})")
    ikey = pick_key(rec, id_key, ID_KEYS)
    pid = str(rec[ikey]) if ikey is not None and not is_missing(rec[ikey]) else str(row)
    return Problem(
        id=pid,
        prompt=template.format(problem=str(rec[pkey]).strip()),
        gold=str(rec[akey]).strip(),
        meta={"source": source, "row": row},
    )


def _looked(wanted: str | None, candidates: tuple[str, ...]) -> str:
    if wanted is not None:
        return f"column {wanted!r}"
    return "looked for " + "/".join(candidates)
