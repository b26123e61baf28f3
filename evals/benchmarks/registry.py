"""Benchmark registry: a name -> a loaded Benchmark (problems + grader + metrics).

A factory is called as `factory(path=..., limit=..., **options)` and returns a Benchmark; its keyword
parameters beyond path and limit are the benchmark's options, and an unknown one is a one-line error.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks.aime import HUB_DEFAULTS, aime24, aime25, math500
from gspo.evals.benchmarks.arith import arith_benchmark
from gspo.evals.benchmarks.codeforces import CF_HUB_ID, codeforces_benchmark
from gspo.evals.benchmarks.livecodebench import HUB_ID as LCB_HUB_ID
from gspo.evals.benchmarks.livecodebench import livecodebench
from gspo.evals.benchmarks.types import Benchmark

_REGISTRY: dict[str, Callable[..., Benchmark]] = {}
_GRADER: dict[str, str | None] = {}
_HUB: dict[str, str | None] = {}
BENCHMARK_NAMES: list[str] = []  # kept in step with the registry, in place


def register_benchmark(name: str, factory: Callable[..., Benchmark], *, grader: str | None = None,
                       hub: str | None = None) -> None:
    """Make `load_benchmark(name, ...)` call `factory(path=..., limit=..., **options)`. `grader`: the grader
    `gspo grade` regrades the benchmark's eval_samples.jsonl rows with (gspo.evals.regrade.GRADERS); None: not
    regradable from the file (CodeForces judges with the problem's own checker and limits, which a row does not
    keep: `gspo eval` regrades it). `hub`: the Hugging Face dataset it reads by default (None: it reads none,
    e.g. arith), which `gspo fetch` downloads and an offline run checks for before it loads anything."""
    _REGISTRY[name] = factory
    _GRADER[name] = grader
    _HUB[name] = hub
    BENCHMARK_NAMES[:] = sorted(_REGISTRY)


def unregister_benchmark(name: str) -> None:
    del _REGISTRY[name], _GRADER[name], _HUB[name]
    BENCHMARK_NAMES[:] = sorted(_REGISTRY)


def benchmark_grader(name: str) -> str | None:
    """The grader a registered benchmark's rows are regraded with (register_benchmark's `grader`)."""
    return _GRADER[name]


register_benchmark("arith", arith_benchmark, grader="arith")
register_benchmark("aime24", aime24, grader="math", hub=HUB_DEFAULTS["aime24"][0])
register_benchmark("aime25", aime25, grader="math", hub=HUB_DEFAULTS["aime25"][0])
register_benchmark("math500", math500, grader="math", hub=HUB_DEFAULTS["math500"][0])
register_benchmark("livecodebench", livecodebench, grader="code", hub=LCB_HUB_ID)
register_benchmark("codeforces", codeforces_benchmark, grader=None, hub=CF_HUB_ID)


def hub_dataset(name: str, *, path: str | None = None, **options) -> str | None:
    """The Hugging Face dataset `load_benchmark(name, path=path, **options)` would read: its `hub_id` option,
    else the registered default; None for a local file or a benchmark that reads none."""
    if name not in _REGISTRY:
        raise GspoError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARK_NAMES)}")
    return None if path is not None else options.get("hub_id") or _HUB[name]


def load_benchmark(name: str, *, path: str | None = None, limit: int | None = None, **options) -> Benchmark:
    """Load a benchmark by name; `path` is a local file overriding the hub, `limit` keeps the first N."""
    if name not in _REGISTRY:
        raise GspoError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARK_NAMES)}")
    if limit is not None and limit < 1:
        raise GspoError(f"benchmark limit must be a positive number of problems, got {limit}")
    factory = _REGISTRY[name]
    try:
        inspect.signature(factory).bind(path=path, limit=limit, **options)
    except TypeError:
        known = [p for p in inspect.signature(factory).parameters if p not in ("path", "limit")]
        unknown = sorted(set(options) - set(known)) or sorted(options)
        raise GspoError(
            f"unknown option for benchmark {name!r}: {', '.join(unknown)}; known: {', '.join(known) or 'none'}"
        ) from None
    bench = factory(path=path, limit=limit, **options)
    seen: set[str] = set()
    for problem in bench.problems:  # a repeated id would drop a problem wherever problems are keyed by id
        if problem.id in seen:
            raise GspoError(f"benchmark {name} ({path or options.get('hub_id') or 'hub'}): problem id {problem.id!r} "
                            "appears twice; give each problem its own id (question_id), or drop the copy")
        seen.add(problem.id)
    return bench
