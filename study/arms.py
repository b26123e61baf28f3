"""Arms that are provably the same under a sweep's config are not run twice. What equals what is each algorithm's
registration (gspo.algos.register: `same_as`, `on_policy_as`), never a name here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gspo.algos import ALGOS
from gspo.conf.errors import GspoError
from gspo.conf.overrides import key_of

if TYPE_CHECKING:
    from gspo.study.plan import Plan


def fold_equal_arms(plan: Plan) -> tuple[list[str], list[str]]:
    """(the plan's overrides, notes). An algorithm that equals another when every sequence has one advantage
    (algo.advantage=group, no token-level correction: GSPO-token and GSPO, GSPO paper eqs. 13-14) is dropped from
    an algo= list holding both, with a note. On-policy (train.minibatches=1 train.epochs=1) two algorithms whose
    gradients are then equal (every ratio is 1: GSPO and GRPO) are refused. Keys this cannot see (a preset's own
    settings) leave the arms as they are. An algo= entry that is a preset of another name (grpo_replay) is left to
    the config."""
    overrides, given = list(plan.overrides), plan.given
    algos = (given("algo") or "").split(",")
    notes = []
    known = {a: ALGOS[a] for a in algos if a in ALGOS}
    on_policy = given("train.minibatches") == "1" and given("train.epochs") in (None, "1")
    for spec in known.values():
        if on_policy and spec.on_policy_as in known:
            other = known[spec.on_policy_as]
            raise GspoError(f"train.minibatches=1 is on-policy: every ratio is 1, so {other.title} and {spec.title} give "
                            "the same gradient and their arms cannot differ; use train.minibatches=4 (the GSPO "
                            "paper's) or train.epochs=2")
    token_free = not any(key_of(o).startswith(("algo.advantage", "algo.correction"))
                         for o in [*overrides, *dict(plan.params)])
    dropped = [a for a, spec in known.items() if token_free and spec.same_as in known]
    if dropped:
        kept = ",".join(a for a in algos if a not in dropped)
        overrides = [o for o in overrides if key_of(o) != "algo"] + [f"algo={kept}"]
        for a in dropped:
            spec = known[a]
            notes.append(f"{spec.title} left out: with one advantage per sequence (algo.advantage=group) it equals "
                         f"{known[spec.same_as].title} in value and gradient; sweep a preset with per-token "
                         f"advantages (algo.advantage=step) to compare them")
    return overrides, notes
