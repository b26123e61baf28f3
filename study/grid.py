"""`gspo compare [preset=NAME] ... --cfg job|all`: the grid a compare would run, printed instead of run. `job`: every
planned job with the resolved keys in which the jobs differ; `all`: the same, then the first job's resolved config
whole (what `gspo train --cfg job +sweep=NAME <its overrides>` prints). Composes configs only: no torch."""

from __future__ import annotations

from omegaconf import OmegaConf

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.conf.resume import flat_config
from gspo.study.plan import job_overrides, make_plan
from gspo.study.presets import sweep_params

MODES = ("job", "all")


def cfg_mode(overrides: list[str]) -> tuple[str | None, list[str]]:
    """(the mode `--cfg` names, or None without one; the overrides without it); another mode is one line."""
    if "--cfg" not in overrides:
        return None, overrides
    at = overrides.index("--cfg")
    mode = overrides[at + 1] if at + 1 < len(overrides) else ""
    if mode not in MODES:
        raise GspoError(f"--cfg {mode or '(nothing)'}: gspo compare prints its grid with --cfg job (every job's "
                        "resolved differences) or --cfg all (and the first job whole)")
    return mode, overrides[:at] + overrides[at + 2:]


def grid_text(name: str, rest: list[str], mode: str) -> str:
    """The grid of preset `name` under the overrides `rest`, as `mode` says (MODES)."""
    plan = make_plan([f"+sweep={name}", *rest], preset=name, params=sweep_params(name))
    jobs = list(plan.jobs or [""])
    configs = [compose_config(job_overrides(plan, job)) for job in jobs]
    flat = [flat_config(c) for c in configs]
    keys = [k for k in flat[0] if any(f.get(k) != flat[0][k] for f in flat[1:])]
    lines = [f"# gspo compare preset={name}: {len(jobs)} job(s); each job's swept values, then the resolved keys the "
             "jobs differ in"]
    for i, (job, f) in enumerate(zip(jobs, flat, strict=True)):
        lines.append(f"job {i + 1}/{len(jobs)}: {job or '(no swept key)'}")
        lines += [f"    {k}: {f.get(k)}" for k in keys]
    if mode == "all":
        lines += [f"# job 1 whole: gspo train --cfg job {' '.join(job_overrides(plan, jobs[0]))}",
                  OmegaConf.to_yaml(configs[0]).rstrip()]
    return "\n".join(lines) + "\n"
