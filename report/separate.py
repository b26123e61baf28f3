"""`gspo report --separate`: runs that are not one experiment (they differ in a task setting, the model or
its cold start, the schedule or length; report/comparable.py) reported as separate groups, one report each
in <out>/group-<i>, instead of refused."""

from __future__ import annotations

from pathlib import Path

from gspo.report.comparable import split_groups
from gspo.report.runs import load_runs
from gspo.report.write import Report, write_report


def write_groups(paths: list, out_dir: Path, **kwargs) -> list[tuple[str, Report]]:
    """[(the group's name, its report)]: one report per group of runs that agree on everything that defines
    the experiment; a single group is written into `out_dir` itself. `kwargs` go to write_report."""
    runs, notes = load_runs(paths)
    groups = split_groups(runs)
    if len(groups) == 1:
        return [(groups[0][0], write_report(paths, out_dir, **kwargs))]
    out = []
    kwargs["registered"] = kwargs.get("registered", ())[:1]  # a plan's comparisons span the groups: its primary only
    for i, (name, group) in enumerate(groups, 1):
        report = write_report([r.path for r in group], out_dir / f"group-{i}", **kwargs)
        report.notes[:0] = [f"group {i} of {len(groups)}: {name}"] + (notes if i == 1 else [])
        out.append((name, report))
    return out
