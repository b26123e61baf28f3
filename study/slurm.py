"""Jobs on a Slurm cluster: Hydra's submitit launcher (`hydra/launcher=slurm`, conf/hydra/launcher/), watched.

Hydra's submitit launcher submits a sweep's jobs as one job array and then waits on each job's result in turn. On a
cluster without accounting (no slurmdbd: `sacct` answers "accounting storage is disabled", common on small
clusters) submitit's own waiting prints two `Bypassing sacct error` warnings every poll, and it never learns that
a job killed by Slurm (its memory or time limit, `scancel`) has ended: no result file is written, so it waits for
ever. `watched_slurm` gives the launcher a wait of ours instead (the same submission, in `launch_watched`):
- job states come from `squeue` (the controller's own view, with or without accounting), and each change is one
  progress line in the terminal: `slurm job 12_1 (job 2/4: algo=gspo seed=0): RUNNING on node07`;
- a job is done when every task has written its result (submitit's result files), or when Slurm says it ended
  without one; then it is one line with its job id, what Slurm said (and what its log says: the memory limit,
  the time limit, a cancel) and its log's path;
- the other jobs go on, and every run is kept; a sweep with jobs that did not finish ends in one line that says
  how to resume it (the same command: finished runs are skipped, the others resume from their checkpoints);
- a job requeued (preempted, `scontrol requeue`, or submitit's own requeue after a time limit) is watched on:
  it resumes its run from the last checkpoint when it runs again (study/job.py).
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.study.job import say
from gspo.study.launch import PLUGINS, plugin_installed
from gspo.trainer.run.sweepdir import read_launch

POLL_S = 2.0  # seconds between squeue calls while jobs are queued or running
GONE_GRACE_S = 10.0  # a job Slurm no longer lists (or lists as ended) without a result: how long its result may lag
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}  # squeue's states of a job that has left the node for good
# What slurmstepd writes into a killed job's log, said in words (the state alone says FAILED for a memory kill
# where the memory limit is enforced by polling, without cgroups)
LOG_CAUSES = (("exceeded memory limit", "killed by Slurm's memory limit"), ("oom-kill", "killed by the OOM killer"),
              ("DUE TO TIME LIMIT", "killed at its time limit"), ("DUE TO PREEMPTION", "preempted"),
              ("CANCELLED AT", "cancelled"))


@dataclass
class Watched:
    """One submitted job as the watch sees it: submitit's job, its sweep job number and words, the tasks whose
    result files say it is done, and the last state said."""

    job: object  # submitit.slurm.SlurmJob
    num: int
    words: str
    tasks: int
    said: str = ""
    ended_at: float | None = None
    outcome: str = ""
    read: int = 0  # bytes of its log relayed so far
    muted: bool = False  # its log is in a traceback (the terminal gets the one line of `Watch.step` instead)

    @property
    def job_id(self) -> str:
        return str(self.job.job_id)

    def results_written(self) -> bool:
        from submitit.core.utils import JobPaths

        folder = self.job.paths.folder
        return all(JobPaths(folder, self.job_id, task_id=t).result_pickle.exists() for t in range(self.tasks))

    def log(self) -> Path:
        return Path(self.job.paths.stderr)

    def new_lines(self) -> list[str]:
        """The whole lines its rank 0 wrote to its log (stderr: the job's progress and eval lines) since the last
        call; a line a progress bar redraws with carriage returns is taken at its last drawing."""
        try:
            with open(self.log(), "rb") as f:
                if os.fstat(f.fileno()).st_size < self.read:  # a requeued job's log begun anew
                    self.read = 0
                f.seek(self.read)
                chunk = f.read()
        except OSError:
            return []
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self.read += len(whole)
        lines = [line.split("\r")[-1].rstrip() for line in whole.decode(errors="replace").splitlines()]
        return [line for line in lines if line and self.relayed(line)]

    def relayed(self, line: str) -> bool:
        """Whether a log line reaches the terminal: not from a Python traceback on (a cancelled or preempted job's
        interpreter prints one as it ends; its one line says what happened and names the log) until the job
        starts again (a requeued job's first line, `sweep job ...`)."""
        if line.startswith("Traceback (most recent call last)"):
            self.muted = True
        elif line.startswith("sweep job "):
            self.muted = False
        return not self.muted


@dataclass
class Watch:
    """The jobs of one launch, watched until each is done; `say` prints a progress line."""

    jobs: list[Watched]
    total: int
    say: Callable[[str], None]
    failed: list[Watched] = field(default_factory=list)

    def label(self, w: Watched) -> str:
        return f"slurm job {w.job_id} (job {w.num + 1}/{self.total}: {w.words})"

    def run(self, poll_s: float = POLL_S) -> None:
        """Until every job is done. Interrupted (Ctrl-C, SIGTERM), the jobs still queued or running are cancelled,
        as a local launcher's workers end with the `gspo` process: their runs are kept, resumable."""
        live = list(self.jobs)
        try:
            while live:
                states = squeue_states([w.job_id for w in live])
                live = [w for w in live if not self.step(w, states.get(w.job_id))]
                if live:
                    time.sleep(poll_s)
        except KeyboardInterrupt:
            ids = [w.job_id for w in live]
            subprocess.run(["scancel", *ids], capture_output=True, timeout=60, check=False)
            self.say(f"slurm: cancelled {len(ids)} job(s) still queued or running ({', '.join(ids)}); their runs are kept")
            raise

    def step(self, w: Watched, state: tuple[str, str, str] | None) -> bool:
        """Say `w`'s new state and relay its new log lines; whether it is done (its results written, or ended
        without them)."""
        for line in w.new_lines():
            self.say(f"slurm job {w.job_id}: {line}")
        if w.results_written():
            return True
        name, reason, node = state or ("", "", "")
        words = name + (f" on {node}" if name == "RUNNING" and node else f" ({reason})" if reason not in ("", "None")
                        else "")
        if name and words != w.said:
            w.said = words
            self.say(f"{self.label(w)}: {words}")
        if name and name not in ENDED:
            w.ended_at = None
            return False
        w.ended_at = w.ended_at or time.monotonic()
        if time.monotonic() - w.ended_at < GONE_GRACE_S:  # a result file written as the job ended may lag
            return False
        w.outcome = ended_without_result(name, w.log())
        self.say(f"{self.label(w)}: {w.outcome}; its log: {w.log()}")
        self.failed.append(w)
        return True


def squeue_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """{job id: (state, reason, node list)} of the jobs Slurm's controller still lists (array tasks one by one);
    a job it no longer lists is missing. A failed squeue call (the controller busy) answers nothing this time."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    try:
        out = subprocess.run(["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%r|%N",
                              f"--jobs={','.join(arrays)}"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {j: ("", "", "") for j in job_ids}
    if out.returncode != 0:
        return {j: ("", "", "") for j in job_ids}  # unknown this time: not taken as ended
    states = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            states[parts[0]] = (parts[1], parts[2], parts[3])
    return states


def ended_without_result(state: str, log: Path) -> str:
    """What ended a job that wrote no result, in words: its log's slurmstepd line where there is one, else
    Slurm's state (or that Slurm no longer lists it)."""
    try:
        tail = log.read_text(errors="replace")[-20000:]
    except OSError:
        tail = ""
    cause = next((words for mark, words in LOG_CAUSES if mark in tail), None)
    said = f"Slurm state {state}" if state else "no longer listed by Slurm"
    return f"{cause} ({said})" if cause else f"ended without a result ({said})"


def job_words(overrides: Sequence[str], every: Sequence[Sequence[str]], swept: Sequence[str] = ()) -> str:
    """A job's overrides as its progress line names it: its values of the keys the command swept (launch.json's
    `swept`), else those that differ between the launch's jobs, else all of them."""
    from hydra.core.utils import filter_overrides

    mine = filter_overrides(list(overrides))
    if named := [o for o in mine if o.split("=", 1)[0].lstrip("+") in swept]:
        return " ".join(named)
    shared = set.intersection(*(set(filter_overrides(list(o))) for o in every)) if len(every) > 1 else set()
    return " ".join(o for o in mine if o not in shared) or " ".join(mine)


def launch_watched(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int):
    """SlurmLauncher.launch, watched: submitit's submission of the job array exactly as Hydra's plugin makes it
    (`submit`), then `Watch.run` in place of waiting on each job's result in turn."""
    from hydra.core.utils import JobReturn, JobStatus

    jobs, tasks = submit(self, job_overrides, initial_job_idx)
    total = initial_job_idx + len(jobs)
    swept = read_launch(Path(str(self.config.hydra.sweep.dir))).swept
    watched = [Watched(j, initial_job_idx + i, job_words(o, job_overrides, swept), tasks)
               for i, (j, o) in enumerate(zip(jobs, job_overrides, strict=True))]
    say(f"slurm: {len(jobs)} job(s) submitted as array {jobs[0].job_id.split('_')[0]} ({tasks} task(s) each); "
        f"logs under {Path(jobs[0].paths.folder).parent}")
    watch = Watch(watched, total, say)
    watch.run()
    returns = []
    for w in watched:
        if w in watch.failed:
            returns.append(JobReturn(status=JobStatus.FAILED, _return_value=GspoError(f"{watch.label(w)}: {w.outcome}")))
            continue
        try:
            returns.append(w.job.results()[0])
        except Exception as e:  # the job raised: its first line (the job printed its one-line error in its log)
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            say(f"{watch.label(w)}: failed: {first}; its log: {w.log()}")
            watch.failed.append(w)
            returns.append(JobReturn(status=JobStatus.FAILED, _return_value=GspoError(first)))
    if watch.failed:
        ids = ", ".join(w.job_id for w in watch.failed)
        raise GspoError(f"{len(watch.failed)} of {len(watched)} Slurm job(s) did not finish ({ids}); every run is kept: "
                        "run the same command again to resume them (finished runs are skipped)")
    return returns


def submit(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> tuple[list, int]:
    """Submit a sweep's jobs as Hydra's submitit plugin does (its BaseSubmititLauncher.launch, up to the wait):
    (submitit's jobs, tasks per job)."""
    import submitit
    from hydra.core.singleton import Singleton
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    params = dict(launcher.params)
    init = {"folder": params.pop("submitit_folder")}
    if "max_num_timeout" in params:
        init["slurm_max_num_timeout"] = params.pop("max_num_timeout")
    executor = submitit.AutoExecutor(cluster="slurm", **init)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    job_params = [(list(o), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}",
                   Singleton.get_state()) for i, o in enumerate(job_overrides)]
    jobs = executor.map_array(launcher, *zip(*job_params, strict=True))
    return jobs, int(params.get("nodes") or 1) * int(params.get("tasks_per_node") or 1)


class _OneSacctWarning(logging.Filter):
    """submitit's `Bypassing sacct error` warning (every poll, where accounting is off), said once in a line of
    ours: the watch reads job states from squeue, so nothing is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "sacct" not in record.getMessage():
            return True
        if not self.said:
            self.said = True
            record.msg, record.args = ("slurm: sacct gives no job states here (accounting off?); gspo reads them "
                                       "from squeue"), ()
            return True
        return False


def watched_slurm() -> None:
    """Make Hydra's submitit Slurm launcher (in this process) wait on its jobs with `Watch` (module docstring);
    submitit's sacct warning said once. Nothing happens where the plugin is not installed."""
    if not plugin_installed(PLUGINS["submitit"]):
        return
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

    SlurmLauncher.launch = launch_watched
    logger = logging.getLogger("submitit")
    if not any(isinstance(f, _OneSacctWarning) for f in logger.filters):
        logger.addFilter(_OneSacctWarning())
