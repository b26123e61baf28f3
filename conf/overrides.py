"""Check a sweep's overrides before any job starts, so a bad one fails as it does in `gspo train`.

Hydra would report a bad value only when the job holding it composes, after earlier jobs have run, and
in its own multi-line form. Here every value of every swept key is composed once (the other keys at
their first value) through `compose_config`, whose errors are one `GspoError` line. Overrides of Hydra's
own config (hydra.*, hydra/launcher=...) are left to Hydra; interval sweeps (Optuna) are checked at
their bounds' key only.
"""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException

from gspo.conf.compose import compose_config
from gspo.conf.errors import GspoError


def _values(override) -> list[str]:
    """The override as plain `key=value` strings, one per swept value."""
    head = override.input_line.split("=", 1)[0]
    if not override.is_sweep_override():
        return [override.input_line]
    try:
        return [f"{head}={v}" for v in override.sweep_string_iterator()]
    except HydraException:  # an interval: only a search (e.g. Optuna) can draw from it
        return []


def _parse(overrides: list[str]) -> list:
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            parsed.extend(parser.parse_overrides([text]))
        except OverrideParseException as e:
            raise GspoError(f"cannot parse override {text!r}: {str(e).splitlines()[0]}") from None
    return parsed


def check_sweep_overrides(overrides: list[str], command: str = "train") -> None:
    """Raise a GspoError for the first override Hydra cannot parse or compose (for `gspo <command>`)."""
    choices = [_values(o) for o in _parse(overrides) if not o.is_hydra_override()]
    base = [c[0] if c else None for c in choices]
    combos = [base] + [base[:i] + [v] + base[i + 1:] for i, values in enumerate(choices) for v in values[1:]]
    for combo in combos:
        compose_config([x for x in combo if x is not None], command=command)


def swept_keys(overrides: list[str]) -> list[str]:
    """Keys (or groups) the overrides sweep over: `algo=grpo,gspo seed=0,1` -> [algo, seed]."""
    return [o.key_or_group for o in _parse(overrides) if o.is_sweep_override() and not o.is_hydra_override()]
