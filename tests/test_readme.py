"""The README cannot drift from the CLI: every `gspo ...` command in its code blocks (and its docs/ pages') parses (click parses
each command's options and arguments; Hydra's parser each override, whose key the schema has), its group
table names every preset, and every metric a run logs is documented."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from hydra.core.override_parser.overrides_parser import OverridesParser

from gspo.cli.main import app
from gspo.conf.keys import free_form, schema_keys
from gspo.conf.schema import VerdictConfig

README = Path(__file__).resolve().parent.parent / "README.md"
CONF = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("algo", "model", "task", "rollout", "logger")
HYDRA_FLAGS = {"--cfg", "job", "hydra", "all", "--resolve", "--info", "-m", "--multirun", "--help"}


DOCS = sorted((README.parent / "docs").glob("*.md"))  # the pages the README links for the details


def readme_commands() -> list[str]:
    """Each `gspo ...` command in the code blocks of the README and its docs/ pages, continuation lines joined,
    `<id>` -> `x`."""
    text = "\n".join(p.read_text() for p in [README, *DOCS])
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)
    commands = []
    for line in "\n".join(blocks).replace("\\\n", " ").splitlines():
        tokens = shlex.split(re.sub(r"<[^>]+>", "x", line), comments=True)
        if "gspo" in tokens and (tokens[0] == "gspo" or tokens[tokens.index("gspo") - 1] == "&&"):
            commands.append(shlex.join(tokens[tokens.index("gspo"):]))
    return commands


def _check_overrides(args: list[str]) -> None:
    overrides = [a for a in args if a not in HYDRA_FLAGS]
    for o in OverridesParser.create().parse_overrides(overrides):
        key = o.key_or_group
        if o.is_hydra_override() or key in GROUPS or key == "preset" or o.is_add():
            continue
        verdict = key.startswith("verdict.") and key.removeprefix("verdict.") in VerdictConfig.__dataclass_fields__
        assert key in schema_keys() or free_form(key.rpartition(".")[0]) or verdict, f"{key}: no such key"


def _parse(args: list[str]) -> None:
    """Parse `gspo <args>` as the CLI would, without running it."""
    command, name, ctx = typer.main.get_command(app), "gspo", None
    while hasattr(command, "get_command"):  # a group (typer's own click: duck-typed)
        sub, args = args[0], args[1:]
        parent = command.make_context(name, [sub], parent=ctx)
        command, name, ctx = command.get_command(parent, sub), sub, parent
        assert command is not None, f"no command {sub}"
    try:
        ctx = command.make_context(name, list(args), parent=ctx)
    except Exception as e:
        if type(e).__name__ == "Exit" and e.exit_code == 0:  # --help
            return
        raise
    if "overrides" in ctx.params:
        _check_overrides(list(ctx.params["overrides"] or []))


@pytest.mark.parametrize("line", readme_commands())
def test_readme_command_parses(line):
    _parse(shlex.split(line)[1:])


def test_the_readme_has_commands_and_the_check_can_fail():
    assert len(readme_commands()) > 30
    for bad in (["train", "train.step=5"], ["grade", "maths", "x.jsonl"], ["report", "--outt", "x"],
                ["grade", "math"]):
        with pytest.raises(Exception) as e:
            _parse(bad)
        assert type(e.value).__name__ in ("AssertionError", "NoSuchOption", "MissingParameter"), repr(e.value)


@pytest.mark.parametrize("group", GROUPS)
def test_groups_table_names_every_preset(group):
    (row,) = [ln for ln in README.read_text().splitlines() if ln.startswith(f"| `{group}=` |")]
    presets = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    assert all(f"`{p}`" in row.split("|")[2] for p in presets), (presets, row)


def _documented() -> list[re.Pattern]:
    """The metric names in README backticks, `{a,b}` expanded, `<task>` and `*` as wildcards."""
    names = []
    for name in re.findall(r"`([a-z_]+/[^`\s]+)`", README.read_text()):
        alternatives = re.search(r"\{([^}]+)\}", name)
        parts = [name] if not alternatives else [name.replace(alternatives[0], a)
                                                 for a in alternatives[1].split(",")]
        names += [re.compile(re.sub(r"<[^>]+>|\\\*", "[^ ]+", re.escape(p)) + "$") for p in parts]
    return names


def test_every_metric_a_run_logs_is_documented(finished_run):
    import json

    logged = set()
    for line in (finished_run / "metrics.jsonl").read_text().splitlines():
        logged |= set(json.loads(line)) - {"step"}
    documented = _documented()
    missing = sorted(k for k in logged if not any(p.match(k) for p in documented))
    assert not missing, f"logged but not in the README: {missing}"
