"""The compare presets: each a file of conf/sweep/ (its arms, seeds and run length; `gspo compare preset=NAME`).
Imports nothing heavy: the CLI checks a preset's name before torch loads."""

from __future__ import annotations

from omegaconf import OmegaConf

from gspo.conf.choice_check import check_choice, group_files
from gspo.conf.errors import GspoError

DEFAULT_PRESET = "compare"


def presets() -> dict[str, str]:
    """Preset name -> the text of its conf/sweep/<name>.yaml."""
    return group_files("sweep")


def pick_preset(overrides: list[str]) -> tuple[str, list[str]]:
    """(preset name, the other overrides); GspoError naming the presets for an unknown one."""
    named = [o.split("=", 1)[1] for o in overrides if o.startswith("preset=")]
    rest = [o for o in overrides if not o.startswith("preset=")]
    if len(named) > 1:
        raise GspoError(f"preset= given {len(named)} times ({', '.join(named)}): name one")
    name = named[0] if named else DEFAULT_PRESET
    check_choice("preset", name, sorted(presets()))
    return name, rest


def sweep_params(name: str) -> dict[str, str]:
    """Preset `name`'s hydra.sweeper.params: key -> its sweep (`grpo,gspo`), as Hydra's sweeper reads them."""
    params = OmegaConf.create(presets()[name]).get("hydra", {}).get("sweeper", {}).get("params", {})
    return {str(k): str(v) for k, v in params.items()}
