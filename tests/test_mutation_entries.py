"""perf/mutations.py stays in step with the code: every breakage it lists still applies.

The mutation check is run by hand, so a refactor that moves the code it edits would otherwise go
unnoticed until someone runs it. Here, without running it: each edit's text occurs exactly once in its
file, the edited file still compiles (a breakage of a feature, not a syntax error), and each named test
file (and test function, after `::`) exists.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_mutations():
    spec = importlib.util.spec_from_file_location("gspo_mutations", ROOT / "perf" / "mutations.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


MUTANTS = _load_mutations().MUTANTS


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_edit_matches_exactly_once_and_still_compiles(mutant):
    mutated: dict[str, str] = {}
    for file, old, new in mutant.edits:
        path = ROOT / file
        assert path.is_file(), f"mutant {mutant.name!r}: {file} does not exist; fix perf/mutations.py"
        count = path.read_text().count(old)
        assert count == 1, (f"mutant {mutant.name!r}: {file} holds {count} copies of {old!r} (must be exactly 1); "
                            "fix perf/mutations.py")
        text = mutated.get(file, path.read_text())  # edits apply one after another, as mutations.py does
        assert text.count(old) == 1, f"mutant {mutant.name!r}: an earlier edit of {file} changed {old!r}"
        assert old != new, f"mutant {mutant.name!r}: an edit of {file} changes nothing"
        mutated[file] = text.replace(old, new)
    for file, text in mutated.items():
        if file.endswith(".py"):
            try:
                compile(text, file, "exec")
            except SyntaxError as e:
                pytest.fail(f"mutant {mutant.name!r}: its edits leave {file} a syntax error ({e})")


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_named_test_exists(mutant):
    assert mutant.tests, f"mutant {mutant.name!r} names no test"
    for target in mutant.tests:
        file, *parts = target.split("::")
        path = ROOT / file
        assert path.is_file(), f"mutant {mutant.name!r}: test file {file} does not exist; fix perf/mutations.py"
        if parts:
            name = parts[-1].split("[")[0]  # Class::test_name[param] -> test_name
            assert re.search(rf"^\s*(async\s+)?def {re.escape(name)}\(", path.read_text(), re.M), (
                f"mutant {mutant.name!r}: {file} has no `def {name}`; fix perf/mutations.py")
