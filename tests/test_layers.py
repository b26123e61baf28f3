"""The import layers of docs/DESIGN.md, read from the source with `ast`: each layer imports only what it
may (vocab: the standard library; algos: vocab; conf: vocab; evals: conf; trainer: algos, conf, evals; report: those
and trainer; study: those and report; cli: anything), no import
circle between modules, no import of a project module inside a function outside cli/ (where lazy loading
keeps `--help` fast), and no private name imported from another module.

Inside the trainer, the rooms of trainer/__init__.py in their order, each importing only the rooms below it:

    run < model < parallel < tasks < engines < step < the recipe (trainer/*.py: loop, evaluate, policy, ...)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAY_IMPORT = {
    "vocab": {"vocab"},  # the names every layer shares; the standard library only (test below)
    "algos": {"vocab", "algos"},
    "conf": {"vocab", "conf"},
    "evals": {"vocab", "conf", "evals"},
    "trainer": {"vocab", "algos", "conf", "evals", "trainer"},
    "report": {"vocab", "algos", "conf", "evals", "trainer", "report"},  # reads what the trainer writes; trains nothing
    "study": {"vocab", "algos", "conf", "evals", "trainer", "report", "study"},  # plans, launches, resumes, decides experiments
    "cli": {"vocab", "algos", "conf", "evals", "trainer", "report", "study", "cli"},
}

# The trainer's rooms, lowest first: a room imports only rooms before it in this list (and itself); the recipe
# modules at the trainer's top (RECIPE) may import every room, and no room imports them.
ROOMS = ("run", "model", "parallel", "tasks", "engines", "step")
RECIPE = {"loop", "evaluate", "policy", "coldstart", "state", "preflight", "assets"}


def _modules() -> dict[str, Path]:
    mods = {}
    for top in MAY_IMPORT:
        for f in sorted((ROOT / top).rglob("*.py")):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(["gspo", *parts])] = f
    return mods


MODULES = _modules()


def _imports(name: str, path: Path, source: str | None = None) -> list[tuple[ast.AST, str, bool]]:
    """(node, imported project module, at module level?) for every import of a gspo module in `path`."""
    tree = ast.parse(path.read_text() if source is None else source)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    top_level = {id(n) for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod when there is one
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found += [(node, t, id(node) in top_level) for t in targets if t.startswith("gspo.")]
    return found


def _owner(target: str) -> str:
    """The project module an imported name lives in (a dotted name that is not a module is its parent's)."""
    while target not in MODULES and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def test_no_arrow_runs_back_up():
    bad = [f"{name} -> {target}" for name, path in MODULES.items() for _, target, _ in _imports(name, path)
           if target.split(".")[1] not in MAY_IMPORT[name.split(".")[1]]]
    assert bad == []


def _third_party(path: Path) -> list[str]:
    """The top-level modules `path` imports from outside the standard library and the project."""
    import sys

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module.split(".")[0])
    return sorted({m for m in found if m not in sys.stdlib_module_names and m != "gspo"})


def test_the_vocabulary_imports_only_the_standard_library():
    """gspo.vocab is what conf/ checks a config against before torch loads, and what report/ reads without torch."""
    assert {name: _third_party(path) for name, path in MODULES.items()
            if name.startswith("gspo.vocab") and _third_party(path)} == {}
    assert _third_party(ROOT / "algos" / "common.py") == ["torch"]  # the check sees a heavy import where there is one


def test_the_vocabulary_and_conf_load_without_torch():
    """`import gspo.vocab, gspo.conf` (what a config check and the metric catalogue need) imports no torch,
    transformers or pandas, in a fresh interpreter."""
    import subprocess
    import sys

    probe = ("import sys\nimport gspo.conf, gspo.vocab.choices, gspo.vocab.metrics, gspo.conf.choice_check, "
             "gspo.conf.verdict\nprint(sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["[]"], out.stdout + out.stderr


def _room(module: str) -> int | None:
    """The rank of a trainer module's room (len(ROOMS) for the recipe); None outside the trainer."""
    parts = module.split(".")
    if parts[:2] != ["gspo", "trainer"] or len(parts) < 3:
        return None
    return ROOMS.index(parts[2]) if parts[2] in ROOMS else len(ROOMS)


def _arrows_up_between_rooms(imports: dict[str, list[str]]) -> list[str]:
    return [f"{name} -> {target}" for name, targets in imports.items() for target in targets
            if _room(name) is not None and _room(target) is not None and _room(target) > _room(name)]


def test_no_arrow_runs_up_between_the_trainers_rooms():
    imports = {name: [target for _, target, _ in _imports(name, path)] for name, path in MODULES.items()}
    assert _arrows_up_between_rooms(imports) == []


def test_every_trainer_module_is_in_a_room():
    """A module at the trainer's top is a recipe module named in RECIPE; anything else belongs in a room."""
    top = {f.stem for f in (ROOT / "trainer").glob("*.py")} - {"__init__"}
    rooms = {d.name for d in (ROOT / "trainer").iterdir() if (d / "__init__.py").exists()}
    assert top == RECIPE, "put a new trainer module in the room of its job (trainer/__init__.py lists them)"
    assert rooms == set(ROOMS)


def test_each_rooms_docstring_states_what_it_may_import():
    for k, room in enumerate(ROOMS):
        doc = ast.get_docstring(ast.parse((ROOT / "trainer" / room / "__init__.py").read_text()))
        may = doc.split("May import:", 1)[1]
        assert [r for r in ROOMS if f"trainer.{r}" in may] == list(ROOMS[:k]), room


def test_no_function_local_project_import_outside_cli():
    bad = [f"{name}: {target} (line {node.lineno})" for name, path in MODULES.items()
           for node, target, top in _imports(name, path) if not top and not name.startswith("gspo.cli")]
    assert bad == []


def test_no_private_name_is_imported_from_another_module():
    bad = []
    for name, path in MODULES.items():
        for node, target, _ in _imports(name, path):
            if isinstance(node, ast.ImportFrom) and _owner(target) != name:
                bad += [f"{name}: {a.name} from {target}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        for _, target, top in _imports(name, path):
            owner = _owner(target)
            if top and owner in MODULES and owner != name:
                edges.setdefault(name, set()).add(owner)
    assert _circles(edges) == []


def test_the_checks_can_fail():
    # a circle, an upward arrow and a local import are each found when present
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    source = "def f():\n    from gspo.trainer.loop import train\n"
    found = _imports("gspo.evals.probe", ROOT / "evals" / "probe.py", source)
    assert [(t, top) for _, t, top in found] == [("gspo.trainer.loop", False)]
    assert "trainer" not in MAY_IMPORT["evals"]
    # a room importing a room above it, or the recipe, is found; downward arrows are not
    assert _arrows_up_between_rooms({"gspo.trainer.engines.rollout": ["gspo.trainer.step.scoring", "gspo.trainer.model.logprobs"],
                                     "gspo.trainer.run.rundir": ["gspo.trainer.loop", "gspo.conf.errors"],
                                     "gspo.trainer.loop": ["gspo.trainer.step.update"]}) == [
        "gspo.trainer.engines.rollout -> gspo.trainer.step.scoring", "gspo.trainer.run.rundir -> gspo.trainer.loop"]


# Modules the package imports that come with a declared dependency rather than being declared themselves.
TRANSITIVE = {"numpy": "torch, pandas", "yaml": "omegaconf, hydra-core", "submitit": "hydra-submitit-launcher (the extra)",
              "google": "wandb (google.protobuf: its records are protobufs)"}


def test_every_third_party_import_is_a_declared_dependency():
    """A fresh install gets only what pyproject.toml declares: a module the package imports from a distribution
    not declared (as scipy once was, present here only by chance) fails on a clean machine, not here."""
    import re
    import sys
    from importlib.metadata import packages_distributions

    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0].lower().replace("_", "-")
                for d in [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]}
    dists = packages_distributions()
    imported = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    third_party = sorted(m for m in imported if m not in sys.stdlib_module_names and m != "gspo" and m not in TRANSITIVE)
    undeclared = [m for m in third_party
                  if not {d.lower().replace("_", "-") for d in dists.get(m, [m])} & declared]
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_every_package_folder_is_installed():
    """A wheel carries only the packages pyproject.toml lists: a sub-package missing there imports here, from
    the checkout, and is absent from an installed copy."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {f"gspo.{top}": top for top in MAY_IMPORT}
    assert {name: folders[name] for name in setup["package-dir"]} == setup["package-dir"]
    packages = {".".join(["gspo", *init.parent.relative_to(ROOT).parts])
                for top in MAY_IMPORT for init in (ROOT / top).rglob("__init__.py")}
    assert packages == set(setup["packages"])
