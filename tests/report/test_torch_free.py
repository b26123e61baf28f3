"""`gspo report` reads the files runs leave and trains nothing, so neither `import gspo.report` nor a whole
`gspo report` of a sweep loads torch (before: 12.4 s of torch under load for a report that uses none of it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from report_runs import fake_compare

REPORT = """
import sys
from typer.testing import CliRunner
from gspo.cli.main import app
result = CliRunner().invoke(app, ["report", *sys.argv[2:], "--out", sys.argv[1], "--wandb", "disabled"])
assert result.exit_code == 0, (result.output, result.exception)
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""


def test_importing_the_report_does_not_load_torch():
    code = "import sys, gspo.report, gspo.cli.report; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "False\n", done.stderr


def test_a_whole_report_does_not_load_torch(tmp_path: Path):
    runs = fake_compare(tmp_path / "runs", seeds=2)
    done = subprocess.run([sys.executable, "-c", REPORT, str(tmp_path / "out"), *map(str, runs)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "report.html").is_file()
