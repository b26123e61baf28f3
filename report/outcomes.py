"""outcomes.csv.gz: every run's per-problem held-out outcomes, written beside the page so its noise tables and its
intervals over new problems (the project's distinctive figures) can be recomputed from the page folder alone
(report/recompute.py), without the runs.

One row per (run, eval, problem): the run, its arm, that arm's baseline and whether the page paired them, its seed,
the eval's benchmark, step, sampling (greedy or not), k and problem-set fingerprint, whether the row is behind the
page's final value of that eval (`final`: the step the page read, intention-to-treat for a run that ended early),
the problem's index, how many of its k samples were right and, where the run recorded them, each sample's reward in
draw order (`samples`, space-separated). From evals.jsonl's `correct` and `outcomes` (trainer/evaluate.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gspo.report.heldout import TASK_STATS, final_outcomes, read_eval_rows
from gspo.report.tables import PAIRED, Difference

OUTCOMES = "outcomes.csv.gz"


def _rows(run, arm: str, base: str, paired: bool, finals: dict[bool, int | None]) -> list[dict]:
    """The run's train-eval rows of evals.jsonl, one per problem (the last of a step evaluated twice)."""
    path = run.path / "evals.jsonl"
    if not path.is_file():
        return []
    last = {}
    for row in read_eval_rows(path, path.stat().st_mtime):
        if row.get("source") == "train":
            last[(row.get("benchmark"), row.get("step"), row.get("temperature") == 0)] = row
    out = []
    for (bench, step, greedy), row in last.items():
        k, samples = int(row.get("k") or 1), row.get("outcomes")
        ok = isinstance(samples, list) and len(samples) == len(row["correct"])
        head = {"run": run.run_id, "arm": arm, "baseline": base, "paired": int(paired), "seed": run.config.get("seed"),
                "benchmark": bench, "step": step, "greedy": int(greedy), "k": k, "problems": row.get("problems"),
                "final": int(finals.get(greedy) == step)}
        out += [head | {"problem": i, "correct": int(c),
                        "samples": " ".join(f"{float(x):g}" for x in samples[i]) if ok and isinstance(samples[i], list)
                        else ""} for i, c in enumerate(row["correct"])]
    return out


def outcomes_frame(arms: list, diffs: list[Difference], metric: str) -> pd.DataFrame:
    """Every run's per-problem outcomes; `diffs`: the page's differences of held-out accuracy `metric` (which arm
    is compared with which baseline, paired or not); `final` marks the rows behind the page's final values."""
    by_arm = {id(d.arm): d for d in diffs}
    task = metric.split("/")[1] if metric.count("/") == 2 else ""
    rows = []
    for arm in arms:
        d = by_arm.get(id(arm))
        for run in arm.runs:
            finals = {}
            for stat, greedy in TASK_STATS.items():
                found = final_outcomes(run, f"eval/{task}/{stat}")
                finals[greedy] = found.step if found is not None else None
            rows += _rows(run, arm.label, d.base.label if d else "", bool(d and d.method == PAIRED), finals)
    return pd.DataFrame(rows)


def write_outcomes(out_dir: Path, arms: list, diffs: list[Difference], metric: str) -> Path | None:
    """outcomes.csv.gz in the page folder (None where no run recorded per-problem outcomes)."""
    frame = outcomes_frame(arms, diffs, metric)
    if frame.empty:
        return None
    path = out_dir / OUTCOMES
    frame.to_csv(path, index=False, compression={"method": "gzip", "mtime": 0})  # the same bytes for the same page
    return path


def as_array(samples: pd.Series) -> np.ndarray | None:
    """The `samples` column of one eval back to [problems, k] (None where any problem's were not recorded)."""
    if (samples.fillna("") == "").any():
        return None
    return np.array([[float(x) for x in str(s).split()] for s in samples])
