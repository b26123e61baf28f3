"""`gspo report`: comparison reports over run directories (offline, from the files runs leave)."""

from gspo.trainer.report.write import Report, write_report

__all__ = ["Report", "write_report"]
