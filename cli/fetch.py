"""`gspo fetch [preset=NAME] [OVERRIDES]`: download every Hugging Face hub asset a run, a sweep or a compare preset
will read (model and tokenizer, the task's dataset, the benchmarks) into the cache ahead of time, so that the run
itself works offline (HF_HUB_OFFLINE=1, or a machine without the network).

The same arguments as `gspo train` (model=qwen3-0.6b task=math eval.benches=[aime24]), or a compare preset and
its overrides (preset=qwen3-0.6b); a swept key (algo=grpo,gspo) composes each of its values. The assets and their
loading live in trainer/assets.py; this is the command and the offline check of `gspo compare`.
"""

from __future__ import annotations

from collections.abc import Callable
from shlex import quote

from gspo.conf.verdict import split_verdict
from gspo.study.plan import Plan, arm_config, make_plan


def fetch_plan(preset: str | None, params: dict[str, str], overrides: list[str]) -> Plan:
    """The plan of `gspo compare preset=<preset> <overrides>` (`params`: the preset's hydra.sweeper.params; `preset`
    None: of `gspo train <overrides>`, or its sweep), Hydra's own settings and verdict.* left out."""
    _, rest = split_verdict(overrides)
    rest = [o for o in rest if not o.startswith(("hydra.", "hydra/", "-m", "--multirun"))]
    return make_plan([*([f"+sweep={preset}"] if preset else []), *rest], preset=preset, params=params)


def job_configs(plan: Plan) -> list:
    """The composed config of each arm of the plan (a search sweeper: its first point), seeds left out: no asset
    depends on the seed."""
    return [arm_config(plan, arm) for arm in (plan.arms if plan.jobs is not None else ("",))]


def assets_of(plan: Plan) -> list:
    """The hub assets of every job, each once, in the order the first job loads them."""
    from gspo.trainer.assets import hub_assets

    return list(dict.fromkeys(a for cfg in job_configs(plan) for a in hub_assets(cfg)))


def again(preset: str | None, overrides: list[str]) -> str:
    """The `gspo fetch` command for the same preset and overrides (Hydra's own and verdict.* left out)."""
    _, rest = split_verdict(overrides)
    kept = [o for o in rest if not o.startswith(("hydra.", "hydra/", "-m", "--multirun"))]
    return " ".join(["gspo fetch", *([f"preset={preset}"] if preset else []), *(quote(o) for o in kept)])


def check_offline_plan(plan: Plan, overrides: list[str]) -> None:
    """`gspo compare`, offline: one line naming every asset its plan's jobs lack, before a job starts."""
    from gspo.trainer.assets import check_offline, offline

    if offline():
        check_offline(assets_of(plan), again(plan.preset, overrides))


def run_fetch(preset: str | None, params: dict[str, str], overrides: list[str], say: Callable[[str], None],
              log: Callable[[str], None]) -> None:
    """`gspo fetch`: each asset loaded as the run loads it (`log`: progress), then one line of what is cached."""
    from gspo.trainer.assets import fetch

    assets = assets_of(fetch_plan(preset, params, overrides))
    if not assets:
        say("nothing to fetch: this config reads no Hugging Face hub asset (the embedded model and task)")
        return
    fetch(assets, log=log)
    say(f"fetched {len(assets)}: {', '.join(a.words() for a in assets)}; runs of this config now work offline "
        "(HF_HUB_OFFLINE=1)")
