"""`gspo compare [preset=NAME] [OVERRIDES]`: a preset sweep, then the report.

A preset is a file of conf/sweep/: `compare` (the default: GRPO and GSPO over three seeds, shortened to 20
steps), `lr` (GRPO and GSPO at five learning rates: where each collapses), `family` (GRPO, DAPO, Dr. GRPO,
GSPO, GMPO, CISPO, SAPO over three seeds) and one per claim of the GSPO paper (`moe`, `mismatch`, `stability`).
Arms provably equal under the config are not run twice (cli/sweep.py `fold_equal_arms`). Its arms,
seeds and run length are the file's; overrides on the command line win over it (`algo=grpo,gspo seed=0,1
train.steps=50`). The report goes to <sweep>/report.
"""

from __future__ import annotations

import sys
from importlib import resources
from shlex import quote

import typer
from omegaconf import OmegaConf

from gspo.cli.errors import user_errors
from gspo.cli.report import print_report
from gspo.cli.sweep import run_sweep
from gspo.conf.choices import check_choice
from gspo.conf.errors import GspoError
from gspo.report import write_report

DEFAULT_PRESET = "compare"


def presets() -> dict[str, str]:
    """Preset name -> the text of its conf/sweep/<name>.yaml."""
    root = resources.files("gspo.conf").joinpath("sweep")
    return {p.name.removesuffix(".yaml"): p.read_text() for p in root.iterdir() if p.name.endswith(".yaml")}


def pick_preset(overrides: list[str]) -> tuple[str, list[str]]:
    """(preset name, the other overrides); GspoError naming the presets for an unknown one."""
    named = [o.split("=", 1)[1] for o in overrides if o.startswith("preset=")]
    rest = [o for o in overrides if not o.startswith("preset=")]
    if len(named) > 1:
        raise GspoError(f"preset= given {len(named)} times ({', '.join(named)}): name one")
    name = named[0] if named else DEFAULT_PRESET
    check_choice("preset", name, sorted(presets()))
    return name, rest


def swept_by(text: str) -> tuple[str, ...]:
    """The keys a preset sweeps (its hydra.sweeper.params), for run names and tags."""
    return tuple(sweep_params(text))


def sweep_params(text: str) -> dict[str, str]:
    """A preset's hydra.sweeper.params: key -> its sweep (`grpo,gspo`), as Hydra's sweeper reads them."""
    params = OmegaConf.create(text).get("hydra", {}).get("sweeper", {}).get("params", {})
    return {str(k): str(v) for k, v in params.items()}


@user_errors
def compare_cmd(
    overrides: list[str] = typer.Argument(None, help="preset=compare|lr|family|moe|mismatch|stability, then Hydra "
                                          "overrides on top of it, e.g. model=qwen3-0.6b task=math seed=0,1,2,3"),
) -> None:
    """Run a comparison preset (default: GRPO and GSPO, 3 seeds, 20 steps on the embedded default;
    preset=lr: both at five learning rates, where each collapses; preset=family: GRPO, DAPO, Dr. GRPO, GSPO,
    GMPO, CISPO, SAPO; preset=moe|mismatch|stability put the GSPO paper's three claims to the test), then
    write the report and print its verdict."""
    name, rest = pick_preset(list(overrides or []))
    sweep_dir = run_sweep([f"+sweep={name}", *rest], preset_keys=swept_by(presets()[name]),
                          preset_params=sweep_params(presets()[name]), report_hint=False,
                          again=" ".join(["gspo compare", *(quote(o) for o in overrides or []
                                                            if not o.startswith("hydra.sweep.dir="))]))
    out = sweep_dir / "report"
    print_report(write_report([sweep_dir], out, command=f"gspo compare {' '.join(overrides or [])}".strip(),
                              progress=sys.stderr.isatty()))
