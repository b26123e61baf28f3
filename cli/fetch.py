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

from gspo.conf.compose import compose_config
from gspo.conf.overrides import first_job, planned_jobs, swept_keys
from gspo.conf.verdict import split_verdict


def job_configs(preset: str | None, params: dict[str, str], overrides: list[str]) -> list:
    """The composed config of each distinct job of `gspo compare preset=<preset> <overrides>` (`params`: the
    preset's hydra.sweeper.params; `preset` None: of `gspo train <overrides>`, or its sweep), seeds left out: no
    asset depends on the seed."""
    _, rest = split_verdict(overrides)
    rest = [o for o in rest if not o.startswith(("hydra.", "hydra/", "-m", "--multirun"))]
    swept = set(swept_keys([f"{k}={v}" for k, v in params.items()] + rest))
    fixed = [o for o in rest if o.split("=", 1)[0].lstrip("+~") not in swept]
    jobs = planned_jobs(rest, params)
    jobs = jobs if jobs is not None else [" ".join(first_job(rest))]  # a search sweeper: its first point
    head = [f"+sweep={preset}"] if preset else []
    distinct = dict.fromkeys(" ".join(t for t in job.split() if not t.startswith("seed=")) for job in jobs)
    return [compose_config([*head, *fixed, *job.split()]) for job in distinct]


def assets_of(preset: str | None, params: dict[str, str], overrides: list[str]) -> list:
    """The hub assets of every job, each once, in the order the first job loads them."""
    from gspo.trainer.assets import hub_assets

    return list(dict.fromkeys(a for cfg in job_configs(preset, params, overrides) for a in hub_assets(cfg)))


def again(preset: str | None, overrides: list[str]) -> str:
    """The `gspo fetch` command for the same preset and overrides (Hydra's own and verdict.* left out)."""
    _, rest = split_verdict(overrides)
    kept = [o for o in rest if not o.startswith(("hydra.", "hydra/", "-m", "--multirun"))]
    return " ".join(["gspo fetch", *([f"preset={preset}"] if preset else []), *(quote(o) for o in kept)])


def check_offline_preset(preset: str, params: dict[str, str], overrides: list[str]) -> None:
    """`gspo compare`, offline: one line naming every asset its jobs lack, before a job starts."""
    from gspo.trainer.assets import check_offline, offline

    if offline():
        check_offline(assets_of(preset, params, overrides), again(preset, overrides))


def run_fetch(preset: str | None, params: dict[str, str], overrides: list[str], say: Callable[[str], None],
              log: Callable[[str], None]) -> None:
    """`gspo fetch`: each asset loaded as the run loads it (`log`: progress), then one line of what is cached."""
    from gspo.trainer.assets import fetch

    assets = assets_of(preset, params, overrides)
    if not assets:
        say("nothing to fetch: this config reads no Hugging Face hub asset (the embedded model and task)")
        return
    fetch(assets, log=log)
    say(f"fetched {len(assets)}: {', '.join(a.words() for a in assets)}; runs of this config now work offline "
        "(HF_HUB_OFFLINE=1)")
