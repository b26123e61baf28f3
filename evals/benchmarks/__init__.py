"""Benchmarks: one module each (aime, arith, livecodebench, codeforces), what a benchmark is (`types`:
Problem, Verdict, Benchmark, score_verdicts) and the registry that loads them by name (`registry`).

    from gspo.evals.benchmarks import load_benchmark
    bench = load_benchmark("aime24", path="aime24.jsonl", limit=5)

Dataset reading shared with the training tasks lives in gspo.evals.records; graders in gspo.evals.graders.
"""

from gspo.evals.benchmarks.registry import BENCHMARK_NAMES, load_benchmark, register_benchmark
from gspo.evals.benchmarks.types import Benchmark, Problem, Verdict, score_verdicts

__all__ = ["BENCHMARK_NAMES", "Benchmark", "Problem", "Verdict", "load_benchmark", "register_benchmark",
           "score_verdicts"]
