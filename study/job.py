"""One job of a sweep, as Hydra's launcher runs it (in this process, or in a worker it started): the same `train`
as `gspo train` (or `gspo eval`), named by the sweep, recorded in runs/<job>.json as it starts and as it ends, and
skipped or resumed when the sweep runs again in its folder.

What the command that launched the sweep tells its jobs is one typed record in the sweep folder
(trainer/run/sweepdir.Launch: command, stamp, swept keys), read by each job in its own process, never an
environment variable."""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from pathlib import Path

import hydra
import torch
import typer
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from gspo.conf import validate_config
from gspo.conf.compose import run_config
from gspo.conf.errors import one_line_errors
from gspo.conf.resume import continued_config
from gspo.report import load_run, run_value
from gspo.study.eta import job_progress, watch_first_job
from gspo.study.launch import at_once, threads_per_job
from gspo.study.watch import die_with_parent, orphaned
from gspo.trainer.evaluate import run_eval
from gspo.trainer.loop import train
from gspo.trainer.parallel.distributed import export_slurm_world, world_from_env
from gspo.trainer.run.loggers import without_wandb_note
from gspo.trainer.run.progress import side_by_side
from gspo.trainer.run.rundir import read_status, slurm_job
from gspo.trainer.run.sweepdir import Launch, job_run_dir, planned, read_launch, sweep_job, write_job_record
from gspo.vocab.metrics import EVAL, EVAL_ACCURACY


def say(message: str) -> None:
    typer.echo(message, err=True)


@hydra.main(config_path="pkg://gspo.conf", config_name="config", version_base="1.3")
def hydra_job(cfg: DictConfig) -> float:
    """One job; returns the final value of cfg.objective (what a search sweeper optimizes)."""
    hc = HydraConfig.get()
    with one_line_errors():
        launch = read_launch(Path(hc.sweep.dir))
        cfg = run_config(cfg, list(hc.overrides.task), launch.command)
        validate_config(cfg)
        if launch.command == "eval":
            return eval_job(cfg, hc)
        return train_job(cfg, hc, launch)


def train_job(cfg: DictConfig, hc, launch: Launch) -> float:
    """One training run of the sweep: skipped if it finished, resumed if an earlier attempt's run is there."""
    if "joblib" in str(hc.launcher.get("_target_", "")):
        die_with_parent()
    if "submitit" in str(hc.launcher.get("_target_", "")):
        export_slurm_world()  # a job of several Slurm tasks is one data-parallel run
    main = world_from_env().main
    sweep_dir, num = Path(hc.sweep.dir), hc.job.num
    name_job(cfg, hc.job, launch)
    if threads := threads_per_job():
        torch.set_num_threads(threads)
    run_dir = recorded_run(sweep_dir, num, cfg) or (Path(cfg.output_dir) / cfg.run_id).resolve()
    objective = cfg.objective or EVAL.format(cfg.task.name, EVAL_ACCURACY)
    jobs = planned(sweep_dir)
    said = jobs[num] if jobs and num < len(jobs) else " ".join(hc.job.override_dirname.split(","))
    state = read_status(run_dir).get("status")
    where = job_progress(sweep_dir, num, jobs, at_once())
    if state == "finished":  # a sweep run again: this job is done
        if main:
            say(f"{where}: {said} -> {run_dir} finished already, skipped")
            if sweep_job(sweep_dir, num) is None:  # its record torn or lost: written again
                write_job_record(sweep_dir, num, {"run_dir": str(run_dir), "overrides": said, "outcome": "finished"})
        return run_value(load_run(run_dir), objective, "final")
    if (run_dir / "config.yaml").is_file():  # an earlier attempt's run, interrupted or died: its own config
        cfg = continued_config(cfg, run_dir)
        name_job(cfg, hc.job, launch)  # W&B group and tags as this sweep names them
    record = {"run_dir": str(run_dir), "overrides": said, "pid": os.getpid(), "started": time.time(),
              "attempts": attempts(sweep_dir, num) if main else []} | ({"slurm_job": job} if (job := slurm_job()) else {})
    if main:
        write_job_record(sweep_dir, num, record)
        say(f"{where}: {said} -> {run_dir}{f' (resuming: it was {state})' if cfg.resume else ''} "
            f"(torch threads {torch.get_num_threads()})")
    eta = watch_first_job(sweep_dir, num, jobs, run_dir, cfg.train.steps, at_once(), say) if main else None
    label = f"job {num + 1}{f'/{len(jobs)}' if jobs else ''} {cfg.algo.name} s{cfg.seed}"
    try:
        with side_by_side(label) if at_once() > 1 else nullcontext():
            train(cfg, log=without_wandb_note(say))
    except BaseException as e:
        if main:
            write_job_record(sweep_dir, num, record | {"ended": time.time(), "outcome": outcome(e)})
        raise
    finally:
        if eta:
            eta.done.set()
        if orphaned():  # the run is recorded as interrupted: the worker has no one to report to
            os._exit(143)
    if not main:
        return float("nan")  # the launcher reports rank 0's value
    write_job_record(sweep_dir, num, record | {"ended": time.time(), "outcome": "finished"})
    return run_value(load_run(run_dir), objective, "final")


def recorded_run(sweep_dir: Path, num: int, cfg: DictConfig) -> Path | None:
    """The run this job's record names when it is not where output_dir= resolves from here (a relative output_dir,
    the sweep run again from another folder): that run, its output_dir made its parent (so it is skipped or resumed,
    never trained again beside itself). None: no record, or the run is where output_dir says."""
    record = sweep_job(sweep_dir, num)
    if record is None or not isinstance(record.get("run_dir"), str):
        return None
    there = job_run_dir(sweep_dir, record).resolve()
    here = (Path(cfg.output_dir) / cfg.run_id).resolve()
    if there == here or there.name != cfg.run_id or not (there / "config.yaml").is_file():
        return None
    with open_dict(cfg):
        cfg.output_dir = str(there.parent)
    return there


def name_job(cfg: DictConfig, job, launch: Launch) -> None:
    """The run's id (`<stamp>-<job>-<algo>-s<seed>`), W&B group (`sweep-<stamp>`) and tags (the swept values)."""
    given = dict(o.split("=", 1) for o in job.override_dirname.split(",") if "=" in o)
    with open_dict(cfg):
        if cfg.run_id is None:
            cfg.run_id = f"{launch.stamp}-{job.num}-{cfg.algo.name}-s{cfg.seed}"
        cfg.logger.group = cfg.logger.group or f"sweep-{launch.stamp}"
        tags = [f"algo={cfg.algo.name}"] + [f"{k}={given[k]}" for k in launch.swept if k in given and k != "algo"]
        cfg.logger.tags = list(dict.fromkeys([*cfg.logger.tags, *tags]))


def attempts(sweep_dir: Path, num: int) -> list[dict]:
    """The earlier attempts at job `num` (a sweep run again in its folder), each as its record had it."""
    old = sweep_job(sweep_dir, num)
    if old is None:
        return []
    return [*old.pop("attempts", []), {k: v for k, v in old.items() if k in ("pid", "started", "ended", "outcome", "slurm_job")}]


def outcome(e: BaseException) -> str:
    return "interrupted" if isinstance(e, KeyboardInterrupt) else f"failed: {type(e).__name__}: {e}".splitlines()[0]


def eval_job(cfg: DictConfig, hc) -> float:
    """One `gspo eval` of a multirun, into <sweep dir>/<job> unless it names its folder (eval.run, eval.output)."""
    if cfg.eval.run is None and cfg.eval.output is None:
        with open_dict(cfg):
            cfg.eval.output = str(Path(hc.sweep.dir) / str(hc.job.num))
    say(f"eval job {hc.job.num}: {' '.join(hc.job.override_dirname.split(','))}")
    out = run_eval(cfg, log=say)
    say(f"evals written to {out / 'evals.jsonl'}")
    return 0.0
