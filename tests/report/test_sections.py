"""The page below its first screen is a registry of sections (report/sections.py): the built-in ones in their
order, and a new section is one function and one `register_section` line (a throwaway one here, registered in this
file alone, appears on the page, in report.md and report.html, where it was placed)."""

from __future__ import annotations

import pandas as pd
import pytest
from report_runs import fake_compare

from gspo.report import sections, write_report
from gspo.report.page import Block


def test_the_built_in_sections_in_order():
    assert [name for name, _ in sections.SECTIONS] == ["setup", "cards", "noise", "staleness", "results", "runs", "plots"]


def test_a_new_section_is_one_function_and_one_registration(tmp_path, monkeypatch):
    monkeypatch.setattr(sections, "SECTIONS", list(sections.SECTIONS))  # the test's registration is undone after it

    def steps_per_arm(page: sections.Page) -> list[Block]:
        table = pd.DataFrame([{"arm": a.label, "steps": sum(r.last_step for r in a.runs)} for a in page.arms])
        return [Block("h2", "Steps per arm"), Block("table", table=table, id="steps-per-arm")]

    sections.register_section("steps_per_arm", steps_per_arm, before="runs")
    report = write_report(fake_compare(tmp_path / "runs"), tmp_path / "out", wandb="disabled")
    md = (report.out_dir / "report.md").read_text()
    html = (report.out_dir / "report.html").read_text()
    assert md.index("## Results") < md.index("## Steps per arm") < md.index("## Runs")
    assert "| GRPO | 36 |" in md and "| GSPO | 36 |" in md  # 3 seeds of 12 steps each
    assert 'id="steps-per-arm"' in html
    with pytest.raises(ValueError, match="registered already"):
        sections.register_section("steps_per_arm", steps_per_arm)
