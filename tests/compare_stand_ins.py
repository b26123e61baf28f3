"""`gspo compare` with its sweeps, looks and report stood in for (no training): what the plan, its registration
and the until record do around the runs (tests/study/test_until_record.py, test_plan.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from gspo.conf.verdict import split_verdict
from gspo.study import compare
from gspo.study.plan import make_plan
from gspo.study.presets import sweep_params

UNTIL = ["verdict.until=resolved", "verdict.max_seeds=4", "verdict.round_seeds=2"]


@pytest.fixture(name="stand_ins")
def stand_ins_fixture(monkeypatch, tmp_path):
    """compare with its sweeps, looks and report stood in for; returns what they were asked."""
    import gspo.study.compare

    asked = SimpleNamespace(sweeps=[], report=None, plans=[])

    def run_sweep(plan, call):
        folder = Path(plan.folder)
        (folder / "runs").mkdir(parents=True, exist_ok=True)
        asked.sweeps.append((folder, call))
        asked.plans.append(plan)
        return folder

    def look(dirs, metric, effect, seen, max_seeds, spending, last):
        return SimpleNamespace(seeds=seen[-1], level=0.01 * len(dirs), settled=False, diffs=[])

    monkeypatch.setattr(gspo.study.compare, "run_sweep", run_sweep)
    monkeypatch.setattr(gspo.study.compare, "look", look)
    monkeypatch.setattr(gspo.study.compare, "round_lines", lambda looks, stop, *a: [f"{len(looks)} rounds, {stop}"])
    monkeypatch.setattr(gspo.study.compare, "write_report", lambda dirs, out, **kw: setattr(asked, "report", (dirs, kw)))
    monkeypatch.chdir(tmp_path)
    return asked


def compare_with(*overrides: str, until: bool = True) -> None:
    """`gspo compare [UNTIL] seed=0,1 <overrides>` on the compare preset."""
    args = [*(UNTIL if until else []), "seed=0,1", *overrides]
    verdict, rest = split_verdict(args)
    compare.compare(make_plan(["+sweep=compare", *rest], preset="compare", params=sweep_params("compare"),
                              verdict=verdict), args)
