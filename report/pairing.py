"""Whether two arms pair by seed, checked from the runs' own records.

Runs of one seed share the initial model, the prompt of every step and the sampling streams (every draw
derives from (seed, step): trainer/seeds.py), whatever the algorithm. So two arms pair when, for every seed,
each arm has exactly one run of it (the same seeds in both), the pair agrees on everything that makes the
model, the prompt stream and the held-out problems (the keys below), and, where the runs recorded their
held-out problems per problem, the problems are the same (their fingerprints). Anything else (different seeds
per arm, a different eval set) falls back to the unpaired comparison, and `why` says so in words. A seed whose
pair misses a value (a run with no final eval) leaves only its own pair out (`dropped`, said on the page): one
missing value must not unpair the whole comparison and silently turn it into Welch's (issue 57 D9). A run that
stopped early or failed keeps its pair with its last eval (intention-to-treat, report/comparable.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gspo.report.runs import Run

# what must agree within a pair: the initial model, the task (its prompts and held-out set), the batch shape
# of the prompt stream; bookkeeping under these prefixes is exempt
STREAM_PREFIXES = ("model.", "task.", "train.prompts_per_step", "seed")
EXEMPT = ("model.tiny.cache_dir",)


@dataclass(frozen=True)
class Pairing:
    pairs: list[tuple[Run, Run]]  # (arm's run, baseline's run) of one seed, by seed; empty when unpaired
    why: str  # empty when paired; else why not, in words
    dropped: tuple = ()  # the seeds whose pair is left out: a run of the pair has no value (the rest stay paired)

    @property
    def paired(self) -> bool:
        return not self.why


def _stream(run: Run) -> dict:
    return {k: v for k, v in run.config.items() if k.startswith(STREAM_PREFIXES) and k not in EXEMPT}


def _by_seed(runs: list[Run]) -> dict | None:
    seeds: dict = {}
    for r in runs:
        if r.config.get("seed") in seeds:
            return None
        seeds[r.config.get("seed")] = r
    return seeds


def _seeds(runs: list[Run]) -> str:
    return ",".join(str(r.config.get("seed")) for r in runs)


def pair_runs(arm: list[Run], base: list[Run], value, problems=None, names: tuple[str, str] = ("arm", "baseline")
              ) -> Pairing:
    """Pair `arm`'s runs with `base`'s by seed. `value(run)`: the run's value of the compared metric (NaN:
    missing); `problems(run)`: the fingerprint of its held-out problems, or None where not recorded."""
    a, b = _by_seed(arm), _by_seed(base)
    if a is None or b is None:
        return Pairing([], "an arm has two runs of one seed")
    if set(a) != set(b):
        return Pairing([], f"the arms' seeds differ ({names[0]}: {_seeds(arm)}; {names[1]}: {_seeds(base)})")
    kept, dropped = [], []
    for x, y in [(a[s], b[s]) for s in sorted(a, key=str)]:
        sx, sy = _stream(x), _stream(y)
        if sx != sy:
            key = sorted(k for k in set(sx) | set(sy) if sx.get(k) != sy.get(k))[0]
            return Pairing([], f"seed {x.config.get('seed')}'s runs differ in {key}, so they do not share their "
                               "model, prompts or held-out problems")
        if math.isnan(value(x)) or math.isnan(value(y)):  # that seed's pair only: one NaN must not unpair the rest
            dropped.append(x.config.get("seed"))
            continue
        if problems is not None and None not in (px := problems(x), py := problems(y)) and px != py:
            return Pairing([], f"seed {x.config.get('seed')}'s runs were evaluated on different problems")
        kept.append((x, y))
    return Pairing(kept, "", tuple(dropped))
