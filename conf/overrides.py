"""Check a sweep's overrides before any job starts, so a bad one fails as it does in `gspo train`.

Hydra would report a bad value only when the job holding it composes, after earlier jobs have run, and
in its own multi-line form. Here every value of every swept key is composed once (the other keys at
their first value) through `compose_config`, whose errors are one `GspoError` line. Overrides of Hydra's
own config (hydra.*, hydra/launcher=...) are left to Hydra; interval sweeps (Optuna) are checked at
their bounds' key only.
"""

from __future__ import annotations

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException

from gspo.conf.compose import compose_config
from gspo.conf.errors import GspoError

MULTIRUN = ("-m", "--multirun")  # Hydra's flags that make a command a sweep
INFO_FLAGS = ("--cfg", "-c", "--info", "-i", "--resolve", "--package", "-p")  # Hydra's flags that print, not run


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


def first_job(overrides: list[str]) -> list[str]:
    """The overrides with every sweep at its first value (Hydra's own overrides left out): the sweep's first job."""
    return [c[0] for c in (_values(o) for o in _parse(overrides) if not o.is_hydra_override()) if c]


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


def key_of(token: str) -> str:
    """`++seed=1` -> `seed`: an override's key without Hydra's prefix."""
    return token.split("=", 1)[0].lstrip("+~")


def one_per_key(overrides: list[str], params: dict[str, str] | None = None) -> list[str]:
    """The command line's overrides with each key once, where the first of its forms stood, as its last form says
    it: `seed=0 ++seed=1,2` -> `seed=1,2`. A key the preset's sweep params name loses its `+`/`++` (the params put
    the key there already), so Hydra's sweeper, which keys `++seed` apart from `seed`, plans each job once."""
    out: dict[str, str] = {}
    for text, o in zip(overrides, _parse(overrides), strict=True):
        key = text if o.is_hydra_override() else o.key_or_group
        said = text.lstrip("+") if key in (params or {}) or (key in out and not text.startswith("~")) else text
        out[key] = said
    return list(out.values())


def planned_jobs(overrides: list[str], params: dict[str, str] | None = None) -> tuple[str, ...] | None:
    """The jobs Hydra's basic sweeper will run for `one_per_key`'s overrides, in its job order (job i is item i):
    each the `key=value` overrides it sweeps, joined by spaces (its own split_arguments). `params`: the sweeper's
    params from the config (a preset's hydra.sweeper.params), which come before the command line's as Hydra merges
    them. None when another sweeper (Optuna) draws the jobs as it goes. Called by study/plan.py alone."""
    if any(o.startswith("hydra/sweeper=") for o in overrides):
        return None
    parsed = [o for o in _parse([f"{k}={v}" for k, v in (params or {}).items()] + overrides)
              if not o.is_hydra_override()]
    if any(o.is_sweep_override() and not o.is_discrete_sweep() for o in parsed):
        return None
    swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
    (jobs,) = BasicSweeper.split_arguments(parsed, None)  # Hydra's own expansion, in its job order
    return tuple(" ".join(t for t in job if t.split("=", 1)[0] in swept) for job in jobs)
