"""`gspo compare [preset=NAME] [OVERRIDES]`: parse, check, call study/compare.py, print the report.

A preset is a file of conf/sweep/ (study/presets.py): `compare` (the default: GRPO and GSPO over three seeds,
shortened to 20 steps), `lr` (GRPO and GSPO at five learning rates: where each collapses), `family` (GRPO, DAPO,
Dr. GRPO, GSPO, GMPO, CISPO, SAPO over three seeds), `family2026` (GRPO against DPPO-TV, DPPO-KL, OPSM, MaxRL,
GDPO) and one per claim of the GSPO paper (`moe`, `mismatch`, `stability`). Arms provably equal under the config
are not run twice (study/plan.py fold_equal_arms). Its arms, seeds and run length are the file's; overrides on the command line win
over it (`algo=grpo,gspo seed=0,1 train.steps=50`). The report goes to <sweep>/report. How many jobs run side by
side is the launcher policy's (study/launch.py); `hydra/launcher=basic` runs them one at a time.

`verdict.*` settings (conf/schema.py VerdictConfig) shape the verdict, not the runs: `verdict.effect` is the
smallest effect of interest; `verdict.until=resolved` adds seeds to every arm in rounds (`verdict.round_seeds`,
up to `verdict.max_seeds`, or until `verdict.max_minutes`) and looks after each round with a group-sequential
design (study/rounds.py), stopping once each comparison of the primary metric (`verdict.primary`) is resolved or
shown equivalent within +-effect. Each round is a sweep of its own in <dir>/round-<i>; the same command with
hydra.sweep.dir=<dir> resumes it (finished runs are skipped, the looks recomputed).
"""

from __future__ import annotations

import typer

from gspo.cli.errors import user_errors
from gspo.conf.verdict import split_verdict
from gspo.study.presets import pick_preset, presets, sweep_params

# the whole list, words apart, so the terminal wraps it at any width (one long token was cut at 80 and 120 columns)
EPILOG = ("Presets (preset=NAME): " + ", ".join(sorted(presets())) + ". --cfg job prints every job of the grid with "
          "the resolved keys the jobs differ in, --cfg all also the first job whole; neither runs anything.")


@user_errors
def compare_cmd(
    overrides: list[str] = typer.Argument(None, help="preset=NAME (the presets are listed below), then Hydra overrides "
                                          "on top of it, e.g. model=qwen3-0.6b task=math seed=0,1,2,3; "
                                          "verdict.until=resolved verdict.max_seeds=12 adds seeds until it knows; "
                                          "--cfg job|all prints the grid"),
) -> None:
    """Run a comparison preset (default: GRPO and GSPO, 3 seeds, 20 steps on the embedded default;
    preset=lr: both at five learning rates, where each collapses; preset=family: GRPO, DAPO, Dr. GRPO, GSPO,
    GMPO, CISPO, SAPO; preset=family2026: GRPO, DPPO-TV, DPPO-KL, OPSM, MaxRL, GDPO; preset=moe|mismatch|stability
    put the GSPO paper's three claims to the test; preset=staleness: GRPO, GSPO and GSPO+TIS at rollout.lag 0, 1, 2,
    4), then write the report and print its verdict.
    verdict.until=resolved: seeds added in rounds until each verdict is resolved or shown equivalent
    (group-sequential), or verdict.max_seeds / verdict.max_minutes is spent."""
    overrides = list(overrides or [])
    mode = None
    if "--cfg" in overrides:  # the grid, printed instead of run (study/grid.py composes configs: imported for it)
        from gspo.study.grid import cfg_mode

        mode, overrides = cfg_mode(overrides)
    name, rest = pick_preset(overrides)
    verdict, rest = split_verdict(rest)
    if mode is not None:
        from gspo.study.grid import grid_text

        typer.echo(grid_text(name, rest, mode), nl=False)
        return
    from gspo.cli.fetch import check_offline_plan
    from gspo.study.plan import make_plan

    plan = make_plan([f"+sweep={name}", *rest], preset=name, params=sweep_params(name), verdict=verdict)  # once
    check_offline_plan(plan, rest)  # offline: every hub asset its jobs lack, in one line, before a job starts
    # the sweep, the trainer and the report load torch and pandas: imported once the preset and verdict are checked
    from gspo.cli.report import print_report
    from gspo.study.compare import compare

    print_report(compare(plan, overrides))
