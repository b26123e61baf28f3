"""`gspo compare`: a preset's sweep, then the report; with verdict.until=resolved, rounds of seeds with a
group-sequential look after each (study/rounds.py), recorded in <dir>/sequential.json (study/until.py), then one
report over every round. Returns the Report; the CLI prints it."""

from __future__ import annotations

import sys
from pathlib import Path
from shlex import quote

import typer

from gspo.conf.compose import compose_config
from gspo.conf.overrides import first_job
from gspo.conf.schema import VerdictConfig
from gspo.report import Report, write_report
from gspo.study import until
from gspo.study.presets import sweep_params, swept_by
from gspo.study.rounds import Look, look, preset_rounds, primary, round_lines, run_rounds
from gspo.study.sweep import SweepCall, new_stamp, run_sweep, sweep_folder
from gspo.vocab.choices import Until


def again_command(overrides: list[str]) -> str:
    """The `gspo compare` command that resumes this one (its folder is added where it is printed)."""
    return " ".join(["gspo compare", *(quote(o) for o in overrides if not o.startswith("hydra.sweep.dir="))])


def preset_call(name: str, again: str, again_dir: Path | None = None) -> SweepCall:
    """How `gspo compare` asks for preset `name`'s sweep: its swept keys and params, the report written by the
    compare itself, the launcher policy free to run jobs side by side, and the command that resumes it."""
    return SweepCall(preset_keys=swept_by(name), preset_params=sweep_params(name), report_hint=False, at_once=True,
                     again=again, again_dir=again_dir)


def _say(message: str) -> None:
    typer.echo(message, err=True)


def task_of(name: str, rest: list[str]) -> str:
    """The task preset `name`'s first job trains on, under the command line's overrides."""
    return compose_config(first_job([f"+sweep={name}", *rest])).task.name


def compare(name: str, rest: list[str], verdict: VerdictConfig, overrides: list[str]) -> Report:
    """Preset `name` with the command line's other overrides `rest` (`overrides`: the whole command line, for the
    page and the resume line), then its report in <sweep>/report."""
    command = f"gspo compare {' '.join(overrides)}".strip()
    if verdict.primary is not None:  # one that is no score of the task: one line, before any run
        primary(task_of(name, rest), verdict.primary)
    if verdict.until == Until.RESOLVED:
        return compare_until(name, rest, verdict, command, again_command(overrides))
    sweep_dir = run_sweep([f"+sweep={name}", *rest], preset_call(name, again_command(overrides)))
    return write_report([sweep_dir], sweep_dir / "report", command=command, progress=sys.stderr.isatty(), say=_say,
                        effect=verdict.effect, primary=verdict.primary)


def compare_until(name: str, rest: list[str], verdict: VerdictConfig, command: str, again: str) -> Report:
    """Rounds of seeds, a group-sequential look after each, then one report over every round."""
    rounds = preset_rounds(rest, sweep_params(name), verdict)
    given = [o.split("=", 1)[1] for o in rest if o.startswith("hydra.sweep.dir=")]
    outer = Path(sweep_folder(given[-1]) if given else f"results/sweeps/{new_stamp()}")  # resolved once: ${now:...}
    base = [o for o in rest if not o.startswith(("hydra.sweep.dir=", "seed="))]
    design = until.design_of(name, sweep_params(name), base, verdict, rounds)
    until.check_design(outer, design)  # the design its first look was planned with, or none yet
    typer.echo(f"seeds until resolved: up to {len(rounds)} rounds in {outer}; if interrupted, the same command with "
               f"hydra.sweep.dir={outer} resumes it", err=True)
    call = preset_call(name, again, again_dir=outer)

    def run_round(i: int, seeds: list[int]) -> Path:
        folder = run_sweep([f"+sweep={name}", *base, f"seed={','.join(map(str, seeds))}",
                            f"hydra.sweep.dir={outer / f'round-{i}'}"], call)
        until.check_round_records(folder)
        return folder

    def look_at(dirs: list[Path], seen: list[int], final: bool) -> Look:
        lk = look(dirs, verdict.primary, verdict.effect, seen, verdict.max_seeds, verdict.spending, final)
        until.add_look(outer, design, {"round": len(dirs), "seeds": seen[-1], "level": lk.level, "settled": lk.settled})
        return lk

    done = run_rounds(rounds, verdict, run_round, look_at, said=lambda m: typer.echo(m, err=True))
    lines = round_lines(done.looks, done.stop, verdict.max_seeds, verdict.spending, verdict.effect)
    metric = done.looks[-1].diffs[0].head.metric if done.looks[-1].diffs else None
    sequential = {metric: done.looks[-1].level} if metric else None
    until.finish(outer, {"rounds": rounds[:len(done.looks)], "seeds": done.seeds,
                         "levels": [lk.level for lk in done.looks], "stop": done.stop,
                         "verdict": {k: getattr(verdict, k) for k in VerdictConfig.__dataclass_fields__},
                         "page": {"lines": lines, "sequential": sequential}})
    return write_report(done.dirs, outer / "report", command=command, progress=sys.stderr.isatty(), say=_say,
                        effect=verdict.effect, primary=verdict.primary, rounds=lines, sequential=sequential)
