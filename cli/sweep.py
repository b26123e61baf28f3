"""`gspo sweep`: Hydra's own multirun, driven from Typer.

Hydra's maintainers intend `@hydra.main` to own the command line, and the compose API alone gives up
multirun and launchers; so the sweep hands its arguments to a `hydra.main` job with `--multirun`
(sys.argv set, function called), and each job runs the same `train` as `gspo train`.
"""

from __future__ import annotations

import secrets
import sys
import time

import hydra
import typer
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from gspo.conf import GspoError, validate_config
from gspo.conf.schema import register_configs


def run_sweep(overrides: list[str]) -> None:
    register_configs()
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"  # two sweeps in one second: two names
    sys.argv = ["gspo sweep", "--multirun", f"hydra.sweep.dir=results/sweeps/{stamp}",
                "hydra.job.chdir=false", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled",
                f"+hydra.job.env_set.GSPO_SWEEP={stamp}", *overrides]
    _job()


@hydra.main(config_path="pkg://gspo.conf", config_name="config", version_base="1.3")
def _job(cfg: DictConfig) -> None:
    from gspo.trainer.loop import train

    job = HydraConfig.get().job
    try:
        validate_config(cfg)
        if cfg.run_id is None:
            with open_dict(cfg):
                cfg.run_id = f"{job.env_set.get('GSPO_SWEEP', 'sweep')}-{job.num}-{cfg.algo.name}-s{cfg.seed}"
        typer.echo(f"sweep job {job.num}: {' '.join(job.override_dirname.split(','))} -> {cfg.run_id}", err=True)
        train(cfg, log=lambda m: typer.echo(m, err=True))
    except GspoError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
