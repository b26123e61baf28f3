"""`gspo sweep` (= `gspo train -m`) and Hydra's own flags: Hydra's multirun, driven from Typer.

Hydra's maintainers intend `@hydra.main` to own the command line, and the compose API alone gives up
multirun and launchers; so these commands hand their arguments to a `hydra.main` job (sys.argv set,
function called), and each job runs the same `train` as `gspo train`. Any Hydra launcher or sweeper
works (`hydra/launcher=joblib|submitit_local`, `hydra/sweeper=optuna`, from the optional extras); a job
returns the final value of `objective=` (default eval/<task>/accuracy) for a search sweeper to maximize
or minimize (hydra.sweeper.direction=). A launcher that runs n jobs at once gets cores // n torch
threads per job, so parallel jobs do not oversubscribe the cores.

A sweep lives in results/sweeps/<stamp>/ (or hydra.sweep.dir=): Hydra's per-job folders, and
runs/<job>.json naming each job's run directory (with its process id, start and end time), written as
the job starts and as it ends, so `gspo report` finds the runs of a sweep still going or killed. W&B: the sweep's runs share the group
`sweep-<stamp>` and are tagged with their algorithm and swept values.

A training sweep resumes: sweep.json holds its overrides, stamp and planned jobs, and the same command
with the same hydra.sweep.dir= keeps the stamp (so each job's run id), skips the jobs whose run finished,
resumes the others' runs, and keeps each earlier attempt in the job's record (`attempts`). The report
names the planned jobs that never ran and those whose run died, failed or was interrupted.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from shlex import quote

import hydra
import typer
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from gspo.algos import ALGOS
from gspo.cli.errors import one_line_errors
from gspo.conf import validate_config
from gspo.conf.compose import run_config
from gspo.conf.errors import GspoError
from gspo.conf.keys import bare_lists
from gspo.conf.overrides import MULTIRUN, check_sweep_overrides, first_job, planned_jobs, swept_keys
from gspo.conf.resume import continued_config
from gspo.conf.schema import register_configs
from gspo.report import SWEEP_PLAN, SWEEP_RUNS, load_run, run_value, sweep_job, sweep_jobs, sweep_runs
from gspo.trainer.run.records import RecordError, read_sweep_plan, relative_run_dir
from gspo.trainer.run.rundir import atomic_write_text, read_jsonl_lines, read_status
from gspo.vocab.metrics import EVAL, EVAL_ACCURACY, TIME_STEP

PLUGINS = {"submitit": "hydra_submitit_launcher", "joblib": "hydra_joblib_launcher"}  # launcher name prefix -> plugin
GIB_PER_JOB = 2  # memory allowed per job run at once by default: a job of the embedded model peaks near 0.75 GiB RSS
QUIET = ["hydra.job.chdir=false", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]


def run_sweep(args: list[str], preset_keys: tuple[str, ...] = (), command: str = "train",
              preset_params: dict[str, str] | None = None, report_hint: bool = True,
              again: str | None = None, at_once: bool = False, again_dir: Path | None = None) -> Path:
    """Run every job of the sweep; print where the runs are and (`report_hint`; not when the caller writes the
    report itself, as `gspo compare` does) the report command. Returns the sweep dir.
    `command` "eval": each job is a `gspo eval` writing to <sweep dir>/<job> (or its eval.run / eval.output).
    A training sweep run again with the same folder (hydra.sweep.dir=) and overrides resumes it: the
    sweep keeps its stamp (so its jobs' run ids), finished jobs are skipped, interrupted ones resumed.
    `preset_params`: a preset's hydra.sweeper.params, for the plan of jobs (SWEEP_PLAN). `again`: the command
    that resumes this sweep, as an interruption prints it (default `gspo sweep <its overrides>`), with
    hydra.sweep.dir=`again_dir` (default: this sweep's folder; an until=resolved round's: the experiment's). `at_once`
    (`gspo compare`): with no launcher named, run the jobs several at once where that is measured faster
    (`jobs_at_once`)."""
    register_configs()
    overrides = bare_lists([a for a in args if a not in MULTIRUN])  # eval.benches=aime24 as in gspo train
    resume = [a for a in overrides if a.startswith("resume=")]
    overrides = [a for a in overrides if not a.startswith("resume=")]
    check_sweep_overrides(overrides, command)
    check_launcher(overrides)
    if command == "train":
        overrides, folded = fold_equal_arms(overrides, preset_params)
        for note in folded:
            typer.echo(f"note: {note}", err=True)
    stamp = new_stamp()
    given = [a.split("=", 1)[1] for a in overrides if a.startswith("hydra.sweep.dir=")]
    sweep_dir = Path(sweep_folder(given[-1]) if given else f"results/sweeps/{stamp}")
    overrides = [a for a in overrides if not a.startswith("hydra.sweep.dir=")] + ([f"hydra.sweep.dir={sweep_dir}"]
                                                                                  if given else [])
    if command == "train":
        stamp = _plan(sweep_dir, overrides, stamp, preset_params, resume=bool(resume))
    elif resume:
        raise GspoError("resume= is for training runs: an eval sweep runs its evals again")
    os.environ["GSPO_SWEEP"] = stamp
    os.environ["GSPO_SWEPT"] = " ".join(dict.fromkeys([*preset_keys, *swept_keys(overrides)]))
    os.environ["GSPO_COMMAND"] = command
    launcher = []
    if at_once and command == "train":
        n = jobs_at_once(overrides, preset_params)
        if n > 1:  # not in the sweep's plan: how its jobs are laid out on the cores does not change them
            launcher = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n}"]
            typer.echo(f"sweep: {n} jobs at once, {_threads(n)} torch thread(s) each (on CPU cores the embedded "
                       "model's runs finish sooner side by side; hydra/launcher=basic runs them one at a time)", err=True)
    sys.argv = [f"gspo {command}", "--multirun", f"hydra.sweep.dir={sweep_dir}", *QUIET, *overrides, *launcher]
    head = again or "gspo sweep " + " ".join(quote(a) for a in args if a not in MULTIRUN
                                             and not a.startswith(("hydra.sweep.dir=", "resume=")))
    resume_line = f"{head} {quote(f'hydra.sweep.dir={again_dir or sweep_dir}')}"
    watched_loky()  # before any worker starts: each watches this process from its birth
    joblib_jobs = any("joblib" in a for a in sys.argv if a.startswith("hydra/launcher="))
    try:
        with _raw_errors(joblib_jobs):
            _job()
    except KeyboardInterrupt:
        if command == "train":
            typer.echo(f"interrupted: the sweep is kept; resume it (finished jobs skipped): {resume_line}", err=True)
        raise
    except Exception as e:
        if not _worker_died(e):
            raise
        raise GspoError("a job's worker process was killed (a SIGKILL, as the OOM killer sends; each job of the embedded "
                        f"model needs ~{GIB_PER_JOB} GiB), and joblib ended the other jobs with it; every run is kept: "
                        f"resume the sweep (finished jobs skipped): {resume_line}") from None
    if command == "eval":
        typer.echo(f"evals finished: one folder per job under {sweep_dir}")
        return sweep_dir
    runs = sweep_runs(sweep_dir)
    typer.echo(f"sweep finished: {len(runs)} run(s), listed in {sweep_dir / SWEEP_RUNS}/")
    for run in runs:
        typer.echo(f"  {run}")
    if report_hint:
        typer.echo(f"compare them: gspo report {quote(str(sweep_dir))} --out {quote(str(sweep_dir / 'report'))}")
    return sweep_dir


def new_stamp() -> str:
    """A new sweep's stamp (its default folder, and every job's run id): the time, and a random part, so two
    sweeps started in the same second never share a folder or a run."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}_{secrets.token_hex(3)}"


_NOW = re.compile(r"\$\{now:([^}]*)\}")


def sweep_folder(given: str) -> str:
    """hydra.sweep.dir= as the sweep's folder: `${now:FORMAT}` is the time now (as Hydra's own default uses
    it); any other interpolation is one line, never a literal `${...}` folder."""
    folder = _NOW.sub(lambda m: time.strftime(m.group(1)), given)
    if "${" in folder:
        raise GspoError(f"hydra.sweep.dir={given}: only ${{now:FORMAT}} is filled in here (the sweep's folder is made "
                        "before Hydra starts); give a plain path")
    return folder


def _given(key: str, overrides: list[str], params: dict[str, str]) -> str | None:
    """The value a sweep gives `key`: the command line's (it wins over a preset's params), else the preset's."""
    said = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == key]
    return said[-1] if said else params.get(key)


def fold_equal_arms(overrides: list[str], params: dict[str, str] | None) -> tuple[list[str], list[str]]:
    """Arms that are provably the same under the sweep's config are not run twice: (overrides, notes). What
    equals what is each algorithm's registration (gspo.algos.register: same_as, on_policy_as), never a name
    here. An algorithm that equals another when every sequence has one advantage (algo.advantage=group, no
    token-level correction: GSPO-token and GSPO, GSPO paper eqs. 13-14) is dropped from an algo= list holding
    both, with a note. On-policy (train.minibatches=1 train.epochs=1) two algorithms whose gradients are then
    equal (every ratio is 1: GSPO and GRPO) are refused. Keys this cannot see (a preset's own settings) leave
    the arms as they are. An algo= entry that is a preset of another name (grpo_replay) is left to the config."""
    params = params or {}
    algos = (_given("algo", overrides, params) or "").split(",")
    notes = []
    known = {a: ALGOS[a] for a in algos if a in ALGOS}
    on_policy = _given("train.minibatches", overrides, params) == "1" and \
        _given("train.epochs", overrides, params) in (None, "1")
    for spec in known.values():
        if on_policy and spec.on_policy_as in known:
            other = known[spec.on_policy_as]
            raise GspoError(f"train.minibatches=1 is on-policy: every ratio is 1, so {other.title} and {spec.title} give "
                            "the same gradient and their arms cannot differ; use train.minibatches=4 (the GSPO "
                            "paper's) or train.epochs=2")
    token_free = not any(o.split("=", 1)[0].lstrip("+").startswith(("algo.advantage", "algo.correction"))
                         for o in [*overrides, *params])
    dropped = [a for a, spec in known.items() if token_free and spec.same_as in known]
    if dropped:
        kept = ",".join(a for a in algos if a not in dropped)
        overrides = [o for o in overrides if o.split("=", 1)[0] != "algo"] + [f"algo={kept}"]
        for a in dropped:
            spec = known[a]
            notes.append(f"{spec.title} left out: with one advantage per sequence (algo.advantage=group) it equals "
                         f"{known[spec.same_as].title} in value and gradient; sweep a preset with per-token "
                         f"advantages (algo.advantage=step) to compare them")
    return overrides, notes


def _plan(sweep_dir: Path, overrides: list[str], stamp: str, params: dict[str, str] | None, *, resume: bool) -> str:
    """Write (or, for a sweep run again in its folder, check) <sweep dir>/sweep.json: the sweep's overrides,
    stamp and planned jobs. Returns the stamp the jobs are named by: the first attempt's on a rerun."""
    plan_file = sweep_dir / SWEEP_PLAN
    mine = [o for o in overrides if not o.startswith("hydra.sweep.dir=")]
    plan = {"overrides": mine, "params": params or {}, "stamp": stamp, "jobs": planned_jobs(overrides, params)}
    old = read_sweep_plan(sweep_dir)  # a damaged sweep.json is one line naming it and the field
    if old is not None:
        if (old.get("overrides"), old.get("params") or {}) != (mine, plan["params"]):
            raise GspoError(f"hydra.sweep.dir={sweep_dir} holds another sweep ({' '.join(map(str, old['overrides']))}; "
                            f"{_plan_difference(old, plan)}): run this one in another folder, or the same overrides "
                            "to resume that one")
        typer.echo(f"sweep: resuming {sweep_dir} (finished jobs are skipped, interrupted ones resumed)", err=True)
        return old["stamp"]
    if resume:
        raise GspoError(f"resume=true: {sweep_dir} holds no sweep to resume (no {SWEEP_PLAN}); a sweep resumes when "
                        "run again with the same overrides and hydra.sweep.dir=<its folder>")
    if (sweep_dir / SWEEP_RUNS).is_dir():
        raise GspoError(f"hydra.sweep.dir={sweep_dir} holds a sweep without {SWEEP_PLAN} (an older gspo's), which "
                        "cannot be resumed: use another hydra.sweep.dir=")
    atomic_write_text(plan_file, json.dumps(plan, indent=1) + "\n")
    return stamp


def _plan_difference(old: dict, new: dict) -> str:
    """How a sweep's plan differs from the one in its folder, in words; a launcher named as such (overrides that
    look alike otherwise: the launcher is easy to miss)."""
    was, now = [str(o) for o in old.get("overrides") or []], new["overrides"]
    gone, added = [o for o in was if o not in now], [o for o in now if o not in was]
    launcher = [o for o in [*gone, *added] if o.startswith(("hydra/launcher=", "hydra.launcher."))]
    said = [f"it ran with {' '.join(gone)}" if gone else "", f"this command adds {' '.join(added)}" if added else ""]
    if (old.get("params") or {}) != new["params"]:
        said.append("the preset's swept values changed")
    if launcher:
        said.append(f"another launcher ({', '.join(launcher)}): a sweep resumes under the launcher it started with")
    return "; ".join(s for s in said if s) or "its overrides are in another order"


def check_launcher(overrides: list[str]) -> None:
    """A `hydra/launcher=` whose Hydra plugin is missing (ours in conf/hydra/launcher/ build on one): one line,
    before Hydra's own many-line error."""
    for name in [o.split("=", 1)[1] for o in overrides if o.startswith("hydra/launcher=")]:
        ours = resources.files("gspo.conf").joinpath("hydra", "launcher", f"{name}.yaml")
        base = name
        if ours.is_file():
            base = next((p for p in PLUGINS if p in ours.read_text()), name)
        plugin = next((PLUGINS[p] for p in PLUGINS if base.startswith(p)), None)
        if plugin is not None and not plugin_installed(plugin):
            extra = plugin.removeprefix("hydra_").removesuffix("_launcher")
            raise GspoError(f"hydra/launcher={name} needs Hydra's {extra} launcher plugin, which is not installed: "
                            f"pip install 'gspo[{extra}]'")


def jobs_at_once(overrides: list[str], params: dict[str, str] | None = None) -> int:
    """How many jobs of a preset sweep run at once when the command line names no launcher: on a machine whose
    runs are on CPU, with the embedded model (model.name=tiny), one job per core, at most one per GIB_PER_JOB of
    memory and no more than the sweep has jobs; else 1 (Hydra's basic launcher). Measured on 2 cores
    (perf/jobs_vs_threads.py, results/time-to-answer): the default compare took 1.2x less wall time as 2 jobs at
    1 thread each than as 1 job at 2 threads, as the embedded model's small matmuls gain little from a second
    thread. A hub model's larger matmuls do gain, and its memory is the user's to plan, so it runs one at a time."""
    if any(o.startswith("hydra/launcher=") for o in overrides) or not plugin_installed(PLUGINS["joblib"]):
        return 1
    cores, jobs = os.cpu_count() or 1, len(planned_jobs(overrides, params) or [])
    n = min(cores, jobs, int(_memory_gib() // GIB_PER_JOB))
    if n < 2:
        return 1
    from gspo.conf.compose import compose_config

    cfg = compose_config(first_job([*(f"{k}={v}" for k, v in (params or {}).items()), *overrides]))
    if cfg.model.name != "tiny" or not _on_cpu(cfg.device):
        return 1
    return n


def _memory_gib() -> float:
    """The machine's physical memory in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def _on_cpu(device: str) -> bool:
    if device == "auto":
        import torch

        return not torch.cuda.is_available()
    return device.startswith("cpu")


def _threads(n_jobs: int) -> int:
    """Torch threads per job when a launcher runs `n_jobs` (>= 1) at once: the cores shared out."""
    cores = os.cpu_count() or 1
    return max(1, cores // min(n_jobs, cores))


def plugin_installed(module: str) -> bool:
    return importlib.util.find_spec(f"hydra_plugins.{module}") is not None


def run_hydra_flags(args: list[str]) -> None:
    """Hydra's own informational flags (--cfg job|hydra|all, --resolve, --info): printed by Hydra itself."""
    register_configs()
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    sys.argv = ["gspo train", *[a for a in args if a not in overrides], *QUIET, *overrides]
    _job()


def _threads_per_job() -> int | None:
    """A launcher running n jobs at once (joblib's n_jobs) gets cores // n torch threads per job."""
    n_jobs = _launcher_jobs()
    return _threads(n_jobs) if n_jobs else None


def _launcher_jobs() -> int | None:
    """The jobs this sweep's launcher runs side by side (joblib's n_jobs; -1: one per core), None if it says none."""
    n_jobs = HydraConfig.get().launcher.get("n_jobs")
    return None if not n_jobs else (os.cpu_count() or 1) if n_jobs < 0 else n_jobs


_WATCHED, _ORPHANED = threading.Event(), threading.Event()
PARENT_ENV = "GSPO_SWEEP_PARENT"  # the `gspo` process's pid, set before any worker starts; workers inherit it


def _watch_parent(parent: int, every: float = 1.0, grace: float = 120.0) -> None:
    """In a launcher's worker process (joblib's), from its birth (the loky backend's initializer, `watched_loky`)
    or its first job: once `parent`, the `gspo` process that started it, is gone (a SIGKILL or SIGTERM leaves the
    workers orphaned, each training on), SIGTERM to itself, which the trainer takes as an interruption: the run
    is kept resumable, and no orphan trains on beside the sweep a user resumes; an idle worker just ends. A job
    then exits the worker (`_job`); one that has not within `grace` seconds is ended. `parent` is taken in the
    parent before any job starts: a worker that finds itself orphaned already (the compare killed while its
    workers were starting) ends at once, before it takes a queued job. Polls the parent pid (not the kernel's
    PR_SET_PDEATHSIG, which fires when the thread that forked the worker ends: loky starts some from a thread)."""
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


def _die_with_parent() -> None:
    """At a job's start in a joblib worker: `_watch_parent` of the pid the sweep's parent set (PARENT_ENV) before
    starting its workers; a worker without it (started by another program) watches the parent it has now."""
    _watch_parent(int(os.environ.get(PARENT_ENV) or os.getppid()))


def watched_loky() -> None:
    """Make joblib's `loky` backend (the one Hydra's joblib launcher names) start each worker with
    `_watch_parent` of this process, so a worker is watched from its birth, idle or not. The parent's pid is
    also left in PARENT_ENV for the jobs."""
    os.environ[PARENT_ENV] = str(os.getpid())
    if not plugin_installed(PLUGINS["joblib"]):
        return
    import joblib
    from joblib._parallel_backends import LokyBackend

    class WatchedLoky(LokyBackend):
        def configure(self, *args, **kwargs):
            return super().configure(*args, initializer=_watch_parent, initargs=(os.getpid(),), **kwargs)

    joblib.register_parallel_backend("loky", WatchedLoky)


@contextmanager
def _raw_errors(on: bool) -> Iterator[None]:
    """`on`: Hydra passes a launcher's exception on (HYDRA_FULL_ERROR) instead of printing it as a traceback of
    its own, so a worker's death reaches `run_sweep`, which says it in one line."""
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


def _worker_died(e: BaseException) -> bool:
    """Whether `e` is joblib's word that one of its workers was killed (a SIGKILL, the OOM killer)."""
    return type(e).__name__ == "TerminatedWorkerError"


def _orphaned() -> bool:
    """Whether this worker's `gspo` process is gone (a function: `_job` is pickled by value to joblib's workers,
    and an Event in its globals would not pickle)."""
    return _ORPHANED.is_set()


def _at_once() -> int:
    """How many of the sweep's jobs run side by side (1 under Hydra's basic launcher)."""
    return _launcher_jobs() or 1


def _name_job(cfg: DictConfig, job) -> None:
    stamp = os.environ.get("GSPO_SWEEP", "sweep")
    swept = os.environ.get("GSPO_SWEPT", "").split()
    given = dict(o.split("=", 1) for o in job.override_dirname.split(",") if "=" in o)
    with open_dict(cfg):
        if cfg.run_id is None:
            cfg.run_id = f"{stamp}-{job.num}-{cfg.algo.name}-s{cfg.seed}"
        cfg.logger.group = cfg.logger.group or f"sweep-{stamp}"
        tags = [f"algo={cfg.algo.name}"] + [f"{k}={given[k]}" for k in swept if k in given and k != "algo"]
        cfg.logger.tags = list(dict.fromkeys([*cfg.logger.tags, *tags]))


def _record(hc, record: dict) -> None:
    """runs/<job>.json, its run_dir relative to the sweep folder (a copied or moved tree reads its own runs)."""
    sweep_dir = Path(hc.sweep.dir)
    record = record | {"run_dir": relative_run_dir(sweep_dir, Path(record["run_dir"]))}
    atomic_write_text(sweep_dir / SWEEP_RUNS / f"{hc.job.num}.json", json.dumps(record) + "\n")


def _planned(hc) -> str | None:
    """This job's swept values as the sweep's plan names them (`algo=grpo seed=1`), if it has a plan."""
    jobs = _plan_jobs(hc) or []
    return jobs[hc.job.num] if hc.job.num < len(jobs) else None


def job_progress(sweep_dir: Path, num: int, jobs: list | None, at_once: int = 1) -> str:
    """`job i/N` and an ETA for the jobs left (this one included) from the mean wall time of the sweep's jobs
    that finished so far, `at_once` of them running side by side; with no plan (a search sweeper) `job i`."""
    total = len(jobs) if jobs else None
    head = f"sweep job {num + 1}/{total}" if total else f"sweep job {num + 1}"
    spans = [j["ended"] - j["started"] for j in sweep_jobs(sweep_dir)
             if j.get("outcome") == "finished" and j.get("ended") and j.get("started")]
    if not total:
        return head
    if not spans:
        return f"{head}, ETA once the job has logged 2 steps"
    per_job = sum(spans) / len(spans)
    left = total - num
    waves = math.ceil(left / at_once)
    return f"{head}, ETA {_clock(per_job * waves)} for the {left} left ({_clock(per_job)} per job over {len(spans)} done" \
        + (f", {at_once} at once)" if at_once > 1 else ")")


def early_eta(run_dir: Path, steps: int, jobs: int, at_once: int = 1) -> str | None:
    """Before the sweep's first job ends: an ETA for all `jobs`, `at_once` of them side by side, from the steps
    job 1 has logged so far (its time/step_s), or None below 2 steps. Evals, cold starts and a changing load are
    not in it: it says so."""
    rows, _ = read_jsonl_lines(run_dir / "metrics.jsonl")
    times = [float(r[TIME_STEP]) for r in rows if r.get("step", 0) >= 1 and r.get(TIME_STEP) is not None]
    if len(times) < 2:
        return None
    per_step = sum(times) / len(times)
    waves = math.ceil(jobs / at_once)  # job 1 is in the first
    left = per_step * (max(steps - len(times), 0) + steps * (waves - 1))
    return (f"sweep ETA about {_clock(left)} for the {jobs} jobs (job 1's first {len(times)} steps at {per_step:.2g} "
            "s/step; held-out evals and cold starts not counted; a firmer ETA once job 1 ends)")


class _EarlyEta(threading.Thread):
    """Says `early_eta` once, as soon as job 1 has logged two steps (polled every few seconds)."""

    def __init__(self, run_dir: Path, steps: int, jobs: int, say, every: float = 5.0, at_once: int = 1):
        super().__init__(daemon=True)
        self.args, self.say, self.every, self.done = (run_dir, steps, jobs, at_once), say, every, threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            line = early_eta(*self.args)
            if line:
                self.say(line)
                return


def _early_eta(hc, run_dir: Path, steps: int) -> _EarlyEta | None:
    """While no job of a planned sweep of several has finished, a watcher that says `early_eta` (started)."""
    jobs = _plan_jobs(hc)
    if not jobs or len(jobs) < 2 or hc.job.num > 0 or any(j.get("outcome") == "finished"
                                                           for j in sweep_jobs(Path(hc.sweep.dir))):
        return None
    watch = _EarlyEta(run_dir, steps, len(jobs), lambda m: typer.echo(m, err=True), at_once=_at_once())
    watch.start()
    return watch


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _plan_jobs(hc) -> list | None:
    try:
        return (read_sweep_plan(Path(hc.sweep.dir)) or {}).get("jobs") or None
    except RecordError:
        return None


def _attempts(hc) -> list[dict]:
    """The earlier attempts at this job (a sweep run again in its folder), each as its record had it."""
    old = sweep_job(Path(hc.sweep.dir), hc.job.num)
    if old is None:
        return []
    return [*old.pop("attempts", []), {k: v for k, v in old.items() if k in ("pid", "started", "ended", "outcome")}]


@hydra.main(config_path="pkg://gspo.conf", config_name="config", version_base="1.3")
def _job(cfg: DictConfig) -> float:
    """One training run; returns the final value of cfg.objective (what a search sweeper optimizes)."""
    import torch

    from gspo.trainer.loop import train
    from gspo.trainer.parallel.distributed import export_slurm_world, world_from_env

    hc = HydraConfig.get()
    command = os.environ.get("GSPO_COMMAND", "train")
    with one_line_errors():
        cfg = run_config(cfg, list(hc.overrides.task), command)
        validate_config(cfg)
        if command == "eval":
            return _eval_job(cfg, hc)
        if "joblib" in str(hc.launcher.get("_target_", "")):
            _die_with_parent()
        if "submitit" in str(hc.launcher.get("_target_", "")):
            export_slurm_world()  # a job of several Slurm tasks is one data-parallel run
        main = world_from_env().main
        _name_job(cfg, hc.job)
        threads = _threads_per_job()
        if threads:
            torch.set_num_threads(threads)
        run_dir = (Path(cfg.output_dir) / cfg.run_id).resolve()
        objective = cfg.objective or EVAL.format(cfg.task.name, EVAL_ACCURACY)
        said = _planned(hc) or " ".join(hc.job.override_dirname.split(","))
        state = read_status(run_dir).get("status")
        where = job_progress(Path(hc.sweep.dir), hc.job.num, _plan_jobs(hc), _at_once())
        if state == "finished":  # a sweep run again: this job is done
            if main:
                typer.echo(f"{where}: {said} -> {run_dir} finished already, skipped", err=True)
                if sweep_job(Path(hc.sweep.dir), hc.job.num) is None:  # its record torn or lost: written again
                    _record(hc, {"run_dir": str(run_dir), "overrides": said, "outcome": "finished"})
            return run_value(load_run(run_dir), objective, "final")
        if (run_dir / "config.yaml").is_file():  # an earlier attempt's run, interrupted or died: its own config
            cfg = continued_config(cfg, run_dir)
            _name_job(cfg, hc.job)  # W&B group and tags as this sweep names them
        record = {"run_dir": str(run_dir), "overrides": said, "pid": os.getpid(), "started": time.time(),
                  "attempts": _attempts(hc) if main else []}
        if main:
            _record(hc, record)
            typer.echo(f"{where}: {said} -> {run_dir}{f' (resuming: it was {state})' if cfg.resume else ''} "
                       f"(torch threads {torch.get_num_threads()})", err=True)
        eta = _early_eta(hc, run_dir, cfg.train.steps) if main else None
        try:
            train(cfg, log=lambda m: typer.echo(m, err=True))
        except BaseException as e:
            if main:
                _record(hc, record | {"ended": time.time(), "outcome": _outcome(e)})
            raise
        finally:
            if eta:
                eta.done.set()
            if _orphaned():  # the run is recorded as interrupted: the worker has no one to report to
                os._exit(143)
        if not main:
            return float("nan")  # the launcher reports rank 0's value
        _record(hc, record | {"ended": time.time(), "outcome": "finished"})
        return run_value(load_run(run_dir), objective, "final")


def _outcome(e: BaseException) -> str:
    return "interrupted" if isinstance(e, KeyboardInterrupt) else f"failed: {type(e).__name__}: {e}".splitlines()[0]


def _eval_job(cfg: DictConfig, hc) -> float:
    """One `gspo eval` of a multirun, into <sweep dir>/<job> unless it names its folder (eval.run, eval.output)."""
    from gspo.trainer.evaluate import run_eval

    if cfg.eval.run is None and cfg.eval.output is None:
        with open_dict(cfg):
            cfg.eval.output = str(Path(hc.sweep.dir) / str(hc.job.num))
    typer.echo(f"eval job {hc.job.num}: {' '.join(hc.job.override_dirname.split(','))}", err=True)
    out = run_eval(cfg, log=lambda m: typer.echo(m, err=True))
    typer.echo(f"evals written to {out / 'evals.jsonl'}", err=True)
    return 0.0
