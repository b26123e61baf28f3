"""The keys of the schema, for errors that say the fix: a misspelt key gets its nearest spelling (as a
closed choice does), a new key of a free-form node (`eval.paths`) Hydra's leading `+`, a `--flag value`
the `key=value` form, a comma list in a single run `gspo sweep`; and a bare name where the schema wants
a list is taken as a one-item list (`eval.benches=aime24` -> `eval.benches=[aime24]`).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from functools import cache

from omegaconf import DictConfig, ListConfig, OmegaConf

from gspo.conf.errors import GspoError
from gspo.conf.schema import Config


@cache
def _schema() -> DictConfig:
    return OmegaConf.structured(Config)


@cache
def schema_keys() -> tuple[str, ...]:
    """Every dotted key of the schema (leaves and nodes), e.g. train.steps, eval.paths."""
    def walk(node: DictConfig, prefix: str):
        for key in node:
            name = f"{prefix}{key}"
            yield name
            child = node._get_node(key)
            if isinstance(child, DictConfig):
                yield from walk(child, f"{name}.")
    return tuple(walk(_schema(), ""))


def free_form(key: str) -> bool:
    """Whether `key` is a dict node of the schema that takes any key (eval.paths, algo.options)."""
    node = OmegaConf.select(_schema(), key, default=None) if key else None
    return isinstance(node, DictConfig) and not dataclasses.is_dataclass(OmegaConf.get_type(node))


def unknown_key(key: str, value: str | None = None) -> str:
    """One line for a key the config does not have, with the fix: `+` for a new key of a free-form node,
    else the nearest key of the schema."""
    parent = key.rpartition(".")[0]
    if free_form(parent):
        assigned = f"+{key}={value}" if value is not None else f"+{key}=..."
        return f"{key}: no such key in the config yet; {parent} takes new keys with a leading +: {assigned}"
    folded = {k.lower(): k for k in schema_keys()}  # case is no miss: Train.LR is train.lr
    near = [folded[n] for n in difflib.get_close_matches(key.lower(), list(folded), n=1, cutoff=0.8)]
    hint = f"did you mean {near[0]}?" if near else "gspo train --cfg lists the keys"
    return f"{key}: no such key in the config ({hint})"


def check_flags(overrides: list[str], command: str) -> None:
    """`--steps 5` is not an override: say the `key=value` form (`train.steps=5`) of the key it names."""
    for i, arg in enumerate(overrides):
        if not arg.startswith("-"):
            continue
        name, _, value = arg.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if not value and i + 1 < len(overrides) and "=" not in overrides[i + 1]:
            value = overrides[i + 1]
        keys = [k for k in schema_keys() if k == name or k.endswith(f".{name}")]
        if not keys:
            leaves = {k.rpartition(".")[2]: k for k in schema_keys()}
            keys = [leaves[n] for n in difflib.get_close_matches(name, list(leaves), n=1, cutoff=0.8)]
        fix = " or ".join(f"{k}={value or '...'}" for k in keys) or "key=value (gspo train --cfg lists the keys)"
        raise GspoError(f"{arg}{' ' + value if value and '=' not in arg else ''}: gspo {command} takes Hydra "
                        f"overrides, not flags: {fix}")


def sweep_hint(head: str, command: str) -> str | None:
    """Hydra's `Ambiguous value for argument 'algo=grpo,gspo'` in a single run: say how to run them all."""
    found = re.match(r"Ambiguous value for argument '(.+)'", head)
    if not found:
        return None
    arg = found[1]
    sweep = "gspo sweep" if command == "train" else f"gspo {command} -m"
    return (f"{arg}: one run takes one value; to run each of them: {sweep} {arg}"
            + (f" (or gspo train -m {arg})" if command == "train" else ""))


@cache
def _list_keys() -> frozenset[str]:
    return frozenset(k for k in schema_keys() if isinstance(OmegaConf.select(_schema(), k), ListConfig))


def bare_lists(overrides: list[str]) -> list[str]:
    """`eval.benches=aime24` -> `eval.benches=[aime24]`: a bare name where the schema wants a list is a
    one-item list (Hydra would say "str is not a ListConfig"). A comma list is left alone (a sweep's)."""
    out = []
    for arg in overrides:
        key, eq, value = arg.partition("=")
        bare = value and not value.startswith(("[", "${")) and "," not in value
        out.append(f"{key}=[{value}]" if eq and key.lstrip("+~") in _list_keys() and bare else arg)
    return out
