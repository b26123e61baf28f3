"""Damaged records fed to the report and to resume (issue 37): each gives one error line or a correct page.

The session's sweep (tests/conftest.py `sweep_dir`: four finished TINY runs) is copied whole (its job records
name their runs relative to the sweep folder, so the copy reads its own runs) and one record of the copy is
damaged per case: truncated, of the wrong type, in the wrong encoding, or with non-finite numbers. The report's
numbers are built without plots (arms, tables, verdict, notes, summary) for every case, and checked against an
oracle read from the damaged files directly: a run's final value is the one at the last step that logged the
metric, missing when that value is no finite number, never an earlier value. One full `gspo report` runs every
damage at once. Resume reads the same records (its config, run.json, the metrics rows and the checkpoint).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from gspo.conf import GspoError
from gspo.conf.resume import saved_config
from gspo.report.arms import group_arms, pairs
from gspo.report.runs import load_runs
from gspo.report.tables import (
    adjust,
    arm_table,
    diff_table,
    difference,
    final_notes,
    headlines,
    summary_frame,
)
from gspo.report.write import _notes, _verdict
from gspo.trainer.loop import _resume_point
from gspo.trainer.run.rundir import RunDir

ACC = "eval/arith/accuracy"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _edit_metrics(change):
    """A damage of metrics.jsonl: `change(rows as text lines) -> new lines` (bytes allowed)."""
    def damage(run: Path) -> None:
        lines = _lines((run / "metrics.jsonl").read_text())
        out = change(lines)
        data = b"".join(x if isinstance(x, bytes) else x.encode() for x in out)
        (run / "metrics.jsonl").write_bytes(data)
    return damage


def _final_row(lines: list[str], value: str) -> list[str]:
    """The last row's held-out accuracy replaced by `value` (JSON text: null, NaN, Infinity, "abc")."""
    row = lines[-1]
    key = f'"{ACC}": '
    start = row.index(key) + len(key)
    end = row.index(",", start) if "," in row[start:] else row.index("}", start)
    return [*lines[:-1], row[:start] + value + row[end:]]


def _write(name: str, data: bytes | str):
    def damage(run: Path) -> None:
        (run / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return damage


def _json_edit(name: str, change):
    def damage(run: Path) -> None:
        (run / name).write_text(json.dumps(change(json.loads((run / name).read_text()))))
    return damage


RUN_DAMAGES = {
    "run.json truncated": lambda run: (run / "run.json").write_text((run / "run.json").read_text()[:30]),
    "run.json a list": _write("run.json", "[]"),
    "run.json status a number": _json_edit("run.json", lambda d: d | {"status": 3}),
    "run.json collapsed text": _json_edit("run.json", lambda d: d | {"collapsed": "x"}),
    "run.json not utf-8": _write("run.json", b'{"status": "fin\xffished"}'),
    "run.json wall_s NaN": lambda run: (run / "run.json").write_text(
        json.dumps(json.loads((run / "run.json").read_text()) | {"wall_s": math.nan})),
    "metrics step as text": _edit_metrics(lambda ls: [*ls[:-1], ls[-1].replace('{"step": 2', '{"step": "2"', 1)]),
    "metrics step negative": _edit_metrics(lambda ls: [*ls[:-1], ls[-1].replace('{"step": 2', '{"step": -1', 1)]),
    "metrics step true": _edit_metrics(lambda ls: [*ls[:-1], ls[-1].replace('{"step": 2', '{"step": true', 1)]),
    "metrics final null": _edit_metrics(lambda ls: _final_row(ls, "null")),
    "metrics final NaN": _edit_metrics(lambda ls: _final_row(ls, "NaN")),
    "metrics final Infinity": _edit_metrics(lambda ls: _final_row(ls, "Infinity")),
    "metrics final text": _edit_metrics(lambda ls: _final_row(ls, '"abc"')),
    "metrics final a list": _edit_metrics(lambda ls: _final_row(ls, "[1]")),
    "metrics reward -Infinity": _edit_metrics(lambda ls: [ls[0], ls[1].replace('"reward/mean": ', '"reward/mean": -Infinity, "x": ', 1), *ls[2:]]),
    "metrics truncated": _edit_metrics(lambda ls: [*ls[:-1], ls[-1][: len(ls[-1]) // 2]]),
    "metrics not utf-8": _edit_metrics(lambda ls: [*ls[:-1], ls[-1].encode().replace(b'{"step"', b'{"st\xffep"', 1)]),
    "metrics a list row": _edit_metrics(lambda ls: [*ls, "[]\n"]),
    "metrics empty": _write("metrics.jsonl", ""),
    "config.yaml a list": _write("config.yaml", "- 1\n- 2\n"),
    "config.yaml not utf-8": _write("config.yaml", b"seed: \xff\n"),
    "config.yaml truncated": lambda run: (run / "config.yaml").write_text((run / "config.yaml").read_text()[:200]),
}
SWEEP_DAMAGES = {
    "sweep.json a list": lambda sw: (sw / "sweep.json").write_text("[]"),
    "sweep.json no stamp": lambda sw: (sw / "sweep.json").write_text('{"overrides": []}'),
    "runs/0.json no run_dir": lambda sw: (sw / "runs" / "0.json").write_text('{"pid": 1}'),
    "runs/0.json not utf-8": lambda sw: (sw / "runs" / "0.json").write_bytes(b'{"run_dir": "\xff"}'),
    "runs/0.json run_dir a number": lambda sw: (sw / "runs" / "0.json").write_text('{"run_dir": 5}'),
    "runs/0.json truncated": lambda sw: (sw / "runs" / "0.json").write_text('{"run_dir": "../ru'),
}


@pytest.fixture
def tree(sweep_dir, tmp_path) -> Path:
    """A copy of the session sweep's folder and its runs: (copy)/sweep and (copy)/runs."""
    return Path(shutil.copytree(sweep_dir.parent, tmp_path / "copy"))


def _expected_final(run: Path, metric: str) -> float:
    """The oracle: the value of the last readable row that has `metric`, NaN unless a finite number."""
    found = None
    for line in (run / "metrics.jsonl").read_bytes().decode("utf-8", "replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        step = row.get("step") if isinstance(row, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0 and metric in row:
            if found is None or step >= found[0]:
                found = (step, row[metric])
    value = found[1] if found else None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else math.nan


def _page(paths: list[Path]) -> tuple[str | None, object]:
    """(the one error line, None) or (None, the page's numbers: summary frame and verdict and notes)."""
    try:
        runs, notes = load_runs(paths)
        arms = group_arms(runs)
        heads = [h for h in headlines("arith") if any(h.metric in r.metrics for r in runs)]
        compared = pairs(arms)
        diffs = {h.metric: adjust([difference(h, a, b) for a, b in compared]) for h in heads}
        for h in heads:
            arm_table(arms, h)
            diff_table(diffs[h.metric])
        verdict = _verdict(arms, [d for h in heads[:1] for d in diffs[h.metric]])
        return None, (summary_frame(arms, [], heads, diffs), verdict, _notes(runs, notes + final_notes(runs, heads)))
    except GspoError as e:
        return str(e), None


def _check(paths: list[Path]) -> tuple[str | None, object]:
    error, page = _page(paths)
    if error is not None:
        assert "\n" not in error and error
        return error, None
    summary, verdict, notes = page
    assert all("\n" not in n for n in notes)
    for row in summary.to_dict("records"):
        got, want = row[f"{ACC} final"], _expected_final(Path(row["path"]), ACC)
        assert (math.isnan(got) and math.isnan(want)) or got == want, (row["run_id"], got, want)
    return None, page


@pytest.mark.parametrize("case", sorted(RUN_DAMAGES))
def test_a_damaged_run_record_gives_one_line_or_a_correct_page(tree, case):
    run = sorted((tree / "runs").iterdir())[0]
    RUN_DAMAGES[case](run)
    error, page = _check([tree / "sweep"])
    if case in ("config.yaml a list", "config.yaml not utf-8"):
        assert error is not None and error.startswith(f"cannot read {run / 'config.yaml'}"), error
    elif case == "config.yaml truncated":  # what is left may parse: one line, or a page of what it says
        return
    else:
        assert error is None, error
    if case.startswith("run.json") and case != "run.json wall_s NaN":
        _summary, _verdict_lines, notes = page
        assert any(n.startswith(f"{run.name}: run.json is unreadable") for n in notes), notes
    if case.startswith("metrics final"):
        summary, verdict, notes = page
        assert math.isnan(summary.set_index("run_id").loc[run.name, f"{ACC} final"])  # missing, not step 0's value
        assert any(f"{run.name}: its final {ACC} (step 2) is missing" in n for n in notes), notes
        # that seed's pair only is left out (issue 57 D9: before, one missing value unpaired the whole comparison)
        assert any("seed 0's pair left out: a run of it has no final value (the other seeds stay paired)" in v
                   for v in verdict), verdict


@pytest.mark.parametrize("case", sorted(SWEEP_DAMAGES))
def test_a_damaged_sweep_record_gives_a_page_that_names_it(tree, case):
    SWEEP_DAMAGES[case](tree / "sweep")
    error, page = _check([tree / "sweep"])
    assert error is None, error
    summary, _verdict_lines, notes = page
    damaged = "sweep.json" if "sweep.json" in case else "runs/0.json"
    assert any(n.startswith(str(tree / "sweep" / damaged)) for n in notes), notes
    assert len(summary) == (3 if "runs/0" in case else 4)


@pytest.mark.parametrize("case", sorted(c for c in RUN_DAMAGES if not c.startswith("config.yaml")))
def test_resume_reads_a_damaged_run_or_says_one_line(tree, case):
    """What a resume reads before it trains: its config, run.json, the metrics rows and the checkpoint to start from."""
    run = sorted((tree / "runs").iterdir())[0]
    RUN_DAMAGES[case](run)
    saved_config(run, "resume=true")
    said = []
    writer = RunDir.open(str(run.parent), run.name, resume=True)
    try:
        writer.status()
        ckpt, _missing = _resume_point(writer, said.append)
    finally:
        writer.close()
    assert all("\n" not in s for s in said)
    assert ckpt is not None and ckpt.name == "step_000002", said  # the run's one checkpoint, intact
    unread = ("metrics step as text", "metrics step negative", "metrics step true", "metrics truncated",
              "metrics not utf-8", "metrics empty")
    assert any("metrics.jsonl has no readable row for step(s)" in s for s in said) == (case in unread), said


def test_a_full_report_of_every_damage_at_once(gspo, tree, tmp_path):
    """Infinity in a final (before: the forest plot raised and the whole report was lost), a null final,
    -Infinity in a training metric, a run.json of the wrong type and a damaged sweep.json: the page is written,
    each said."""
    runs = sorted((tree / "runs").iterdir())
    RUN_DAMAGES["metrics final Infinity"](runs[1])
    RUN_DAMAGES["metrics final null"](runs[2])
    RUN_DAMAGES["metrics reward -Infinity"](runs[3])  # (a step's row made unreadable would cut every run there)
    RUN_DAMAGES["run.json a list"](runs[3])
    (tree / "sweep" / "sweep.json").write_text("[]")
    out = tmp_path / "out"
    result = gspo.invoke("report", str(tree / "sweep"), "--out", str(out), "--wandb", "disabled")
    assert result.exit_code == 0, (result.exception, result.output)
    assert (out / "report.html").is_file() and (out / "forest.png").is_file()
    notes = [ln for ln in result.stderr.splitlines() if ln.startswith("note:")]
    # a missing final makes the page compare every run at the last eval all runs have (report/comparable.py)
    assert "held-out accuracy as of step 0, the last eval every run has" in result.stdout
    for words in (f"{runs[1].name}: 1 logged value(s) in metrics.jsonl are no finite number",
                  f"{runs[3].name}: 1 logged value(s) in metrics.jsonl are no finite number",
                  f"{runs[3].name}: run.json is unreadable (holds a JSON list, not an object)",
                  f"{tree / 'sweep' / 'sweep.json'}: holds a JSON list, not an object"):
        assert any(words in n for n in notes), (words, notes)
