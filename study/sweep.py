"""`gspo sweep` (= `gspo train -m`), `gspo eval -m` and the sweeps of `gspo compare`: Hydra's multirun, driven from
Typer.

Hydra's maintainers intend `@hydra.main` to own the command line, and the compose API alone gives up multirun and
launchers; so a sweep hands its arguments to a `hydra.main` job (sys.argv set, function called: study/job.py), and
each job runs the same `train` as `gspo train`. Any Hydra launcher or sweeper works (`hydra/launcher=joblib|
submitit_local`, `hydra/sweeper=optuna`, from the optional extras); a job returns the final value of `objective=`
(default eval/<task>/accuracy) for a search sweeper to maximize or minimize (hydra.sweeper.direction=). How many
jobs run at once, and with how many torch threads each, is study/launch.py's policy.

A sweep lives in results/sweeps/<stamp>/ (or hydra.sweep.dir=): Hydra's per-job folders and the sweep folder's
records (trainer/run/sweepdir.py): its plan, its launch, and runs/<job>.json naming each job's run directory,
written as the job starts and as it ends, so `gspo report` finds the runs of a sweep still going or killed. W&B:
the sweep's runs share the group `sweep-<stamp>` and are tagged with their algorithm and swept values.

A training sweep resumes: sweep.json holds its overrides, stamp and planned jobs, and the same command with the
same hydra.sweep.dir= keeps the stamp (so each job's run id), skips the jobs whose run finished, resumes the
others' runs, and keeps each earlier attempt in the job's record (`attempts`). The report names the planned jobs
that never ran and those whose run died, failed or was interrupted.
"""

from __future__ import annotations

import re
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from shlex import quote

import typer

from gspo.conf.errors import GspoError, interrupt_said
from gspo.conf.overrides import MULTIRUN
from gspo.conf.schema import register_configs
from gspo.study.job import hydra_job
from gspo.study.launch import (
    GIB_PER_JOB,
    JOBS,
    check_launcher,
    given_jobs,
    jobs_at_once,
    launcher_overrides,
    threads,
)
from gspo.study.plan import Plan, make_plan, register
from gspo.study.slurm import watched_slurm
from gspo.study.watch import raw_errors, watched_loky, worker_died
from gspo.trainer.run.loggers import sweep_note
from gspo.trainer.run.sweepdir import (
    SWEEP_PLAN,
    SWEEP_RUNS,
    Launch,
    read_sweep_plan,
    sweep_runs,
    write_launch,
    write_sweep_plan,
)

QUIET = ["hydra.job.chdir=false", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]


@dataclass
class SweepCall:
    """How a sweep is asked for. `command`: "train", or "eval" (each job a `gspo eval` writing to <sweep dir>/<job>,
    or its eval.run / eval.output). `report_hint`: print the report command at the end (not when the caller writes
    the report itself, as `gspo compare` does). `again`: the command that resumes this sweep, as an interruption
    prints it (default `gspo sweep <its overrides>`), with hydra.sweep.dir=`again_dir` (default: this sweep's
    folder; an until=resolved round's: the experiment's). `at_once` (`gspo compare`): with no launcher named, the
    launcher policy may run several jobs at once (study/launch.py)."""

    command: str = "train"
    report_hint: bool = True
    again: str | None = None
    at_once: bool = False
    again_dir: Path | None = None


def run_sweep(args: list[str] | Plan, call: SweepCall | None = None) -> Path:
    """Run every job of the sweep (its plan, or the command line's `args` planned here); print where the runs are
    (and, `call.report_hint`, the report command). Returns the sweep dir. A training sweep run again with the same
    folder (hydra.sweep.dir=) and overrides resumes it: the sweep keeps its stamp (so its jobs' run ids), finished
    jobs are skipped, interrupted ones resumed."""
    call = call or SweepCall()
    register_configs()
    plan = args if isinstance(args, Plan) else make_plan(args, call.command)
    check_launcher(list(plan.overrides), at_once=call.at_once and call.command == "train")
    for note in plan.notes if plan is not args else ():  # a caller's plan: said where it was made
        typer.echo(f"note: {note}", err=True)
    stamp = new_stamp()
    given = plan.folder
    sweep_dir = Path(sweep_folder(given) if given else f"results/sweeps/{stamp}")
    overrides = [a for a in plan.overrides if not a.startswith("hydra.sweep.dir=")]
    if plan.resume and call.command != "train":
        raise GspoError("resume= is for training runs: an eval sweep runs its evals again")
    with _gone_unless_started(sweep_dir):
        if call.command == "train":
            stamp = check_sweep_plan(sweep_dir, plan, overrides, stamp)
            if plan is not args:  # gspo sweep's own plan, registered as a compare's is (study/compare.py)
                register(sweep_dir, plan)
        write_launch(sweep_dir, Launch(call.command, stamp, plan.swept))
        named = any(o.startswith("hydra/launcher=") for o in overrides)  # else the policy's launcher says n_jobs
        sys.argv = [f"gspo {call.command}", "--multirun", f"hydra.sweep.dir={sweep_dir}", *QUIET,
                    *[o for o in overrides if named or not o.startswith(JOBS)], *_launcher(plan, call)]
        said = overrides if isinstance(args, Plan) else [a for a in args if a not in MULTIRUN]
        head = call.again or "gspo sweep " + " ".join(quote(a) for a in said
                                                        if not a.startswith(("hydra.sweep.dir=", "resume=")))
        _launch(call.command, f"{head} {quote(f'hydra.sweep.dir={call.again_dir or sweep_dir}')}")
    if call.command == "eval":
        typer.echo(f"evals finished: one folder per job under {sweep_dir}")
        return sweep_dir
    runs = sweep_runs(sweep_dir)
    typer.echo(f"sweep finished: {len(runs)} run(s), listed in {sweep_dir / SWEEP_RUNS}/")
    for run in runs:
        typer.echo(f"  {run}")
    if note := sweep_note(runs):  # one W&B line for the sweep, not one per run
        typer.echo(note, err=True)
    if call.report_hint:
        typer.echo(f"compare them: gspo report {quote(str(sweep_dir))} --out {quote(str(sweep_dir / 'report'))}")
    return sweep_dir


@contextmanager
def _gone_unless_started(sweep_dir: Path) -> Iterator[None]:
    """A sweep folder this command made is removed again when the command fails before any job started (Hydra
    refusing a launcher's setting): a corrected command then starts afresh instead of finding a plan that refuses
    it. A folder that held anything before, a job's record, or an interrupted sweep (its line says how to resume
    it) is kept."""
    fresh = not sweep_dir.exists()
    try:
        yield
    except (Exception, SystemExit):
        records = sweep_dir / SWEEP_RUNS
        if fresh and sweep_dir.is_dir() and not (records.is_dir() and any(records.iterdir())):
            shutil.rmtree(sweep_dir, ignore_errors=True)
        raise


def _launcher(plan: Plan, call: SweepCall) -> list[str]:
    """The launcher overrides the policy picks (study/launch.py): not in the sweep's plan, as how its jobs are laid
    out on the cores does not change them."""
    if not (call.at_once and call.command == "train"):
        return []
    n = jobs_at_once(plan)
    overrides = list(plan.overrides)
    if given_jobs(overrides) is not None and not any(o.startswith("hydra/launcher=") for o in overrides):
        typer.echo(f"sweep: {n} job(s) at once, as hydra.launcher.n_jobs= asks", err=True)
    elif n > 1:
        typer.echo(f"sweep: {n} jobs at once, {threads(n)} torch thread(s) each (on CPU cores the embedded model's "
                   "runs finish sooner side by side; hydra/launcher=basic runs them one at a time)", err=True)
    return launcher_overrides(n)


def _launch(command: str, resume_line: str) -> None:
    """Hydra's multirun of sys.argv; an interruption or a killed worker said in one line with `resume_line`."""
    watched_loky()  # before any worker starts: each watches this process from its birth
    watched_slurm()  # Slurm jobs' states said as they change; a job Slurm killed is one line (study/slurm.py)
    named = [a.split("=", 1)[1] for a in sys.argv if a.startswith("hydra/launcher=")]
    try:
        with raw_errors(any(n.startswith(("joblib", "slurm")) for n in named)):
            hydra_job()
    except KeyboardInterrupt as e:
        if command == "train":
            typer.echo(f"interrupted: the sweep is kept; resume it (finished jobs skipped): {resume_line}", err=True)
            interrupt_said(e, mark=True)
        raise
    except Exception as e:
        if not worker_died(e):
            raise
        raise GspoError("a job's worker process was killed (a SIGKILL, as the OOM killer sends; each job of the embedded "
                        f"model needs ~{GIB_PER_JOB} GiB), and joblib ended the other jobs with it; every run is kept: "
                        f"resume the sweep (finished jobs skipped): {resume_line}") from None


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
    if not _reads_back(folder):
        raise GspoError(f"hydra.sweep.dir={given}: Hydra's override grammar does not read this path back as one folder "
                        "(a ',' is a sweep over values; quotes, brackets, braces, '=' and '\\' are its syntax, and it "
                        "reads ASCII only): name a folder without them")
    return folder


def _reads_back(folder: str) -> bool:
    """Whether `hydra.sweep.dir=<folder>`, as the sweep hands it to Hydra, is that one folder to Hydra's grammar."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        (parsed,) = OverridesParser.create().parse_overrides([f"hydra.sweep.dir={folder}"])
    except HydraException:
        return False
    return not parsed.is_sweep_override() and parsed.value() == folder


def check_sweep_plan(sweep_dir: Path, plan: Plan, mine: list[str], stamp: str) -> str:
    """Write (or, for a sweep run again in its folder, check) <sweep dir>/sweep.json: the sweep's overrides
    (`mine`: without its folder), params, stamp and planned jobs. Returns the stamp the jobs are named by: the first
    attempt's on a rerun."""
    new = {"overrides": mine, "params": dict(plan.params), "stamp": stamp,
           "jobs": None if plan.jobs is None else list(plan.jobs)}
    old = read_sweep_plan(sweep_dir)  # a damaged sweep.json is one line naming it and the field
    if old is not None:
        if (old.get("overrides"), old.get("params") or {}) != (mine, new["params"]):
            raise GspoError(f"hydra.sweep.dir={sweep_dir} holds another sweep ({' '.join(map(str, old['overrides']))}; "
                            f"{plan_difference(old, new)}): run this one in another folder, or the same overrides "
                            "to resume that one")
        typer.echo(f"sweep: resuming {sweep_dir} (finished jobs are skipped, interrupted ones resumed)", err=True)
        return old["stamp"]
    if plan.resume:
        raise GspoError(f"resume=true: {sweep_dir} holds no sweep to resume (no {SWEEP_PLAN}); a sweep resumes when "
                        "run again with the same overrides and hydra.sweep.dir=<its folder>")
    if (sweep_dir / SWEEP_RUNS).is_dir():
        raise GspoError(f"hydra.sweep.dir={sweep_dir} holds a sweep without {SWEEP_PLAN} (an older gspo's), which "
                        "cannot be resumed: use another hydra.sweep.dir=")
    write_sweep_plan(sweep_dir, new)
    return stamp


def plan_difference(old: dict, new: dict) -> str:
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


def run_hydra_flags(args: list[str]) -> None:
    """Hydra's own informational flags (--cfg job|hydra|all, --resolve, --info): printed by Hydra itself."""
    register_configs()
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    sys.argv = ["gspo train", *[a for a in args if a not in overrides], *QUIET, *overrides]
    hydra_job()
