"""Recompute a page's noise tables and its intervals over new problems from its outcomes.csv.gz alone.

    python -m gspo.report.recompute results/compare-default          # the page folder (or the .csv.gz itself)

Prints, as the page's section "Held-out accuracy: noise and cost" gives them, the split of each arm's final
held-out accuracy (eval sampling vs training seed), the split of each paired difference with its paired t 95%
half-width, and each paired difference's paired t interval beside its interval over new problems; the numbers are
report/noise.py's own functions on the outcomes the page wrote (report/outcomes.py), so they match the page's
tables digit for digit. Intervals at the page's family level also need its collapse counts (summary.csv).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from gspo.report.heldout import Outcomes
from gspo.report.noise import crossed_row, paired_row, split_row
from gspo.report.outcomes import OUTCOMES, as_array
from gspo.report.page import md_table
from gspo.report.stats import Interval, clip_to, paired_ci


def load(path: Path) -> pd.DataFrame:
    """The outcomes of a page folder or of an outcomes.csv.gz; one line (ValueError) where there are none."""
    path = Path(path)
    path = path / OUTCOMES if path.is_dir() else path
    if not path.is_file():
        raise ValueError(f"{path}: no outcomes file (gspo report writes {OUTCOMES} beside report.md)")
    return pd.read_csv(path, keep_default_na=False, dtype={"samples": str, "problems": str})


def finals(frame: pd.DataFrame) -> dict[str, Outcomes]:
    """Each run's final sampled held-out outcomes (the rows behind the page's final accuracy)."""
    out = {}
    for run, rows in frame[(frame["final"] == 1) & (frame["greedy"] == 0)].groupby("run", sort=False):
        rows = rows.sort_values("problem")
        out[run] = Outcomes(int(rows["step"].iloc[0]), int(rows["k"].iloc[0]), rows["correct"].to_numpy(int),
                            str(rows["problems"].iloc[0]), as_array(rows["samples"]))
    return out


def _pairs(frame: pd.DataFrame, outs: dict[str, Outcomes], arm: str, base: str) -> list[tuple[Outcomes, Outcomes]]:
    """(arm, baseline) final outcomes by seed, the baseline's seed order."""
    seeds = {label: dict(frame.loc[frame["arm"] == label, ["seed", "run"]].drop_duplicates().to_numpy())
             for label in (arm, base)}
    return [(outs[seeds[arm][s]], outs[seeds[base][s]]) for s in seeds[base]
            if s in seeds[arm] and seeds[arm][s] in outs and seeds[base][s] in outs]


def paired_interval(pairs: list[tuple[Outcomes, Outcomes]]) -> Interval:
    """The paired t 95% interval of the final accuracies' difference, cut to [-1, 1] as the page cuts it."""
    return clip_to(paired_ci([a.accuracy for a, _ in pairs], [b.accuracy for _, b in pairs]), (-1.0, 1.0))


def tables(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(the per-arm split, the per-difference split, the new-problems table), as the page's noise section."""
    outs = finals(frame)
    arms = list(dict.fromkeys(frame["arm"]))
    split = []
    for arm in arms:
        runs = list(dict.fromkeys(frame.loc[frame["arm"] == arm, "run"]))
        if all(r in outs for r in runs) and (row := split_row(arm, [outs[r] for r in runs])):
            split.append(row)
    paired, crossed = [], []
    compared = frame.loc[(frame["baseline"] != "") & (frame["paired"] == 1), ["arm", "baseline"]].drop_duplicates()
    for arm, base in compared.to_numpy():
        pairs = _pairs(frame, outs, arm, base)
        ci = paired_interval(pairs)
        paired += [r] if (r := paired_row(f"{arm} - {base}", pairs, ci)) else []
        crossed += [r] if (r := crossed_row(f"{arm} - {base}", pairs, ci)) else []
    return pd.DataFrame(split), pd.DataFrame(paired), pd.DataFrame(crossed)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m gspo.report.recompute <page folder or outcomes.csv.gz>", file=sys.stderr)
        return 2
    try:
        frame = load(Path(argv[0]))
    except (ValueError, OSError, pd.errors.ParserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for title, table in zip(("Per arm", "Per paired difference", "Over new problems"), tables(frame), strict=True):
        print(f"{title}:\n\n{md_table(table) if len(table) else '(none)'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
