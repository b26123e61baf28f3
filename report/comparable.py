"""What makes runs comparable, and the step at which they are compared.

Runs are one experiment only when everything that defines it is the same: the task and all its settings
(`task.*`: digits, operations, dataset, held-out size...), the model and its cold start (`model.name`,
`model.chat_template`, `model.tiny.*`: the embedded model's shape and its fine-tune, and `model.start`: the
weights it started from, as run.json records them), the schedule and
length (`train.steps`, `train.lr_schedule`, `train.warmup_steps`) and what counts as a collapse
(`train.collapse.*`). Runs that differ there are refused with one line naming the key (`check_comparable`),
or, when the user asks (`gspo report --separate`), split into groups reported one by one (`split_groups`).
What the user varies between arms (the algorithm, the learning rate, the batch, the rollout) is not here.

Runs still going are compared at a common step (`at_common_step`): each metric at the last step every run
of the comparison logged it, so no arm's mean mixes one run's step 20 with another's step 0. A run that ended
early (a rule stopped it, or it failed) is read intention-to-treat: its last values stand in its pair and it
does not cut the others (`ended_early`). Runs with no training step yet are left out and said to be.
"""

from __future__ import annotations

import dataclasses
import math

from gspo.conf.errors import GspoError
from gspo.report.runs import START_KEY, Run

DEFINING_PREFIXES = ("task.", "model.tiny.", "train.collapse.")
DEFINING_KEYS = ("model.name", START_KEY, "model.chat_template", "train.steps", "train.lr_schedule", "train.warmup_steps",
                 "train.stop_on_collapse")
NOT_DEFINING = ("task.workers", "model.tiny.cache_dir")  # where and how fast, not what: they may differ
WHAT = {"task.": "the task's settings", "model.": "the model and its cold start",
        "train.collapse.": "what counts as a collapse", "train.": "the schedule and length"}


def defining(key: str) -> bool:
    """Whether `key` is part of what defines the experiment (runs must agree on it to be compared)."""
    return key not in NOT_DEFINING and (key in DEFINING_KEYS or key.startswith(DEFINING_PREFIXES))


def _what(key: str) -> str:
    return next(words for prefix, words in WHAT.items() if key.startswith(prefix))


def defining_config(run: Run) -> dict:
    return {k: v for k, v in run.config.items() if defining(k)}


FIRST_NAMED = ("model.name", START_KEY, "task.kind", "task.name", "task.dataset", "task.subset", "model.tiny.", "task.")


def _rank(key: str) -> tuple[int, str]:
    """What an error names first: the model and task by name, the cold start, the task's settings (the
    held-out size last of them), then the schedule."""
    rank = next((i for i, k in enumerate(FIRST_NAMED) if key == k or (k.endswith(".") and key.startswith(k))),
                len(FIRST_NAMED))
    return (rank + (key == "task.eval_size"), key)


def differing_defining(runs: list[Run]) -> list[str]:
    """The defining keys on which the runs do not all agree, most telling first (a key some runs lack counts
    as None)."""
    keys = sorted({k for r in runs for k in r.config if defining(k)}, key=_rank)
    # a start not recorded (a run of an older gspo, a damaged run.json) is unknown, not different
    return [k for k in keys if len({repr(r.config.get(k)) for r in runs if k != START_KEY or k in r.config}) > 1]


def _value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def check_comparable(runs: list[Run]) -> None:
    """Refuse runs that are not one experiment: one line naming the first key that differs, its values and
    which runs have each, and how many other defining keys differ."""
    keys = differing_defining(runs)
    if not keys:
        return
    key = keys[0]
    values: dict[str, list[str]] = {}
    for r in runs:
        values.setdefault(_value(r.config.get(key)), []).append(r.run_id)
    parts = "; ".join(f"{key}={v} ({_some(ids)})" for v, ids in values.items())
    more = f" (and {len(keys) - 1} more: {', '.join(keys[1:4])}{', ...' if len(keys) > 4 else ''})" if len(keys) > 1 else ""
    raise GspoError(f"runs differ in {key}{more}, which is {_what(key)}, so they are not one experiment: {parts}; "
                    "report them separately, or pass --separate for one report per group")


def _some(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def split_groups(runs: list[Run]) -> list[tuple[str, list[Run]]]:
    """Runs grouped by everything that defines the experiment, in order of first appearance; each group
    named by the defining keys that tell it apart (`task.max_digits=5 train.steps=20`)."""
    keys = differing_defining(runs)
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault(tuple(repr(r.config.get(k)) for k in keys), []).append(r)
    return [(" ".join(f"{k}={_value(g[0].config.get(k))}" for k in keys) or "all runs", g) for g in groups.values()]


def _cut(run: Run, last: dict[str, int]) -> Run:
    """The run with each metric column blanked after its common step `last[column]`."""
    m = run.metrics.copy()
    for col, step in last.items():
        if col in m:
            m.loc[m["step"] > step, col] = math.nan
    end = max(last.values(), default=run.last_step)
    m = m[m["step"] <= end].reset_index(drop=True)
    status = dict(run.status)
    if (status.get("collapsed") or {}).get("step", -1) > end:  # it collapsed after the step compared
        status.pop("collapsed")
    final_steps = {}  # where each final now is: the logged step, or the last value at or before the cut
    for col, step in run.final_steps.items():
        cap = last.get(col, end)
        if step <= cap:
            final_steps[col] = step
        elif (kept := _last_logged(run, col, cap)) is not None:
            final_steps[col] = kept
    return dataclasses.replace(run, metrics=m, status=status, final_steps=final_steps)


def _last_logged(run: Run, col: str, upto: int) -> int | None:
    if col not in run.metrics:
        return None
    steps = run.metrics.loc[run.metrics[col].notna() & (run.metrics["step"] <= upto), "step"]
    return int(steps.max()) if len(steps) else None


def at_common_step(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """(the runs to compare, what the page must say). Runs with no training step yet are left out (unless no
    run has one). The common step is the last step every remaining run reached; each metric is then cut at
    the last step, at or before it, where every run that logs the metric has a value (held-out evals run
    every train.eval_every steps). Nothing is cut, and nothing said, when the runs all end together."""
    started = [r for r in runs if r.last_step >= 1] or runs
    said = [f"{r.run_id} is left out: it has no training step yet ({r.status.get('status', 'unknown')})"
            for r in runs if all(r is not u for u in started)]
    # a run that ended before its end (stopped where it collapsed, by another rule, or failed) does not hold the
    # others back: intention-to-treat, it keeps its pair with its last values
    pace = [r for r in started if not ended_early(r)] or started
    said += [itt_words(r) for r in started if ended_early(r) and r.status.get("stopped") != "collapse"]
    common = min(r.last_step for r in pace)
    cols = sorted({c for r in pace for c in r.metrics.columns if c != "step"})
    last = {}
    for col in cols:
        steps = [s for r in pace if (s := _last_logged(r, col, common)) is not None]
        if steps:
            last[col] = min(steps)
    ends = [r.last_step for r in pace]
    moved = [r for r in pace if any(_last_logged(r, c, r.last_step) not in (None, s) for c, s in last.items())]
    if not moved:
        return started, said
    reach = f"{min(ends)}-{max(ends)}" if min(ends) != max(ends) else str(common)
    steps_cfg = sorted({str(r.config.get("train.steps")) for r in pace})
    evals = sorted({s for c, s in last.items() if c.startswith("eval/")})
    eval_note = (f"; held-out accuracy as of step {evals[0]}, the last eval every run has"
                 if evals and evals[0] != common else "")
    said.insert(0, f"Compared at step {common}, the last step every run reached (the runs reached step {reach} of "
                   f"{'/'.join(steps_cfg)}: {_unfinished(pace)}){eval_note}; later steps are left out of the "
                   "tables, verdict and plots.")
    paced = {id(r) for r in pace}
    return [_cut(r, last) if id(r) in paced else r for r in started], said


def ended_early(run: Run) -> bool:
    """A run that will not go on to its configured end: a rule stopped it (run.json `stopped`: a collapse under
    train.stop_on_collapse, a non-finite value) or it failed. Intention-to-treat (issue 57 D5): it keeps its pair
    with its last eval and its last values, the same numbers in the rounds' looks and on the page, and it does not
    cut the other runs to its step. A run interrupted, killed or still running may go on: the runs are compared at
    the step every one of those reached."""
    return run.status.get("status") in ("finished", "failed") and bool(run.status.get("stopped")
                                                                      or run.status.get("status") == "failed")


def itt_words(run: Run) -> str:
    """What the page says of a run that ended early for a reason other than a collapse (the collapse lines say
    those)."""
    why = run.status.get("stopped") or run.status.get("status")
    evals = sorted({s for c, s in run.final_steps.items() if c.startswith("eval/")})
    at = f" (held-out eval of step {evals[-1]})" if evals else ""
    return (f"{run.run_id} ended early at step {run.last_step} ({why}): intention-to-treat, it keeps its pair with its "
            f"last values{at}, in the verdict, the tables and the rounds alike; the other runs are not cut to its step.")


def _unfinished(runs: list[Run]) -> str:
    not_done = [f"{r.run_id} {r.status.get('status', 'unknown')} at step {r.last_step}" for r in runs
                if r.status.get("status") != "finished"]
    return "; ".join(not_done[:4]) + (f" and {len(not_done) - 4} more" if len(not_done) > 4 else "") or "all finished"


def seeds_used(arms) -> str:
    """`GRPO 2, CISPO 1`: the runs each arm's numbers come from."""
    return ", ".join(f"{a.label} {len(a.runs)}" for a in arms)

