"""`gspo report`: comparison reports over run directories (offline, from the files runs leave). It reads
what the trainer writes and trains nothing; the CLI uses this public API only."""

from gspo.report.page import fmt
from gspo.report.runs import SWEEP_PLAN, SWEEP_RUNS, load_run, sweep_job, sweep_jobs, sweep_runs, unread_steps
from gspo.report.separate import write_groups
from gspo.report.tables import run_value
from gspo.report.write import Report, write_report

__all__ = ["SWEEP_PLAN", "SWEEP_RUNS", "Report", "fmt", "load_run", "run_value", "sweep_job", "sweep_jobs", "sweep_runs",
           "unread_steps", "write_groups", "write_report"]
