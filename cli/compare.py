"""`gspo compare [preset=NAME] [OVERRIDES]`: a preset sweep, then the report.

A preset is a file of conf/sweep/: `compare` (the default: GRPO and GSPO over three seeds, shortened to 20
steps), `lr` (GRPO and GSPO at five learning rates: where each collapses), `family` (GRPO, DAPO, Dr. GRPO,
GSPO, GMPO, CISPO, SAPO over three seeds), `family2026` (GRPO against DPPO-TV, DPPO-KL, OPSM, MaxRL, GDPO)
and one per claim of the GSPO paper (`moe`, `mismatch`, `stability`).
Arms provably equal under the config are not run twice (cli/sweep.py `fold_equal_arms`). Its arms,
seeds and run length are the file's; overrides on the command line win over it (`algo=grpo,gspo seed=0,1
train.steps=50`). The report goes to <sweep>/report. On CPU cores with the embedded model the jobs run side by
side, one torch thread each (cli/sweep.py `jobs_at_once`); `hydra/launcher=basic` runs them one at a time.

`verdict.*` settings (conf/schema.py VerdictConfig) shape the verdict, not the runs: `verdict.effect` is the
smallest effect of interest; `verdict.until=resolved` adds seeds to every arm in rounds (`verdict.round_seeds`,
up to `verdict.max_seeds`, or until `verdict.max_minutes`) and looks after each round with a group-sequential
design (report/sequential.py), stopping once each comparison of the primary metric (`verdict.metric`) is
resolved or shown equivalent within +-effect. Each round is a sweep of its own in <dir>/round-<i>; the same
command with hydra.sweep.dir=<dir> resumes it (finished runs are skipped, the looks recomputed).
"""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path
from shlex import quote

import typer
from omegaconf import OmegaConf

from gspo.cli.errors import user_errors
from gspo.conf.choice_check import check_choice
from gspo.conf.errors import GspoError
from gspo.conf.overrides import planned_jobs
from gspo.conf.schema import VerdictConfig
from gspo.conf.verdict import split_verdict
from gspo.vocab.choices import Until

DEFAULT_PRESET = "compare"


def presets() -> dict[str, str]:
    """Preset name -> the text of its conf/sweep/<name>.yaml."""
    root = resources.files("gspo.conf").joinpath("sweep")
    return {p.name.removesuffix(".yaml"): p.read_text() for p in root.iterdir() if p.name.endswith(".yaml")}


def pick_preset(overrides: list[str]) -> tuple[str, list[str]]:
    """(preset name, the other overrides); GspoError naming the presets for an unknown one."""
    named = [o.split("=", 1)[1] for o in overrides if o.startswith("preset=")]
    rest = [o for o in overrides if not o.startswith("preset=")]
    if len(named) > 1:
        raise GspoError(f"preset= given {len(named)} times ({', '.join(named)}): name one")
    name = named[0] if named else DEFAULT_PRESET
    check_choice("preset", name, sorted(presets()))
    return name, rest


def swept_by(text: str) -> tuple[str, ...]:
    """The keys a preset sweeps (its hydra.sweeper.params), for run names and tags."""
    return tuple(sweep_params(text))


def sweep_params(text: str) -> dict[str, str]:
    """A preset's hydra.sweeper.params: key -> its sweep (`grpo,gspo`), as Hydra's sweeper reads them."""
    params = OmegaConf.create(text).get("hydra", {}).get("sweeper", {}).get("params", {})
    return {str(k): str(v) for k, v in params.items()}


@user_errors
def compare_cmd(
    overrides: list[str] = typer.Argument(None, help="preset=compare|lr|family|family2026|moe|mismatch|stability|"
                                          "qwen3-0.6b|qwen3-1.7b|qwen3-0.6b-family, then Hydra overrides on top of "
                                          "it, e.g. model=qwen3-0.6b task=math seed=0,1,2,3; "
                                          "verdict.until=resolved verdict.max_seeds=12 adds seeds until it knows"),
) -> None:
    """Run a comparison preset (default: GRPO and GSPO, 3 seeds, 20 steps on the embedded default;
    preset=lr: both at five learning rates, where each collapses; preset=family: GRPO, DAPO, Dr. GRPO, GSPO,
    GMPO, CISPO, SAPO; preset=family2026: GRPO, DPPO-TV, DPPO-KL, OPSM, MaxRL, GDPO; preset=moe|mismatch|stability
    put the GSPO paper's three claims to the test), then write the report and print its verdict.
    verdict.until=resolved: seeds added in rounds until each verdict is resolved or shown equivalent
    (group-sequential), or verdict.max_seeds / verdict.max_minutes is spent."""
    name, rest = pick_preset(list(overrides or []))
    verdict, rest = split_verdict(rest)
    from gspo.cli.fetch import check_offline_preset

    check_offline_preset(name, sweep_params(presets()[name]), rest)  # offline: every hub asset its jobs lack, in one line, before a job starts
    # the sweep, the trainer and the report load torch and pandas: imported once the preset and verdict are checked
    from gspo.cli.report import print_report
    from gspo.cli.sweep import run_sweep
    from gspo.report import write_report

    command = f"gspo compare {' '.join(overrides or [])}".strip()
    if verdict.until == Until.RESOLVED:
        compare_until(name, rest, verdict, command)
        return
    sweep_dir = run_sweep([f"+sweep={name}", *rest], preset_keys=swept_by(presets()[name]),
                          preset_params=sweep_params(presets()[name]), report_hint=False, at_once=True,
                          again=" ".join(["gspo compare", *(quote(o) for o in overrides or []
                                                            if not o.startswith("hydra.sweep.dir="))]))
    print_report(write_report([sweep_dir], sweep_dir / "report", command=command, progress=sys.stderr.isatty(),
                              effect=verdict.effect, primary=verdict.metric))


def plan_rounds(name: str, rest: list[str], verdict: VerdictConfig) -> list[list[int]]:
    """The seeds of each round: the preset's (or the command line's) first, then `round_seeds` new ones a round
    up to `max_seeds` per arm. Refuses a single arm, a seed budget below the first round, non-integer seeds."""
    jobs = planned_jobs(rest, sweep_params(presets()[name]))
    if jobs is None:
        raise GspoError("verdict.until=resolved needs Hydra's basic sweeper (a fixed list of jobs), not a search sweeper")
    arms = {" ".join(t for t in job.split() if not t.startswith("seed=")) for job in jobs}
    if len(arms) < 2:
        raise GspoError("verdict.until=resolved compares arms, but this sweep has one arm: sweep algo= (or another "
                        "key) over at least two values")
    try:
        first = sorted({int(t.split("=", 1)[1]) for job in jobs for t in job.split() if t.startswith("seed=")})
    except ValueError:
        raise GspoError("verdict.until=resolved needs integer seeds (seed=0,1,2)") from None
    first = first or [0]
    if verdict.max_seeds < len(first):
        raise GspoError(f"verdict.max_seeds={verdict.max_seeds} is below the {len(first)} seeds per arm of the first "
                        f"round ({','.join(map(str, first))}): raise it, or give fewer seeds")
    rounds, nxt = [first], max(first) + 1
    while sum(map(len, rounds)) < verdict.max_seeds:
        size = min(verdict.round_seeds, verdict.max_seeds - sum(map(len, rounds)))
        rounds.append(list(range(nxt, nxt + size)))
        nxt += size
    return rounds


def compare_until(name: str, rest: list[str], verdict: VerdictConfig, command: str) -> None:
    """Rounds of seeds, a group-sequential look after each, then one report over every round."""
    rounds = plan_rounds(name, rest, verdict)
    from gspo.cli import until
    from gspo.cli.report import print_report  # torch and pandas: once the rounds are planned
    from gspo.cli.sweep import new_stamp, run_sweep, sweep_folder
    from gspo.report import write_report
    from gspo.report.rounds import STOP_SEEDS, STOP_SETTLED, STOP_TIME, look, round_lines

    given = [o.split("=", 1)[1] for o in rest if o.startswith("hydra.sweep.dir=")]
    outer = Path(sweep_folder(given[-1]) if given else f"results/sweeps/{new_stamp()}")  # resolved once: ${now:...}
    base = [o for o in rest if not o.startswith(("hydra.sweep.dir=", "seed="))]
    design = until.design_of(name, sweep_params(presets()[name]), base, verdict, rounds)
    until.check_design(outer, design)  # the design its first look was planned with, or none yet
    again = " ".join(["gspo compare", *(quote(o) for o in command.split()[2:] if not o.startswith("hydra.sweep.dir="))])
    typer.echo(f"seeds until resolved: up to {len(rounds)} rounds in {outer}; if interrupted, the same command with "
               f"hydra.sweep.dir={outer} resumes it", err=True)
    start, looks, dirs, seen, stop = time.time(), [], [], [], STOP_SEEDS
    for i, seeds in enumerate(rounds, 1):
        dirs.append(run_sweep([f"+sweep={name}", *base, f"seed={','.join(map(str, seeds))}",
                               f"hydra.sweep.dir={outer / f'round-{i}'}"], preset_keys=swept_by(presets()[name]),
                              preset_params=sweep_params(presets()[name]), report_hint=False, at_once=True,
                              again=again, again_dir=outer))
        until.check_round_records(dirs[-1])
        seen.append(sum(map(len, rounds[:i])))
        late = verdict.max_minutes is not None and time.time() - start >= 60 * verdict.max_minutes
        last = i == len(rounds) or late
        looks.append(look(dirs, verdict.metric, verdict.effect, seen, verdict.max_seeds, verdict.spending, last))
        until.add_look(outer, design, {"round": i, "seeds": seen[-1], "level": looks[-1].level,
                                       "settled": looks[-1].settled})
        typer.echo(f"round {i}: {seen[-1]} seeds per arm, level {looks[-1].level:.2g}: "
                   + ("settled" if looks[-1].settled else "not settled"), err=True)
        if looks[-1].settled:
            stop = STOP_SETTLED
            break
        if late:
            stop = STOP_TIME
            break
    lines = round_lines(looks, stop, verdict.max_seeds, verdict.spending, verdict.effect)
    metric = looks[-1].diffs[0].head.metric if looks[-1].diffs else None
    sequential = {metric: looks[-1].level} if metric else None
    until.finish(outer, {"rounds": rounds[:len(looks)], "seeds": seen, "levels": [lk.level for lk in looks], "stop": stop,
                         "verdict": {k: getattr(verdict, k) for k in VerdictConfig.__dataclass_fields__},
                         "page": {"lines": lines, "sequential": sequential}})
    print_report(write_report(dirs, outer / "report", command=command, progress=sys.stderr.isatty(),
                              effect=verdict.effect, primary=verdict.metric, rounds=lines, sequential=sequential))
