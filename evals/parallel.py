"""Grading in parallel: a thread pool whose calls each start their own sandboxed processes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TypeVar

from rich.progress import track

_T = TypeVar("_T")
_R = TypeVar("_R")


def parallel_map(fn: Callable[[_T], _R], items: Iterable[_T], *, workers: int | None = None,
                 progress: bool = False, description: str = "grading") -> list[_R]:
    """`[fn(x) for x in items]` on a thread pool (each call spawns its own sandboxed processes).

    workers defaults to the number of CPUs; progress shows a rich progress bar."""
    items = list(items)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        results: list = [None] * len(items)
        done = as_completed(futures)
        if progress:
            done = track(done, total=len(items), description=description)
        for future in done:
            results[futures[future]] = future.result()
    return results
