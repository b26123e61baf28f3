"""`gspo report`: comparison reports over run directories (offline, from the files runs leave). It reads
what the trainer writes and trains nothing; the CLI uses this public API only."""

from gspo.report.page import fmt
from gspo.report.runs import load_run, load_runs, unread_steps
from gspo.report.separate import write_groups
from gspo.report.tables import run_value
from gspo.report.write import Report, write_report

__all__ = ["Report", "fmt", "load_run", "load_runs", "run_value", "unread_steps", "write_groups", "write_report"]
