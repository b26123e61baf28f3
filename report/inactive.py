"""Arms whose mask, filter or correction never acted: said on the page before any verdict on them.

An arm that differs from its baseline only by a mechanism (OPSM's mask, a mismatch correction's mask or truncation,
dynamic sampling's filter, the overlong penalty) trains exactly as its baseline wherever the mechanism's share is 0
at every step of every run: a tie with its baseline is then no finding about the mechanism, and a difference is
seed noise. The mechanisms are read from the metric catalogue (gspo.vocab.metrics), by the share each logs only
where it is on; a mechanism is "silent" when that metric is 0 at every logged step of every run of the arm.

A silent correction's mask or truncation still leaves the importance weight rho on every term (TIS, MIS) unless
rho itself is 1 (correction/applied_mean 1 at every step): only then does the arm equal the uncorrected one.
Where another arm of the compare has the same seeds and the same training reward and policy loss at every step to
the last digit, the note names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.report.arms import Arm
from gspo.vocab import metrics as M


@dataclass(frozen=True)
class Mechanism:
    metric: str  # the share (or amount) it logs where it is on; 0 at a step: it did nothing that step
    what: str  # what did nothing
    baseline: str  # what the arm then equals
    applied: str = ""  # a weight metric that must also stay 1 for the arm to equal its baseline (a correction's)


MECHANISMS = (
    Mechanism(M.OPSM_MASKED, "OPSM's mask dropped no sequence", "GRPO with the same settings"),
    Mechanism(M.CORRECTION_MASKED, "the mismatch correction masked no term", "the uncorrected arm", M.CORRECTION_APPLIED),
    Mechanism(M.CORRECTION_TRUNCATED, "TIS truncated no weight", "the uncorrected arm", M.CORRECTION_APPLIED),
    Mechanism(M.GROUPS_DROPPED, "dynamic sampling's filter dropped no group", "the arm without dynamic sampling"),
    Mechanism(M.OVERLONG_PENALTY, "the overlong penalty was 0", "the arm without overlong shaping"),
)
SAME = (M.REWARD_MEAN, M.LOSS_POLICY)  # what "equal to another arm to the last digit" compares, step by step


def _always(arm: Arm, metric: str, value: float) -> bool | None:
    """Whether `metric` is exactly `value` at every logged step of every run of the arm; None: it is logged nowhere."""
    cols = [r.metrics[metric].dropna() for r in arm.runs if metric in r.metrics]
    cols = [c for c in cols if len(c)]
    if not cols:
        return None
    return all(bool((c == value).all()) for c in cols)


def _same_runs(a: Arm, b: Arm) -> tuple[str, ...]:
    """The SAME metrics b's runs, paired by seed, log with a's values at a's steps, to the last digit; () where
    the seeds differ or any logged one does."""
    by_seed = {r.config.get("seed"): r for r in b.runs}
    if sorted(map(str, a.seeds)) != sorted(map(str, by_seed)):
        return ()
    compared = set()
    for run in a.runs:
        other = by_seed[run.config.get("seed")]
        for metric in SAME:
            if metric not in run.metrics or metric not in other.metrics:
                continue
            x, y = run.metrics.set_index("step")[metric], other.metrics.set_index("step")[metric]
            if not x.index.equals(y.index) or not x.equals(y):
                return ()
            compared.add(metric)
    return tuple(m for m in SAME if m in compared)


def never_acted(arms: list[Arm]) -> list[str]:
    """One line per arm and mechanism that never acted: what did nothing, over how many runs, and what the arm
    therefore equals (with the arm of the compare it matches to the last digit, where there is one)."""
    lines = []
    for arm in arms:
        for m in MECHANISMS:
            if not _always(arm, m.metric, 0.0):
                continue
            steps = sum(int(r.metrics[m.metric].notna().sum()) for r in arm.runs if m.metric in r.metrics)
            equal = not m.applied or bool(_always(arm, m.applied, 1.0))
            twin = next(((b.label, same) for b in arms if b is not arm and (same := _same_runs(arm, b))), None)
            line = (f"{arm.label}: {m.what} at any step ({m.metric} = 0 at all {steps} logged steps of its "
                    f"{len(arm.runs)} run(s))")
            if equal:
                line += f", so it trained as {m.baseline}"
                line += (f": its runs equal {twin[0]}'s to the last digit ({', '.join(twin[1])} at every step)"
                         if twin else "")
                line += "; a difference to it is seed noise, not this mechanism's effect."
            else:
                line += f"; its weights were rho itself ({m.applied} not 1): it acted only as an untruncated, unmasked " \
                        "importance weight."
            lines.append(line)
    return lines

