"""A library imported at its first use, for the modules a torch-free command reads: the algorithm registry's loss
modules register their names, options and cards (what `gspo explain` prints) without running torch's import,
which takes seconds (21 s under load, issue 60). The standard library's LazyLoader: the module is bound at once
and runs on its first attribute, or as soon as anything imports it the usual way."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """`name` (a top-level package: torch) as a module that imports itself on first use; the module itself where it
    is already imported."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

