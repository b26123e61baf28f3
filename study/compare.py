"""`gspo compare`: a preset's sweep, then the report; with verdict.until=resolved, rounds of seeds with a
group-sequential look after each (study/rounds.py), recorded in <dir>/sequential.json (study/until.py), then one
report over every round. Returns the Report; the CLI prints it."""

from __future__ import annotations

import sys
from pathlib import Path
from shlex import quote

from gspo.conf.errors import GspoError
from gspo.conf.schema import VerdictConfig
from gspo.report import Report, write_report
from gspo.report.tables import AUC, auc_headline
from gspo.study import until
from gspo.study.job import say
from gspo.study.launch import check_launcher
from gspo.study.plan import Plan, arm_config, mark_ended, register
from gspo.study.rounds import Look, look, plan_rounds, primary, round_lines, run_rounds
from gspo.study.sweep import SweepCall, new_stamp, run_sweep, sweep_folder
from gspo.trainer.run.sweepdir import is_sweep, read_plan, sweep_notes, write_plan
from gspo.vocab.choices import Until


def compare(plan: Plan, overrides: list[str]) -> Report:
    """A preset's plan (`overrides`: the whole command line, for the page and the resume line), registered in its
    folder, then its report in <folder>/report."""
    command, verdict = f"gspo compare {' '.join(overrides)}".strip(), plan.verdict
    check_launcher(list(plan.overrides), at_once=True)  # before the plan is registered
    if verdict.primary is not None:  # one that is no score of the task: one line, before any run
        _check_primary(arm_config(plan).task.name, verdict)
    for note in plan.notes:
        say(f"note: {note}")
    outer = Path(sweep_folder(plan.folder) if plan.folder else f"results/sweeps/{new_stamp()}")  # resolved once
    # the report written here, the launcher policy free to run jobs side by side, the command that resumes it (its
    # folder added where it is printed)
    again = " ".join(["gspo compare", *(quote(o) for o in overrides if not o.startswith("hydra.sweep.dir="))])
    call = SweepCall(report_hint=False, at_once=True, again=again, again_dir=outer)
    if verdict.until == Until.RESOLVED:
        return compare_until(plan, outer, command, call)
    if _older_compare(outer):  # an older gspo's compare: its sweep.json alone checks a rerun
        dirs, lines = [run_sweep(plan.with_keys(hydra__sweep__dir=str(outer)), call)], []
    else:
        dirs, lines = fixed_rounds(plan, outer, call)
    return _page(plan, outer, dirs, command, lines)


def _check_primary(task: str, verdict: VerdictConfig) -> None:
    """verdict.primary names a score of the task's page, or the area under a held-out curve (auc:<metric>, read by
    the page; the rounds answer a final score only): one line before any run otherwise."""
    if auc_headline(verdict.primary) is None:
        primary(task, verdict.primary)
    elif verdict.until == Until.RESOLVED:
        raise GspoError(f"verdict.primary={verdict.primary}: the rounds of verdict.until=resolved answer a final score; "
                        "an area under the curve is read by a compare without rounds (or gspo report --primary)")
    else:
        primary(task, verdict.primary.removeprefix(AUC))


def fixed_rounds(plan: Plan, outer: Path, call: SweepCall) -> tuple[list[Path], list[str]]:
    """The registered plan's sweeps (its folders) and what the page says of its rounds: one sweep in `outer`, or,
    once seeds were added to the finished plan, each later round in <outer>/round-<i> (earlier ones never rerun)."""
    registered, new = register(outer, plan, legacy=until.legacy_plan(outer))
    rounds = registered["rounds"]
    if new:
        unfinished = [n for i in range(len(rounds)) for n in sweep_notes(_round_dir(outer, i))]
        if unfinished:
            raise GspoError(f"{outer}: new seeds {','.join(new)} join a finished plan as its next round, and this one "
                            f"has not finished ({unfinished[0]}): rerun it as registered first "
                            f"(seed={','.join(registered['seeds'])})")
        rounds = [*rounds, new]
        write_plan(outer, registered | {"seeds": [*registered["seeds"], *new], "rounds": rounds})
    dirs = [_round_dir(outer, i) for i in range(len(rounds))]
    if len(rounds) == 1:
        run_sweep(plan.with_keys(hydra__sweep__dir=str(outer)), call)
        return dirs, []
    for folder, seeds in zip(dirs[1:], rounds[1:], strict=True):
        run_sweep(plan.with_keys(seed=",".join(seeds), hydra__sweep__dir=str(folder)), call)
    added = ", ".join(",".join(r) for r in rounds[1:])
    return dirs, [f"Seeds {added} were added to the registered plan as its next round(s) after seeds "
                  f"{','.join(rounds[0])} had been seen; the intervals are fixed-sample ones, so a claim that appears "
                  "only after seeds were added on seeing the first ones is weaker than its level says."]


def _page(plan: Plan, outer: Path, dirs: list[Path], command: str, lines: list[str],
          sequential: dict[str, float] | None = None) -> Report:
    """The report of the plan's runs in <outer>/report, with its registered (primary, *comparisons): fewer on the
    page are said (report/write.py)."""
    registered = plan.verdict.primary, *((read_plan(outer) or {}).get("comparisons") or [])
    return write_report(dirs, outer / "report", command=command, progress=sys.stderr.isatty(), say=say,
                        effect=plan.verdict.effect, primary=plan.verdict.primary, rounds=lines, sequential=sequential,
                        registered=registered)


def _older_compare(outer: Path) -> bool:
    return read_plan(outer) is None and until.legacy_plan(outer) is None and is_sweep(outer)


def _round_dir(outer: Path, i: int) -> Path:
    return outer if i == 0 else outer / f"round-{i + 1}"


def compare_until(plan: Plan, outer: Path, command: str, call: SweepCall) -> Report:
    """Rounds of seeds, a group-sequential look after each, then one report over every round."""
    verdict = plan.verdict
    rounds = plan_rounds(plan, verdict)
    if _older_compare(outer):
        raise GspoError(f"{outer} holds a plain compare (its runs, no until record): an until=resolved experiment there "
                        "would hide it from its report; start it in another hydra.sweep.dir=")
    registered, _ = register(outer, plan, rounds, legacy=until.legacy_plan(outer))
    ended = registered.get("ended") if (registered.get("ended") or {}).get("stop") != "settled" else None
    rounds = rounds[:ended["looks"]] if ended else rounds  # a budget spent: its page again, no new round
    say(f"seeds until resolved: up to {len(rounds)} rounds in {outer}; if interrupted, the same command with "
        f"hydra.sweep.dir={outer} resumes it")

    def run_round(i: int, seeds: list[int]) -> Path:
        folder = run_sweep(plan.with_keys(seed=",".join(map(str, seeds)), hydra__sweep__dir=str(outer / f"round-{i}")),
                           call)
        until.check_round_records(folder)
        return folder

    def look_at(dirs: list[Path], seen: list[int], final: bool) -> Look:
        lk = look(dirs, verdict.primary, verdict.effect, seen, verdict.max_seeds, verdict.spending, final)
        until.add_look(outer, {"round": len(dirs), "seeds": seen[-1], "level": lk.level, "settled": lk.settled})
        return lk

    done = run_rounds(rounds, verdict, run_round, look_at, said=say)
    stop = ended["stop"] if ended else done.stop
    mark_ended(outer, len(done.looks), stop)
    lines = round_lines(done.looks, stop, verdict.max_seeds, verdict.spending, verdict.effect)
    metric = done.looks[-1].diffs[0].head.metric if done.looks[-1].diffs else None
    sequential = {metric: done.looks[-1].level} if metric else None
    until.finish(outer, {"rounds": rounds[:len(done.looks)], "seeds": done.seeds,
                         "levels": [lk.level for lk in done.looks], "stop": stop,
                         "page": {"lines": lines, "sequential": sequential}})
    return _page(plan, outer, done.dirs, command, lines, sequential)
