"""run.json rebuilt whole: a resume that finds it unreadable (damaged by hand, a disk error) or gone while the
run has logged rows recovers what the record said from what the run left, never starting a fresh record that
forgets them: the last step (metrics.jsonl), the collapse (the detector replayed over the rows, as the run
found it), the stop (a collapse where the rows end, with its checkpoint, under train.stop_on_collapse; a
non-finite dump just past them under train.on_nonfinite=stop), the status that follows, and the start (the
step-0 held-out eval's time in evals.jsonl, which the run writes within seconds of starting). The damaged file
is kept as set-aside/run.json.unreadable.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import datetime

from gspo.trainer.run.collapse import CollapseDetector
from gspo.trainer.run.rundir import SET_ASIDE, RunDir, read_jsonl
from gspo.vocab.choices import OnNonfinite


def rebuild_status(run: RunDir, cfg, eval_key: str, log, start: Callable[[], dict | None] = lambda: None) -> None:
    """Rebuild <run>/run.json from the run's files when it is unreadable or missing and metrics.jsonl has rows;
    `eval_key`: the held-out accuracy the collapse detector watches (eval/<task>/accuracy); `start`: the run's
    `start` record as its config names it (the weights the report pools runs by), None where it cannot be known."""
    if run.status():
        return
    rows = read_jsonl(run.path / "metrics.jsonl")
    if not rows:
        return
    facts = recovered_facts(run, cfg, eval_key, rows)
    if (origin := start()) is not None:
        facts["start"] = origin
    damaged = run.path / "run.json"
    if damaged.exists():
        (run.path / SET_ASIDE).mkdir(exist_ok=True)
        shutil.copyfile(damaged, run.path / SET_ASIDE / "run.json.unreadable")
    run.set_status(facts.pop("status"), **facts)
    said = ", ".join(f"{k} {json.dumps(v)[:60]}" for k, v in facts.items() if k in ("step", "collapsed", "stopped", "started"))
    log(f"resume: {damaged} was unreadable or missing; rebuilt from the run's files ({said})")


def recovered_facts(run: RunDir, cfg, eval_key: str, rows: list[dict]) -> dict:
    """run.json's fields as the run's files show them: status, step, collapsed, stopped, started, rebuilt."""
    last = max(r["step"] for r in rows if isinstance(r.get("step"), int))
    detector = replayed_detector(run, cfg, eval_key, rows)
    facts: dict = {"step": last, "status": "finished" if last >= cfg.train.steps else "interrupted",
                   "rebuilt": "run.json was unreadable or missing: rebuilt from metrics.jsonl, evals.jsonl and checkpoints"}
    found = detector.found
    if found is not None:
        facts["collapsed"] = {"step": found.step, "reason": found.reason}
        saved = (run.checkpoints / f"step_{last:06d}").is_dir()
        if cfg.train.stop_on_collapse and found.step == last and saved:
            facts |= {"stopped": "collapse", "status": "finished"}
    dump = run.path / f"nonfinite_step_{last + 1:06d}.json"
    if cfg.train.on_nonfinite == OnNonfinite.STOP and dump.is_file():
        try:
            reason = json.loads(dump.read_text()).get("reason", "a non-finite value")
        except (ValueError, OSError, AttributeError):
            reason = "a non-finite value"
        facts |= {"stopped": "nonfinite", "status": "failed", "error": f"step {last + 1}: {reason}"}
    started = _started(run)
    if started is not None:
        facts |= {"started": started.isoformat(timespec="seconds"), "started_unix": started.timestamp()}
    return facts


def replayed_detector(run: RunDir, cfg, eval_key: str, rows: list[dict]) -> CollapseDetector:
    """A collapse detector that has seen the run's logged `rows` in step order as the run saw them (a resume
    continues where it was; a rebuilt run.json finds the collapse the run found)."""
    detector = CollapseDetector(cfg.train.collapse, eval_key)
    watched = _watched(run, eval_key)
    for row in sorted(rows, key=lambda r: r.get("step", 0)):
        step = row.get("step")
        detector.observe(row | {eval_key: watched[step]} if eval_key in row and step in watched else row)
    return detector


def _watched(run: RunDir, eval_key: str) -> dict[int, float]:
    """step -> the held-out accuracy the collapse rule read at that step: the step's first sampled eval of the task
    in evals.jsonl. A run stopped early evaluates once more at train.final_eval_k, and metrics.jsonl's row keeps
    that final reading (the one a report reads), not the one that stopped it."""
    task, first = eval_key.split("/")[1], {}
    for row in read_jsonl(run.path / "evals.jsonl"):
        step, value = row.get("step"), row.get("value")
        if (row.get("benchmark") == task and row.get("source", "train") == "train" and row.get("temperature") != 0.0
                and isinstance(step, int) and isinstance(value, int | float) and step not in first):
            first[step] = float(value)
    return first


def _started(run: RunDir) -> datetime | None:
    """When the run started, to within its step-0 eval: that eval's time in evals.jsonl (None without one)."""
    for row in read_jsonl(run.path / "evals.jsonl"):
        if row.get("step") == 0 and row.get("source", "train") == "train" and isinstance(row.get("time"), str):
            try:
                return datetime.fromisoformat(row["time"])
            except ValueError:
                return None
    return None


