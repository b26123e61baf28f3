"""Log a report to W&B: every plot as an image and summary.csv as a table, in the runs' group.

`setting` is a W&B mode (auto, online, offline, disabled) or "runs": follow the runs' own
logger.wandb (disabled when every run had W&B off). Offline-first as the runs are.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gspo.report.runs import Run
from gspo.trainer.run.loggers import offline_note, start_wandb, wandb_mode
from gspo.vocab.choices import Wandb


def report_wandb_mode(setting: str, runs: list[Run]) -> str:
    if setting != "runs":
        return wandb_mode(setting)
    on = [r.config.get("logger.wandb") for r in runs if r.config.get("logger.wandb") != Wandb.DISABLED]
    return wandb_mode(on[0]) if on else "disabled"


def log_report(mode: str, runs: list[Run], out_dir: Path, plots: list[tuple[str, Path]],
               summary: pd.DataFrame) -> str | None:
    """Returns the line saying where an offline W&B run is and how to upload it (None: online)."""
    import wandb

    groups = {r.config.get("logger.group") or r.run_id for r in runs}
    run = start_wandb(mode, out_dir, project=runs[0].config.get("logger.project", "gspo"), job_type="report",
                      group=groups.pop() if len(groups) == 1 else None, name=f"report-{out_dir.name}")
    images = {f"report/{path.stem}": wandb.Image(str(path), caption=caption) for caption, path in plots}
    run.log({**images, "report/summary": wandb.Table(dataframe=summary.astype(str))})
    note = offline_note(run)
    run.finish()
    return note
