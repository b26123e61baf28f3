"""A launcher's workers cannot outlive the `gspo` process that started them: each watches it from its birth
(joblib's loky backend starts every worker with `watch_parent`), and once it is gone (a SIGKILL or SIGTERM leaves the
workers orphaned, each training on) the worker interrupts its run, which the trainer keeps resumable, and exits. A
worker's own death (the OOM killer's SIGKILL) reaches the sweep as joblib's TerminatedWorkerError (`worker_died`)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from gspo.study.launch import PLUGINS, plugin_installed

_WATCHED, _ORPHANED = threading.Event(), threading.Event()
PARENT_ENV = "GSPO_SWEEP_PARENT"  # the `gspo` process's pid, set before any worker starts; workers inherit it


def watch_parent(parent: int, every: float = 1.0, grace: float = 120.0) -> None:
    """In a launcher's worker process (joblib's), from its birth (the loky backend's initializer, `watched_loky`)
    or its first job: once `parent`, the `gspo` process that started it, is gone, SIGTERM to itself, which the
    trainer takes as an interruption: the run is kept resumable, and no orphan trains on beside the sweep a user
    resumes; an idle worker just ends. A job then exits the worker (study/job.py); one that has not within `grace`
    seconds is ended. `parent` is taken in the parent before any job starts: a worker that finds itself orphaned
    already (the compare killed while its workers were starting) ends at once, before it takes a queued job. Polls
    the parent pid (not the kernel's PR_SET_PDEATHSIG, which fires when the thread that forked the worker ends:
    loky starts some from a thread)."""
    if os.getppid() != parent:
        os._exit(143)
    if _WATCHED.is_set():
        return
    _WATCHED.set()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        _ORPHANED.set()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace)
        os._exit(143)

    threading.Thread(target=watch, daemon=True, name="gspo-parent-watch").start()


def die_with_parent() -> None:
    """At a job's start in a joblib worker: `watch_parent` of the pid the sweep's parent set (PARENT_ENV) before
    starting its workers; a worker without it (started by another program) watches the parent it has now."""
    watch_parent(int(os.environ.get(PARENT_ENV) or os.getppid()))


def watched_loky() -> None:
    """Make joblib's `loky` backend (the one Hydra's joblib launcher names) start each worker with
    `watch_parent` of this process, so a worker is watched from its birth, idle or not. The parent's pid is
    also left in PARENT_ENV for the jobs."""
    os.environ[PARENT_ENV] = str(os.getpid())
    if not plugin_installed(PLUGINS["joblib"]):
        return
    import joblib
    from joblib._parallel_backends import LokyBackend

    class WatchedLoky(LokyBackend):
        def configure(self, *args, **kwargs):
            return super().configure(*args, initializer=watch_parent, initargs=(os.getpid(),), **kwargs)

    joblib.register_parallel_backend("loky", WatchedLoky)


def orphaned() -> bool:
    """Whether this worker's `gspo` process is gone (a function: the Hydra job is pickled by value to joblib's
    workers, and an Event in its globals would not pickle)."""
    return _ORPHANED.is_set()


@contextmanager
def raw_errors(on: bool) -> Iterator[None]:
    """`on`: Hydra passes a launcher's exception on (HYDRA_FULL_ERROR) instead of printing it as a traceback of
    its own, so a worker's death reaches the sweep, which says it in one line."""
    before = os.environ.get("HYDRA_FULL_ERROR")
    if on:
        os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if on and before is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        elif on:
            os.environ["HYDRA_FULL_ERROR"] = before


def worker_died(e: BaseException) -> bool:
    """Whether `e` is joblib's word that one of its workers was killed (a SIGKILL, the OOM killer)."""
    return type(e).__name__ == "TerminatedWorkerError"
