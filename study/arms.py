"""Arms that are provably the same under a sweep's config are not run twice. What equals what is each algorithm's
registration (gspo.algos.register: `same_as`, `on_policy_as`), never a name here."""

from __future__ import annotations

from gspo.algos import ALGOS
from gspo.conf.errors import GspoError


def given(key: str, overrides: list[str], params: dict[str, str]) -> str | None:
    """The value a sweep gives `key`: the command line's (it wins over a preset's params), else the preset's."""
    said = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == key]
    return said[-1] if said else params.get(key)


def fold_equal_arms(overrides: list[str], params: dict[str, str] | None) -> tuple[list[str], list[str]]:
    """(overrides, notes). An algorithm that equals another when every sequence has one advantage
    (algo.advantage=group, no token-level correction: GSPO-token and GSPO, GSPO paper eqs. 13-14) is dropped from
    an algo= list holding both, with a note. On-policy (train.minibatches=1 train.epochs=1) two algorithms whose
    gradients are then equal (every ratio is 1: GSPO and GRPO) are refused. Keys this cannot see (a preset's own
    settings) leave the arms as they are. An algo= entry that is a preset of another name (grpo_replay) is left to
    the config."""
    params = params or {}
    algos = (given("algo", overrides, params) or "").split(",")
    notes = []
    known = {a: ALGOS[a] for a in algos if a in ALGOS}
    on_policy = given("train.minibatches", overrides, params) == "1" and \
        given("train.epochs", overrides, params) in (None, "1")
    for spec in known.values():
        if on_policy and spec.on_policy_as in known:
            other = known[spec.on_policy_as]
            raise GspoError(f"train.minibatches=1 is on-policy: every ratio is 1, so {other.title} and {spec.title} give "
                            "the same gradient and their arms cannot differ; use train.minibatches=4 (the GSPO "
                            "paper's) or train.epochs=2")
    token_free = not any(o.split("=", 1)[0].lstrip("+").startswith(("algo.advantage", "algo.correction"))
                         for o in [*overrides, *params])
    dropped = [a for a, spec in known.items() if token_free and spec.same_as in known]
    if dropped:
        kept = ",".join(a for a in algos if a not in dropped)
        overrides = [o for o in overrides if o.split("=", 1)[0] != "algo"] + [f"algo={kept}"]
        for a in dropped:
            spec = known[a]
            notes.append(f"{spec.title} left out: with one advantage per sequence (algo.advantage=group) it equals "
                         f"{known[spec.same_as].title} in value and gradient; sweep a preset with per-token "
                         f"advantages (algo.advantage=step) to compare them")
    return overrides, notes
