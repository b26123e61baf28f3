"""Group runs into arms by what differs in their resolved configs; seeds are replicates.

A key joins the arm label when its value differs between runs and is not already implied by the keys
before it (algo.name comes first, so GRPO's and GSPO's clip ranges, which follow from the algorithm,
do not clutter the label). Bookkeeping keys (seed, run id, output folder, logging) never make arms.
Runs on different tasks or models are not comparable: the report refuses them and names the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.conf.errors import GspoError
from gspo.trainer.report.runs import Run

REPLICATE_KEYS = ("seed",)
BOOKKEEPING = ("run_id", "output_dir", "resume", "logger.", "eval.workers", "model.tiny.cache_dir")
SEPARATE = ("model.name", "task.kind", "task.name", "task.dataset", "task.subset")
FIRST = ("algo.name",)


@dataclass
class Arm:
    label: str  # "algo.name=grpo" (or "all runs" when nothing differs)
    values: dict  # the label's keys and values
    runs: list[Run]

    @property
    def seeds(self) -> list:
        return [r.config.get("seed") for r in self.runs]


def _comparable(key: str) -> bool:
    return key not in REPLICATE_KEYS and not key.startswith(BOOKKEEPING)


def differing_keys(runs: list[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.config if _comparable(k)})
    return [k for k in keys if len({repr(r.config.get(k)) for r in runs}) > 1]


def shared_config(runs: list[Run]) -> dict:
    """Keys with one value across all runs (bookkeeping left out)."""
    diff = set(differing_keys(runs))
    return {k: v for k, v in runs[0].config.items() if _comparable(k) and k not in diff}


def check_comparable(runs: list[Run]) -> None:
    for key in SEPARATE:
        values: dict[str, list[str]] = {}
        for r in runs:
            values.setdefault(repr(r.config.get(key)), []).append(r.run_id)
        if len(values) > 1:
            parts = "; ".join(f"{key}={v} ({', '.join(ids)})" for v, ids in values.items())
            raise GspoError(f"runs differ in {key}, so they are not comparable: {parts}; report them separately")


def _implied(key: str, by: list[str], runs: list[Run]) -> bool:
    seen: dict[tuple, object] = {}
    for r in runs:
        group = tuple(repr(r.config.get(k)) for k in by)
        if seen.setdefault(group, repr(r.config.get(key))) != repr(r.config.get(key)):
            return False
    return bool(by)


def label_keys(runs: list[Run]) -> list[str]:
    diff = differing_keys(runs)
    ordered = [k for k in FIRST if k in diff] + [k for k in diff if k not in FIRST]
    keys: list[str] = []
    for k in ordered:
        if not _implied(k, keys, runs):
            keys.append(k)
    return keys


def group_arms(runs: list[Run]) -> list[Arm]:
    """Arms in order of first appearance; each holds its runs (the seeds)."""
    check_comparable(runs)
    keys = label_keys(runs)
    arms: dict[tuple, Arm] = {}
    for r in runs:
        values = {k: r.config.get(k) for k in keys}
        label = " ".join(f"{k}={v}" for k, v in values.items()) or "all runs"
        arms.setdefault(tuple(values.items()), Arm(label, values, [])).runs.append(r)
    return list(arms.values())
