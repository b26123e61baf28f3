"""The sweep folder's format, owned here alone: its names, its records' fields, their readers and their writers
side by side (study/ writes a sweep, report/ reads one; neither states the format again).

    <sweep>/sweep.json        the plan (SWEEP_PLAN): {"overrides", "params", "stamp", "jobs"}: what the sweep runs;
                              a training sweep run again in its folder is checked against it (study/sweep.py)
    <sweep>/launch.json       the attempt's launch (LAUNCH): {"command", "stamp", "swept"}: what each Hydra job of this
                              attempt needs from the command that started it (the job's typed record, read by
                              `read_launch` in the job's own process, which a launcher may have started elsewhere)
    <sweep>/runs/<job>.json   what one job ran (SWEEP_RUNS): {"run_dir", "overrides", "pid", "started", "ended",
                              "outcome", "attempts", "slurm_job"}; its run_dir relative to the sweep folder (an older gspo wrote
                              it absolute: still read); written as the job starts and again as it ends

A damaged record is a RecordError (trainer/run/records.py): one line naming the file and the field.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from shlex import quote

from gspo.trainer.run.records import NUMBER, RecordError, read_record
from gspo.trainer.run.rundir import atomic_write_text, read_status

SWEEP_RUNS = "runs"
SWEEP_PLAN = "sweep.json"
LAUNCH = "launch.json"
PLAN = "plan.json"  # the experiment's registered plan (study/plan.py writes and checks it; docs/plan.md)
SWEEP_PLAN_FIELDS = {"overrides": list, "params": dict, "stamp": str, "jobs": list}
SWEEP_PLAN_REQUIRED = ("overrides", "stamp")
SWEEP_JOB_FIELDS = {"run_dir": str, "overrides": str, "pid": int, "started": NUMBER, "ended": NUMBER, "outcome": str,
                    "attempts": list, "slurm_job": str}
SWEEP_JOB_REQUIRED = ("run_dir",)
LAUNCH_FIELDS = {"command": str, "stamp": str, "swept": list}
COMMANDS = ("train", "eval")  # what a sweep's jobs run: `gspo train` or `gspo eval`, one per job


@dataclass(frozen=True)
class Launch:
    """What each job of a sweep's attempt is told by the command that launched it: `command` (train or eval),
    the sweep's `stamp` (run ids and the W&B group) and the `swept` keys (W&B tags)."""

    command: str
    stamp: str
    swept: tuple[str, ...] = ()


def is_sweep(path: Path) -> bool:
    """Whether `path` is a sweep folder (it lists runs or holds a plan), not a run directory."""
    return (path / SWEEP_RUNS).is_dir() or (path / SWEEP_PLAN).is_file()


def read_sweep_plan(sweep_dir: Path) -> dict | None:
    """<sweep dir>/sweep.json (None when there is none); a damaged one is a RecordError."""
    path = sweep_dir / SWEEP_PLAN
    if not path.is_file():
        return None
    return read_record(path, SWEEP_PLAN_FIELDS, SWEEP_PLAN_REQUIRED,
                       "this folder's sweep cannot be resumed; run the sweep in another hydra.sweep.dir=")


def write_sweep_plan(sweep_dir: Path, plan: dict) -> None:
    atomic_write_text(sweep_dir / SWEEP_PLAN, json.dumps(plan, indent=1) + "\n")


def planned(sweep_dir: Path) -> list | None:
    """The planned jobs' swept values (`algo=grpo seed=1` each), None without a readable plan (a search sweeper's)."""
    try:
        return (read_sweep_plan(sweep_dir) or {}).get("jobs") or None
    except RecordError:
        return None


def write_launch(sweep_dir: Path, launch: Launch) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(sweep_dir / LAUNCH, json.dumps(asdict(launch)) + "\n")


def read_launch(sweep_dir: Path) -> Launch:
    """The attempt's launch record; a missing or damaged one is a RecordError (the job cannot name its run)."""
    path = sweep_dir / LAUNCH
    data = read_record(path, LAUNCH_FIELDS, tuple(LAUNCH_FIELDS),
                       "the sweep's jobs read it to name their runs: run the sweep's command again")
    if data["command"] not in COMMANDS:
        raise RecordError(f"{path}: command is {json.dumps(data['command'])[:40]}, not one of {', '.join(COMMANDS)}",
                          "run the sweep's command again")
    return Launch(data["command"], data["stamp"], tuple(map(str, data["swept"])))


def read_sweep_job(path: Path) -> dict:
    """One job's record <sweep dir>/runs/<job>.json; a damaged one (torn by a kill, edited) is a RecordError."""
    return read_record(path, SWEEP_JOB_FIELDS, SWEEP_JOB_REQUIRED,
                       "its job's run is left out; name the run directory itself to include it")


def write_job_record(sweep_dir: Path, num: int, record: dict) -> None:
    """runs/<num>.json, its run_dir stored relative to the sweep folder (a copied or moved tree reads its own runs)."""
    record = record | {"run_dir": relative_run_dir(sweep_dir, Path(record["run_dir"]))}
    atomic_write_text(sweep_dir / SWEEP_RUNS / f"{num}.json", json.dumps(record) + "\n")


def job_run_dir(sweep_dir: Path, record: dict) -> Path:
    """The run directory a job record names: relative to the sweep folder (absolute in an older gspo's)."""
    return Path(os.path.normpath(sweep_dir / record["run_dir"]))


def relative_run_dir(sweep_dir: Path, run_dir: Path) -> str:
    """run_dir as a job record stores it: relative to the sweep folder, so a copied or moved tree still reads."""
    return os.path.relpath(run_dir.resolve(), sweep_dir.resolve())


def _job_files(path: Path) -> list[Path]:
    return sorted((path / SWEEP_RUNS).glob("*.json"), key=lambda f: int(f.stem) if f.stem.isdigit() else 0)


def sweep_jobs(path: Path) -> list[dict]:
    """What a sweep recorded of each job, in job order (a damaged record, such as a killed job's torn one, is
    left out here and named by sweep_notes)."""
    jobs = []
    for f in _job_files(path):
        try:
            jobs.append(read_sweep_job(f))
        except RecordError:
            continue
    return jobs


def sweep_job(path: Path, num: int) -> dict | None:
    """The record of job `num` of the sweep at `path` (None: not started, or damaged)."""
    try:
        return read_sweep_job(path / SWEEP_RUNS / f"{num}.json")
    except RecordError:
        return None


def damaged_job_records(path: Path) -> list[RecordError]:
    """The job records of the sweep at `path` that cannot be read, each as its RecordError."""
    damaged = []
    for f in _job_files(path):
        try:
            read_sweep_job(f)
        except RecordError as e:
            damaged.append(e)
    return damaged


def sweep_runs(path: Path) -> list[Path]:
    """The run directories a sweep recorded, in job order."""
    return [job_run_dir(path, job) for job in sweep_jobs(path)]


def sweep_notes(path: Path) -> list[str]:
    """What a report must say about a sweep's jobs: the planned ones that never ran (sweep.json's plan,
    no record), records it cannot read, and the jobs whose run died (SIGKILLed), failed, was interrupted or
    is still going."""
    notes = []
    try:
        jobs = (read_sweep_plan(path) or {}).get("jobs")
    except RecordError as e:
        jobs = None
        notes.append(f"{e.what}: the report cannot say which planned jobs never ran")
    notes += [str(e) for e in damaged_job_records(path)]
    for num, said in enumerate(jobs or []):
        if not (path / SWEEP_RUNS / f"{num}.json").exists():
            notes.append(f"{path}: job {num} ({said or 'no swept keys'}) never ran: rerun the sweep with the same "
                         f"overrides and hydra.sweep.dir={quote(str(path))} to run it")
    for job in sweep_jobs(path):
        run = job_run_dir(path, job)
        state = read_status(run).get("status") if (run / "config.yaml").is_file() else None
        if state not in (None, "finished"):
            how = {"dead": "died (its process is gone; SIGKILL or a crash)", "running": "is still running"}.get(state, state)
            notes.append(f"{path}: job {job.get('overrides') or run.name} {how}: its run stops at its last logged step")
    return notes


def read_plan(folder: Path) -> dict | None:
    path = folder / PLAN
    if not path.is_file():
        return None
    return read_record(path, {"arms": dict, "seeds": list, "stop": dict, "rounds": list}, ("arms", "seeds"),
                       "it is the experiment's registered plan: restore it, or start another hydra.sweep.dir=")


def write_plan(folder: Path, plan: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / PLAN, json.dumps(plan, indent=1) + "\n")


def report_plan(paths: list[Path]) -> tuple[list[Path], tuple[str | None, ...]]:
    """For `gspo report`: (the folders to read, a registered plan's later rounds added; (the primary score it
    registered, *its comparisons)): an older gspo's sweep registered compare's default (held-out accuracy), runs
    named one by one register nothing (empty)."""
    if len(paths) == 1 and (plan := read_plan(paths[0])) is not None:
        rounds = range(2, len(plan.get("rounds") or []) + 1)
        return ([paths[0], *(paths[0] / f"round-{i}" for i in rounds)],
                (plan.get("primary"), *map(str, plan.get("comparisons") or [])))
    return paths, (None,) if any(is_sweep(p) for p in paths) else ()
