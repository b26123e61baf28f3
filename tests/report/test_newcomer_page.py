"""What a newcomer sees on the page (issue 60): runs made on a busy machine still get their wall-clock plots and
their eval's cost, said under their load; inline Markdown is rendered in report.html; wide tables and estimator
cards fit a 1280 px window (checked in headless Chromium where it is installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_runs import fake_compare

from gspo.report import plots
from gspo.report.arms import group_arms
from gspo.report.load import as_recorded, without_loaded_times
from gspo.report.noise import noise_text
from gspo.report.page import Block, to_html
from gspo.report.plots import _x, time_note
from gspo.report.runs import load_runs

BROWSER = next((b for b in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if b), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def _busy(paths: list[Path], load: float = 12.0) -> list[Path]:
    """The runs as a loaded 2-core machine leaves them: a high load in run.json, a time/eval_s at every eval."""
    for run in paths:
        status = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps(status | {"load_start": 3.0, "load_max": load, "load_end": 5.0}))
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for row in rows:
            if "eval/arith/accuracy" in row:
                row["time/eval_s"] = 55.0 if row["step"] < 12 else 241.0
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def test_a_busy_machine_s_runs_keep_their_wall_clock_plots_and_eval_cost_said_under_their_load(tmp_path, monkeypatch):
    runs = _busy(fake_compare(tmp_path / "runs", seeds=2))
    blanked, said = without_loaded_times(load_runs(runs)[0])
    assert blanked[0].metrics["time/step_s"].isna().all() and said  # left out of the comparison, as before
    x = _x(as_recorded(blanked[0]), "time")
    assert x.iloc[-1] > 5 and x.is_monotonic_increasing  # the recorded seconds, not a line at x = 0
    assert _x(blanked[0], "time").empty  # blanked times give no x at all
    arms = group_arms(blanked)
    every = plots.plot_specs
    monkeypatch.setattr(plots, "plot_specs", lambda task: every(task)[:1])  # reward only: by step, time and tokens
    written = dict((p.name, cap) for cap, p in plots.write_plots(arms, "arith", tmp_path))
    assert written["reward_mean_by_time.png"].endswith("by wall-clock time (s), recorded at a load of up to 12.0 on 2 "
                                                       "CPUs (above 1.5x per CPU: the machine's times, not the algorithm's)")
    assert "load" not in written["reward_mean_by_step.png"] and time_note(arms) is None
    said = noise_text(arms)  # the noise section's words (these runs record no per-problem outcomes)
    assert re.search(r"the final one \(its k in the tables\) 241 s .*recorded at a load of up to 12\.0", said), said
    assert "recorded no time" not in said and "recorded none" not in said


def test_a_plot_s_load_note_fits_inside_its_figure(tmp_path, monkeypatch):
    """The load note under a wall-clock plot's title was one line wider than the 7-inch figure, so the PNG cut it
    ("... not the algor") on the newcomer's page at load 16; it wraps, and every line lies inside the figure."""
    runs = _busy(fake_compare(tmp_path / "runs", seeds=2), load=16.3)
    arms = group_arms(without_loaded_times(load_runs(runs)[0])[0])
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)  # keep the figure draw() would close, to measure it
    assert plots.draw(plots.plot_specs("arith")[0], arms, "time", tmp_path / "by_time.png")
    fig = figures[0]
    title = fig.axes[0].title
    box = title.get_window_extent(fig.canvas.get_renderer())
    assert "recorded at a load of up to 16.3" in title.get_text().replace("\n", " ")
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1, (box, fig.bbox)


def test_runs_that_recorded_no_time_get_one_sentence_in_place_of_the_wall_clock_plots(tmp_path):
    runs = fake_compare(tmp_path / "runs", seeds=1)
    for run in runs:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        (run / "metrics.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "time/step_s"})
                                                   + "\n" for r in rows))
    arms = group_arms(load_runs(runs)[0])
    assert not plots.draw(plots.plot_specs("arith")[0], arms, "time", tmp_path / "t.png")
    assert time_note(arms) == "No plot by wall-clock time: no run recorded a time per step (time/step_s)."


def test_the_page_renders_inline_markdown_and_escapes_the_rest():
    page = to_html([Block("p", "**GRPO** (card 1 of 2)"), Block("list", items=("the card `gspo explain` prints",)),
                    Block("p", "results/sweeps/<stamp>/report")], "t")
    assert "<strong>GRPO</strong>" in page and "<code>gspo explain</code>" in page
    assert "**" not in page and "`" not in page and "&lt;stamp&gt;" in page


@pytest.mark.skipif(BROWSER is None, reason="no chromium installed (apt-get install chromium)")
def test_wide_tables_and_cards_fit_a_1280_px_window(tmp_path):
    """Every table and card ends inside the page's column at 1280 px: nothing needs a sideways scroll to be seen."""
    wide = {f"a long column name number {i} (mean, 95% CI)": [0.123456, 12345.678] for i in range(14)}
    import pandas as pd
    card = "estimator  " + " ".join(["a card line that runs on"] * 40)
    page = tmp_path / "p.html"
    page.write_text(to_html([Block("table", table=pd.DataFrame(wide), id="wide"), Block("pre", card, id="card")], "t")
                    .replace("</script>", "</script><script>window.addEventListener('load',function(){"
                             "['wide','card'].forEach(function(i){var e=document.getElementById(i);"
                             "document.documentElement.setAttribute('data-scroll-'+i,e.scrollWidth-e.clientWidth)})})"
                             "</script>", 1))
    dom = subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    assert 'data-scroll-wide="0"' in dom and 'data-scroll-card="0"' in dom, re.findall(r'data-scroll-\w+="\d+"', dom)
