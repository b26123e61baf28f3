"""Group runs into arms by what differs in their resolved configs; seeds are replicates.

A key joins the arm label when its value differs between runs and is not already implied by the keys
before it (algo.name comes first, so GRPO's and GSPO's clip ranges, which follow from the algorithm,
do not clutter the label). Bookkeeping keys (seed, run id, output folder, logging) and the keys a resume may
change never make arms.
Runs that are not one experiment (another task setting, model, cold start or length) are refused, naming
the key (report/comparable.py).

Arm labels are short (GRPO, GSPO lr=0.0005): algorithm names as the papers write them, other keys by their
last part; `legend_note` spells the keys out once. Comparisons (`pairs`) are made within strata: the first
label key (the algorithm, when it differs) is compared at each value of the others, each arm against the
first arm of its stratum (GSPO - GRPO at every learning rate of a learning-rate sweep); an arm alone in its
stratum, with the first arm of the nearest stratum that has one (RLOO - GRPO in a family preset).
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.conf.resume import trajectory_neutral
from gspo.report.comparable import check_comparable
from gspo.report.runs import Run
from gspo.vocab.algorithms import title as algo_title

REPLICATE_KEYS = ("seed",)
BOOKKEEPING = ("run_id", "output_dir", "resume", "logger.", "eval.workers", "model.tiny.cache_dir")
FIRST = ("algo.name",)


@dataclass
class Arm:
    label: str  # "GRPO", "GSPO lr=0.0005" (or "all runs" when nothing differs)
    values: dict  # the label's keys and values
    runs: list[Run]

    @property
    def seeds(self) -> list:
        return [r.config.get("seed") for r in self.runs]


def _comparable(key: str) -> bool:
    """Keys that can make arms: not the seed, bookkeeping, or a key a resume may change (conf/resume.py: a
    run resumed with train.keep_checkpoints=2 trained what it would have without it)."""
    return key not in REPLICATE_KEYS and not key.startswith(BOOKKEEPING) and not trajectory_neutral(key)


def once_per_seed(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """(the runs, each (arm, seed) once; notes): a run found again in another folder (a copy: the same config and
    seed) is one seed, not two; the copy with more steps is kept."""
    kept: dict[tuple, Run] = {}
    notes = []
    for r in runs:
        key = tuple(sorted((k, repr(v)) for k, v in r.config.items() if _comparable(k) or k in REPLICATE_KEYS))
        other = kept.setdefault(key, r)
        if other is not r:
            kept[key], extra = (r, other) if r.last_step > other.last_step else (other, r)
            notes.append(f"{extra.path}: the same arm and seed as {kept[key].path} (a copy): counted once")
    return list(kept.values()), notes


def differing_keys(runs: list[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.config if _comparable(k)})
    return [k for k in keys if len({repr(r.config.get(k)) for r in runs}) > 1]


def shared_config(runs: list[Run]) -> dict:
    """Keys with one value across all runs (bookkeeping left out)."""
    diff = set(differing_keys(runs))
    return {k: v for k, v in runs[0].config.items() if _comparable(k) and k not in diff}


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
        arms.setdefault(tuple(values.items()), Arm(short_label(values), values, [])).runs.append(r)
    return list(arms.values())


def _value(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def short_label(values: dict) -> str:
    """GRPO, GSPO-token, GSPO lr=0.0005, minibatches=8 ("all runs" when nothing differs)."""
    parts = [algo_title(v) if k == "algo.name" else f"{k.rsplit('.', 1)[-1]}={_value(v)}"
             for k, v in values.items()]
    return " ".join(parts) or "all runs"


def legend_note(keys: list[str]) -> str:
    """What the short labels abbreviate: `lr = train.lr`; empty when the labels are algorithm names only."""
    return ", ".join(f"{k.rsplit('.', 1)[-1]} = {k}" for k in keys if k != "algo.name" and "." in k)


def numeric_keys(arms: list[Arm]) -> list[str]:
    """Label keys whose values are numbers in every arm and take at least two values: a sensitivity sweep."""
    keys = [k for k in (arms[0].values if arms else {}) if k != "algo.name"]
    return [k for k in keys
            if all(isinstance(a.values[k], (int, float)) and not isinstance(a.values[k], bool) for a in arms)
            and len({a.values[k] for a in arms}) > 1]


def pairs(arms: list[Arm]) -> list[tuple[Arm, Arm]]:
    """(arm, its baseline): within each value of the other label keys, every arm against the stratum's first. An arm
    alone in its stratum (a preset whose other keys differ too: RLOO's adv_scale, CISPO's anchor, GSPO+TIS's
    correction) is compared with the first arm of the nearest stratum that has a baseline (the fewest other keys
    differing, the earliest on a tie), so every arm of a family preset is compared, and GSPO+TIS at lag 2 with GRPO
    at lag 2, not at lag 0."""
    if len(arms) < 2:
        return []
    first = next(iter(arms[0].values), None)
    strata: dict[tuple, list[Arm]] = {}
    for arm in arms:
        rest = tuple((k, repr(v)) for k, v in arm.values.items() if k != first)
        strata.setdefault(rest, []).append(arm)
    based = [rest for rest, group in strata.items() if len(group) > 1]
    out = [(arm, group[0]) for group in strata.values() for arm in group[1:]]
    for rest, (arm, *others) in strata.items():
        if not others and based and arm is not arms[0]:
            near = min(based, key=lambda b: sum(x != y for x, y in zip(b, rest, strict=True)))  # min keeps the earliest tie
            out.append((arm, strata[near][0]))
    return out or [(arm, arms[0]) for arm in arms[1:]]
