"""`verdict.*` overrides of `gspo compare` (and `gspo report --effect`): parsed against the schema's
VerdictConfig and checked before anything runs or is written."""

from __future__ import annotations

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gspo.conf.choice_check import check_choice
from gspo.conf.errors import GspoError
from gspo.conf.ranges import check_number, check_numbers
from gspo.conf.schema import VerdictConfig
from gspo.vocab.choices import Spending, Until

PREFIX = "verdict."


def split_verdict(overrides: list[str]) -> tuple[VerdictConfig, list[str]]:
    """(the verdict settings, the other overrides): `verdict.key=value` items typed and range-checked."""
    mine = [o for o in overrides if o.split("=", 1)[0].lstrip("+").startswith(PREFIX)]
    if any(o.split("=", 1)[0].lstrip("+") == "verdict.metric" for o in mine):
        raise GspoError("verdict.metric is named verdict.primary now (the page's one primary score)")
    rest = [o for o in overrides if o not in mine]
    node = OmegaConf.structured(VerdictConfig)
    try:
        given = OmegaConf.from_dotlist([o.lstrip("+").removeprefix(PREFIX) for o in mine])
        node = OmegaConf.merge(node, given)
    except (OmegaConfBaseException, ValueError) as e:
        raise GspoError(f"verdict settings: {str(e).splitlines()[0]}") from None
    cfg: VerdictConfig = OmegaConf.to_object(node)
    check_numbers(node, PREFIX)  # each setting's range, stated once in conf/ranges.py
    check_choice("verdict.until", cfg.until, Until.values)
    check_choice("verdict.spending", cfg.spending, Spending.values)
    return cfg, rest


def check_effect(effect: float) -> None:
    """`gspo report --effect`: the verdict.effect rule of conf/ranges.py."""
    check_number("verdict.effect", effect)
