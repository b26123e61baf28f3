"""Code as a training task: LiveCodeBench or CodeForces problems, rewarded in the code sandbox.

Problems come from the loaders `gspo eval` uses (`task.benchmark`: livecodebench or codeforces; a local
JSONL or a hub id in `task.dataset`), with the same prompt and system message, so what is trained is
what is evaluated. The code is the response's last fenced block (`extract_code`, as LiveCodeBench), run
by `run_code` with the arguments each benchmark's grader uses:

    reward = 1 if every test passes else 0              task.code_reward=all (the eval's verdict)
    reward = (tests passed) / (tests)                    task.code_reward=fraction (every test runs)

Completions are graded `task.workers` at a time, each in its own sandbox. Time is limited per test
(CPU seconds: `task.timeout_s`, LiveCodeBench's by default, or a CodeForces problem's own limit), so one
sample takes at most its number of tests times that. Interactive CodeForces problems cannot be graded
and are left out; a problem with no tests is an error, since any program would pass it.
"""

from __future__ import annotations

from functools import partial

from gspo.conf.errors import GspoError
from gspo.conf.schema import TaskConfig
from gspo.evals.benchmarks import Problem, load_benchmark
from gspo.evals.benchmarks.livecodebench import MEMORY_MB
from gspo.evals.graders.code import extract_code, run_code
from gspo.evals.parallel import parallel_map
from gspo.trainer.tasks.task_types import Item, Task, hold_out, is_local, require_dataset, uniform_draw
from gspo.vocab.choices import CodeReward


def code_task(cfg) -> Task:
    """A Task over the problems of `cfg.dataset` (task group, kind=code)."""
    require_dataset(cfg)
    source = {"path": cfg.dataset} if is_local(cfg.dataset) else {"hub_id": cfg.dataset}
    problems = {}
    for p in load_benchmark(cfg.benchmark, **source).problems:
        if p.meta.get("interactive"):
            continue
        if not p.gold:
            raise GspoError(f"task.dataset={cfg.dataset}: problem {p.id} has no tests; a code task is rewarded "
                            f"by its tests")
        problems[p.id] = p
    items, held_out = hold_out([Item(p.prompt, p.id, system=p.meta.get("system")) for p in problems.values()],
                               cfg.eval_size)
    score = partial(_rewards, problems, fraction=cfg.code_reward == CodeReward.FRACTION, timeout_s=cfg.timeout_s,
                    workers=cfg.workers)
    return Task(name=cfg.name, eval_items=held_out, _draw=uniform_draw(items), _score=score, grader="code")


def _rewards(problems: dict[str, Problem], responses: list[str], golds: list[str], *, fraction: bool,
             timeout_s: float, workers: int) -> list[float]:
    jobs = [(r, problems[g]) for r, g in zip(responses, golds, strict=True)]
    return parallel_map(lambda job: code_reward(*job, fraction=fraction, timeout_s=timeout_s), jobs, workers=workers)


def code_reward(response: str, problem: Problem, *, fraction: bool = False,
                timeout_s: float = TaskConfig.timeout_s) -> float:
    """The reward of one response to one problem (see the module doc); 0 without a code block."""
    code = extract_code(response or "")
    if code is None:
        return 0.0
    result = run_code(code, problem.gold, stop_on_failure=not fraction, **_run_args(problem, timeout_s))
    if not fraction:
        return float(result.passed)
    return sum(t.verdict == "accepted" for t in result.tests) / max(1, result.n_tests)


def _run_args(problem: Problem, timeout_s: float) -> dict:
    """run_code's limits and comparison for a problem, as its benchmark's grader sets them."""
    meta = problem.meta
    if "time_limit_ms" in meta:  # CodeForces: its own limits, token comparison, a checker when it has one
        return {"timeout_s": meta["time_limit_ms"] / 1000, "memory_mb": meta["memory_limit_mb"], "prelude": False,
                "compare": "tokens", "checker": meta.get("checker")}
    return {"fn_name": meta.get("fn_name"), "timeout_s": timeout_s, "memory_mb": MEMORY_MB}
