"""`gspo compare [OVERRIDES]`: GRPO, GSPO and GSPO-token over three seeds, then the report.

The arms, seeds and the shortened run length are the sweep preset conf/sweep/compare.yaml; overrides
on the command line win over it (`algo=grpo,gspo seed=0,1 train.steps=50`).
"""

from __future__ import annotations

import typer

from gspo.cli.grade import user_errors
from gspo.cli.report import print_report
from gspo.cli.sweep import run_sweep
from gspo.trainer.report import write_report

PRESET = "+sweep=compare"


@user_errors
def compare_cmd(
    overrides: list[str] = typer.Argument(None, help="Hydra overrides on top of the compare preset, "
                                          "e.g. model=qwen3-0.6b task=math seed=0,1,2,3"),
) -> None:
    """Compare GRPO, GSPO and GSPO-token (3 seeds each; shortened to 20 steps on the embedded default),
    then write the report and print its headline table."""
    args = [PRESET, *(overrides or [])]
    sweep_dir = run_sweep(args, preset_keys=("algo", "seed"))
    out = sweep_dir / "report"
    print_report(write_report([sweep_dir], out, command=f"gspo compare {' '.join(overrides or [])}".strip()))
