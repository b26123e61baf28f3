"""A page's per-problem outcomes (outcomes.csv.gz) and the script that recomputes its noise tables from them alone
(issue 57 item 6: the noise tables and the new-problems interval could not be recomputed from the repo)."""

from __future__ import annotations

import gzip
import subprocess
import sys

import pandas as pd

from gspo.report import write_report
from gspo.report.page import md_table
from gspo.report.recompute import load, main, tables


def test_recompute_from_the_outcomes_alone_gives_the_pages_noise_tables(sweep_dir, tmp_path):
    """A tiny real sweep (GRPO, GSPO x seeds 0, 1; k = 16 final evals of 8 problems): the page writes every run's
    per-problem outcomes, and the recomputed tables, from outcomes.csv.gz alone (the runs deleted from view: a copy
    of the file elsewhere), appear in report.md digit for digit."""
    out = tmp_path / "page"
    report = write_report([sweep_dir], out, wandb="disabled")
    assert out / "outcomes.csv.gz" in report.files
    copy = tmp_path / "elsewhere.csv.gz"
    copy.write_bytes((out / "outcomes.csv.gz").read_bytes())
    frame = load(copy)
    assert set(frame.columns) >= {"run", "arm", "seed", "step", "benchmark", "problem", "correct", "k", "samples"}
    assert frame.loc[frame["final"] == 1, "run"].nunique() == 4 and (frame["baseline"] == "GRPO").any()
    md = (out / "report.md").read_text()
    split, paired, crossed = tables(frame)
    assert len(split) == 2 and len(paired) == 1 and len(crossed) == 1
    for table in (split, paired, crossed):
        assert md_table(table) in md
    assert main([str(out)]) == 0 and main([str(tmp_path / "none")]) == 2
    with gzip.open(copy, "rt") as f:
        assert pd.read_csv(f).shape == frame.shape
    cli = subprocess.run([sys.executable, "-m", "gspo.report.recompute", str(out)], capture_output=True, text=True,
                         check=False)
    assert cli.returncode == 0 and md_table(crossed) in cli.stdout, cli.stderr
