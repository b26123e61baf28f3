"""Where metrics go: the run directory always, W&B when enabled.

W&B mode "auto" is online when an API key is available (WANDB_API_KEY or a netrc login) and offline
otherwise, so a run with no network still keeps a W&B record that `wandb sync` can upload later.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from shlex import quote

from gspo.conf.environment import wandb_key_available
from gspo.conf.errors import GspoError
from gspo.evals.benchmarks.types import is_count
from gspo.trainer.run.rundir import RunDir, read_jsonl
from gspo.trainer.run.wandb_history import logged_steps
from gspo.vocab.choices import Wandb
from gspo.vocab.metrics import EVAL


def wandb_mode(setting: str) -> str:
    if setting != Wandb.AUTO:
        return setting
    if wandb_key_available() or os.environ.get("WANDB_MODE") == Wandb.ONLINE:
        return Wandb.ONLINE
    return Wandb.OFFLINE


def check_wandb_folder(run_path: Path, setting: str) -> None:
    """Before the model loads: <run>/wandb, where W&B keeps the run's files, is a folder or absent; a file or a
    dangling link there is one line (W&B would fail on it after the model loaded, and the run, finished or
    not, would be recorded failed)."""
    if wandb_mode(setting) == Wandb.DISABLED:
        return
    folder = run_path / "wandb"
    fix = "move it aside (W&B keeps the run's files there), or set logger.wandb=disabled"
    if folder.is_symlink() and not folder.exists():
        raise GspoError(f"{folder} is a link to {os.readlink(folder)}, which does not exist: {fix}")
    if folder.exists() and not folder.is_dir():
        raise GspoError(f"{folder} is a file, not a folder: {fix}")


def _finite(row: dict) -> dict:
    """JSON has no NaN/inf; keep the key with None so a reader sees the value was undefined."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


class Loggers:
    """Fan-out of one metrics row per step to the local files and, when enabled, to W&B."""

    def __init__(self, run: RunDir, cfg, config_dict: dict, job_type: str = "train", log=lambda _message: None):
        """`job_type` "train": the run's own W&B run (id = folder name, resumed with the run, see catch_up);
        "eval" (`gspo eval`): a W&B run of its own in the training run's group, which logs each eval row's value."""
        self.run = run
        self.wandb = None
        self.job_type = job_type
        mode = wandb_mode(cfg.logger.wandb)
        if mode != Wandb.DISABLED:
            self.wandb = _start_wandb(run, cfg, config_dict, mode, job_type)
            if job_type == "train":
                self.catch_up(log)

    def metrics(self, step: int, row: dict) -> None:
        row = _finite({"step": step, **row})
        self.run.append("metrics.jsonl", row)
        if self.wandb is not None:
            self._log(row)

    def _log(self, row: dict) -> None:
        self.wandb.log({k: v for k, v in row.items() if v is not None and k != "step"}, step=row["step"])

    def catch_up(self, log) -> list[int]:
        """Before this attempt logs any step: every metrics.jsonl row the W&B run lacks, logged again in step
        order; returns their steps. A SIGKILLed attempt's last steps reach metrics.jsonl but not W&B (wandb-core,
        a separate process, holds the last step until the next one and buffers its writes, and it exits
        without flushing when its parent dies), and the resume redoes only the steps after its checkpoint.
        metrics.jsonl holds only rows at or before the resume point here (the later ones were set aside), so
        each re-logged step precedes every step of this attempt, as W&B's increasing steps require."""
        lacks = _wandb_lacks(self.wandb, self.run.path)
        rows = {r["step"]: r for r in read_jsonl(self.run.path / "metrics.jsonl") if lacks(r["step"])}
        for step in sorted(rows):
            self._log(rows[step])
        if rows:
            steps = sorted(rows)
            shown = ", ".join(map(str, steps[:10])) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
            log(f"resume: W&B run {self.wandb.id} lacked step(s) {shown} of metrics.jsonl (an attempt killed before "
                "W&B wrote them); logged them again")
        return sorted(rows)

    def evals(self, rows: list[dict], samples: tuple[dict, ...] | list[dict] = ()) -> None:
        """evals.jsonl and eval_samples.jsonl; in training W&B gets the values with the step's metrics row."""
        for row in rows:
            self.run.append("evals.jsonl", _finite(row))
        for sample in samples:
            self.run.append("eval_samples.jsonl", sample)
        if self.wandb is not None and self.job_type == "eval":
            logged = {}
            for r in rows:  # the value, and the counts it is over, as training logs them
                logged[EVAL.format(r["benchmark"], r["metric"])] = r["value"]
                logged |= {EVAL.format(r["benchmark"], c): r[c] for c in r if is_count(c)}
            self.wandb.log(logged)

    def samples(self, rows: list[dict]) -> None:
        for row in rows:
            self.run.append("samples.jsonl", row)

    def close(self, exit_code: int = 0) -> str | None:
        """Finish the W&B run; returns the line saying where an offline one is and how to upload it."""
        note = None
        if self.wandb is not None:
            note = offline_note(self.wandb)
            self.wandb.finish(exit_code=exit_code)
            self.wandb = None
        return note


def _wandb_lacks(run, path: Path):
    """A predicate on steps: does the W&B run `run` lack it? Offline: no record log of this W&B id in
    `<path>/wandb` (the earlier attempts' offline or online folders) holds it. Online: W&B's resume tells only the
    run's next step (`starting_step`, one past the last it holds), and drops any lower step logged now, so the
    steps from it on."""
    if run.settings.mode != "offline":
        return lambda step: step >= run.starting_step
    current = Path(run.dir).resolve().parent  # <dir>/wandb/offline-run-<time>-<id>/files
    logs = [f / f"run-{run.id}.wandb" for f in sorted((path / "wandb").glob(f"*run-*-{run.id}")) if f.resolve() != current]
    have = logged_steps(logs)
    return lambda step: step not in have


def offline_note(run) -> str | None:
    """`W&B offline run: <folder>; upload it with: wandb sync <folders>` for an offline W&B run, else None.
    The command names every offline folder of this W&B run id, oldest first (an attempt killed and resumed
    leaves one folder per attempt, each with the steps it logged), each quoted, relative to the working
    directory when it lies under it."""
    if run.settings.mode != Wandb.OFFLINE:
        return None
    folder = Path(run.dir).resolve().parent  # <dir>/wandb/offline-run-<time>-<id>/files
    folders = sorted({*folder.parent.glob(f"offline-run-*-{run.id}"), folder})
    shown = [_near(f) for f in folders]
    return f"{OFFLINE_NOTE} {_near(folder)}; upload it with: wandb sync {' '.join(quote(str(f)) for f in shown)}"


OFFLINE_NOTE = "W&B offline run:"  # how offline_note's line opens


def without_wandb_note(log):
    """`log` without offline_note's line: a sweep's job leaves it to the one line its sweep prints (sweep_note)."""
    return lambda message: None if message.startswith(OFFLINE_NOTE) else log(message)


def sweep_note(run_dirs: list) -> str | None:
    """One line for all of a sweep's offline W&B runs: how many, and one `wandb sync` that uploads them all
    (None: none offline)."""
    found = [f for r in run_dirs for f in sorted((Path(r) / "wandb").glob("offline-run-*"))]
    if not found:
        return None
    parent = Path(os.path.commonpath([str(Path(r).resolve().parent) for r in run_dirs]))
    stem = os.path.commonprefix([Path(r).name for r in run_dirs])  # the sweep's stamp: not the folder's other runs
    where = _near(parent) / f"{stem}*" / "wandb" / "offline-run-*"
    return f"W&B: {len(found)} offline run(s) under each run's wandb/; upload them all with: wandb sync {where}"


def _near(folder: Path) -> Path:
    try:
        return folder.relative_to(Path.cwd())
    except ValueError:
        return folder


def start_wandb(mode: str, folder: Path, **init):
    """wandb.init with the settings every gspo run uses: quiet, no console capture, files under `folder`."""
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    return wandb.init(mode=mode, dir=str(Path(folder).resolve()),
                      settings=wandb.Settings(console="off", x_disable_stats=True), **init)


def wandb_group(cfg, folder: str) -> str:
    """A sweep's runs share its group (sweep-<stamp>); a lone run is its own group (its run id, else its
    folder's name), which its evals join, also from a copied or moved run folder."""
    return cfg.logger.group or cfg.run_id or folder


def _start_wandb(run: RunDir, cfg, config_dict: dict, mode: str, job_type: str):
    own = ({"name": run.path.name, "id": run.path.name.replace("/", "-"), "resume": "allow"} if job_type == "train"
           else {"name": f"{job_type}-{run.path.name}"})
    # a `gspo eval` of a run keeps its W&B runs in <run>/eval/wandb, apart from the training run's <run>/wandb
    folder = run.path if job_type == "train" else run.path / job_type
    folder.mkdir(parents=True, exist_ok=True)
    return start_wandb(mode, folder, project=cfg.logger.project, entity=cfg.logger.entity,
                       group=wandb_group(cfg, run.path.name), job_type=job_type, tags=list(cfg.logger.tags) or None,
                       config=config_dict, **own)
