"""Benchmark (CPU): grading throughput of the code sandbox, in program runs (tests) per second.

The fixed set: every public test of the LiveCodeBench records in ../shared/data/lcb_sample.jsonl, each
run by a program that reads its input and prints one line (a `class Solution` method returning 0 for
functional records), so every run is a wrong answer and every test runs (stop_on_failure=False). What
is timed is then the sandbox's cost per run (start-up, isolation, limits, reply), which is what the
grader's isolation costs; a real solution's own CPU comes on top. One grading thread unless --workers.

    python perf/sandbox_throughput.py                       # the default backend, 3 repeats
    GSPO_SANDBOX_BACKEND=unshare python perf/sandbox_throughput.py --repeats 5 --workers 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from gspo.evals.graders.code import run_code_many
from gspo.evals.sandbox import sandbox_backend

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "lcb_sample.jsonl"


def items(path: Path) -> list[dict]:
    """run_code arguments, one per record: its public tests and a program that answers every one wrongly."""
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        tests = row["public_test_cases"]
        tests = json.loads(tests) if isinstance(tests, str) else tests
        meta = row["metadata"]
        fn = (json.loads(meta) if isinstance(meta, str) else meta).get("func_name")
        code = f"class Solution:\n    def {fn}(self, *args):\n        return 0" if fn else \
            "import sys\nsys.stdin.read()\nprint(0)"
        out.append({"code": code, "tests": tests, "fn_name": fn, "timeout_s": 2.0, "memory_mb": 256,
                    "stop_on_failure": False})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    work = items(args.data)
    runs = sum(len(item["tests"]) for item in work)
    run_code_many(work[:2], workers=1)  # warm: the backend probe and imports are not timed
    rates = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        results = run_code_many(work, workers=args.workers)
        rates.append(runs / (time.perf_counter() - started))
        assert sum(len(r.tests) for r in results) == runs
    print(json.dumps({"backend": sandbox_backend(), "records": len(work), "runs": runs, "workers": args.workers,
                      "runs_per_s": [round(r, 1) for r in rates]}))


if __name__ == "__main__":
    main()
