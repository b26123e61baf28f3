"""`verdict.*` overrides of `gspo compare` (and `gspo report --effect`): parsed against the schema's
VerdictConfig and checked before anything runs or is written."""

from __future__ import annotations

import math

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gspo.conf.choices import check_choice
from gspo.conf.errors import GspoError
from gspo.conf.ranges import check_numbers
from gspo.conf.schema import VerdictConfig

PREFIX = "verdict."
UNTIL = ("none", "resolved")
SPENDING = ("obrien_fleming", "pocock")


def split_verdict(overrides: list[str]) -> tuple[VerdictConfig, list[str]]:
    """(the verdict settings, the other overrides): `verdict.key=value` items typed and range-checked."""
    mine = [o for o in overrides if o.split("=", 1)[0].lstrip("+").startswith(PREFIX)]
    rest = [o for o in overrides if o not in mine]
    node = OmegaConf.structured(VerdictConfig)
    try:
        given = OmegaConf.from_dotlist([o.lstrip("+").removeprefix(PREFIX) for o in mine])
        node = OmegaConf.merge(node, given)
    except (OmegaConfBaseException, ValueError) as e:
        raise GspoError(f"verdict settings: {str(e).splitlines()[0]}") from None
    cfg: VerdictConfig = OmegaConf.to_object(node)
    check_effect(cfg.effect)
    check_choice("verdict.until", cfg.until, UNTIL)
    check_choice("verdict.spending", cfg.spending, SPENDING)
    if cfg.max_seeds < 2:
        raise GspoError(f"verdict.max_seeds={cfg.max_seeds}: must be at least 2 (an interval needs two seeds per arm)")
    if cfg.round_seeds < 1:
        raise GspoError(f"verdict.round_seeds={cfg.round_seeds}: must be at least 1")
    if cfg.max_minutes is not None and not cfg.max_minutes > 0:
        raise GspoError(f"verdict.max_minutes={cfg.max_minutes}: must be > 0 (or null: no time budget)")
    check_numbers(node, PREFIX)  # each setting's range (conf/ranges.py): the upper bounds, past the checks above
    return cfg, rest


def check_effect(effect: float) -> None:
    if not (math.isfinite(effect) and effect > 0):
        raise GspoError(f"verdict.effect={effect}: the smallest effect of interest must be a number > 0 "
                        f"(default {VerdictConfig.effect}: 2 points of accuracy)")
