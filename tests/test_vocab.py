"""The vocabulary (gspo.vocab.choices) is how code names a config choice: each value stated once, and no module
compares a config choice with a bare string."""

from __future__ import annotations

import ast

from gspo.conf.choice_check import CHOICES
from gspo.vocab.choices import Choice, Correction, Level, Spending, Until
from tests.test_layers import MODULES  # every module of every layer

VERDICT = {"verdict.until": Until.values, "verdict.spending": Spending.values}


def test_a_choice_lists_its_values_in_order_and_nothing_else():
    class Probe(Choice):
        B, A = "b", "a"
        BOTH = (B, A)  # a grouping of values is not a value
        ALL = "all"  # a value may be named ALL: the tuple is `values`

    assert Probe.values == ("b", "a", "all")
    assert Level.values == ("auto", *Level.RESOLVED) and Correction.values[0] == Correction.NONE


def _bare_comparisons(source: str, values: dict[str, set[str]]) -> list[str]:
    """`x.<key> == "<one of its values>"` (or !=, in, not in a tuple of them), by line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        keys = {s.attr for s in sides if isinstance(s, ast.Attribute) and s.attr in values}
        strings = {c.value for s in sides for c in (s.elts if isinstance(s, ast.Tuple) else [s])
                   if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        if any(strings & values[key] for key in keys):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_config_choice_is_compared_with_a_bare_string():
    """`cfg.rollout.kv_cache == KvCache.STATIC`, not `== "static"`: a renamed or removed value then fails where it
    is named, not silently wherever it was spelt."""
    values: dict[str, set[str]] = {}
    for key, choice in {**CHOICES, **VERDICT}.items():
        values.setdefault(key.rsplit(".", 1)[-1], set()).update(choice)
    found = {name: bad for name, path in MODULES.items() if (bad := _bare_comparisons(path.read_text(), values))}
    assert found == {}
    # the check sees one where there is one, and not a block kind that shares the attribute's name
    assert _bare_comparisons('if cfg.rollout.kv_cache == "static" or c.kind in ("tis", "mis"): pass', values) == [
        "line 1: cfg.rollout.kv_cache == 'static'", "line 1: c.kind in ('tis', 'mis')"]
    assert _bare_comparisons('if b.kind == "h1": pass', values) == []
