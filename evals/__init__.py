"""Benchmarks and graders: functions of text, no model code. The graders double as training rewards.

    from gspo.evals import grade_math, run_code
    grade_math("... so the answer is \\boxed{204}", "204")          # True
    run_code(src, tests, fn_name=None, timeout_s=6, memory_mb=512)   # CodeResult(verdict=..., tests=[...])

Layout: `arith` (the embedded task: problems and grader), `graders/` (math, code, codeforces),
`benchmarks/` (one module per benchmark, their types and the registry), `sandbox/` (running
model-written code; its public face is the package), `records` (reading local and hub datasets, shared
with gspo.trainer.tasks.registry), `passk`, `parallel`, `regrade` (`gspo grade`).
"""

from gspo.evals.arith import grade_arith
from gspo.evals.graders.code import CodeResult, extract_code, run_code
from gspo.evals.graders.math import grade_math

__all__ = ["CodeResult", "extract_code", "grade_arith", "grade_math", "run_code"]
