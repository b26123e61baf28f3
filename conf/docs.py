"""The schema's one-line field docs (the comment at the end of each field's line in conf/schema.py), and
the resolved config printed with them: what `gspo train --cfg` shows.

    seed: 0  # every random draw of the run derives from (seed, step)
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import tokenize

import yaml
from omegaconf import DictConfig, OmegaConf

from gspo.conf import schema


@functools.cache
def field_docs() -> dict[str, str]:
    """{"ClassName.field": "its doc comment"} for every dataclass in conf/schema.py."""
    source = inspect.getsource(schema)
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    docs = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    docs[f"{node.name}.{stmt.target.id}"] = comments.get(stmt.end_lineno, "")
    return docs


def key_docs() -> dict[str, str]:
    """{"train.lr": doc, ...} for every key of the schema, nested keys dotted."""
    out: dict[str, str] = {}
    _walk(schema.Config, "", out)
    return out


def _walk(cls: type, prefix: str, out: dict[str, str]) -> None:
    docs = field_docs()
    hints = {f.name: f for f in dataclasses.fields(cls)}
    for name, f in hints.items():
        out[prefix + name] = docs.get(f"{cls.__name__}.{name}", "")
        sub = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if isinstance(sub, type) and dataclasses.is_dataclass(sub):
            _walk(sub, f"{prefix}{name}.", out)


def annotated_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, each schema key followed by its doc comment."""
    docs = key_docs()
    lines: list[str] = []
    _emit(OmegaConf.to_container(cfg, resolve=True), "", 0, docs, lines)
    return "\n".join(lines) + "\n"


def _emit(node: dict, prefix: str, depth: int, docs: dict[str, str], lines: list[str]) -> None:
    pad = "  " * depth
    for key, value in node.items():
        doc = docs.get(prefix + str(key))
        note = f"  # {doc}" if doc else ""
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{key}:{note}")
            _emit(value, f"{prefix}{key}.", depth + 1, docs, lines)
        else:
            text = yaml.safe_dump({key: value}, default_flow_style=True, width=10**6).strip()[1:-1]
            lines.append(f"{pad}{text}{note}")
