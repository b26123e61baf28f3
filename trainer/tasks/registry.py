"""Training tasks: where prompts come from, how a completion is rewarded, what is held out for eval.

A task hands out prompts for each step (deterministically from the run's seed and the step, so a
resumed run sees what an uninterrupted one would) and grades completions with the same grader that
`gspo eval` uses (gspo.evals), so what is optimised is what is measured.

The task registry, as algorithms and benchmarks have theirs: `task.kind` names a registered builder
(`register_task(kind, build, ...)`, `build(cfg.task) -> Task`), and the kinds a config may name are the
`kind:` of the `task/` presets of every config source (conf/compose.py). A new task kind is one module
(its builder), one `register_task` line and one yaml in `conf/task/`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gspo.conf.errors import GspoError
from gspo.evals.arith import extract_answer, grade_arith, grade_steps, is_held_out, make_split, sample_problem
from gspo.evals.graders.math import grade_math
from gspo.evals.records import load_hub_rows, read_records
from gspo.trainer.tasks.code_task import code_task
from gspo.trainer.tasks.task_types import (
    Item,
    Task,
    graded_by,
    hold_out,
    is_local,
    require_dataset,
    uniform_draw,
)

# What the embedded model (model=tiny, which knows only arithmetic) makes of a task kind:
TRAINS, WARNS, REFUSES = "trains", "warns", "refuses"


@dataclass(frozen=True)
class TaskKind:
    kind: str
    build: Callable[[Any], Task]  # cfg.task -> Task; bad data fails here, before anything is written
    on_tiny: str = REFUSES  # TRAINS: its own task; WARNS: runs, as an end-to-end check; REFUSES: a one-line error
    bench_options: Mapping[str, Callable[[Any], dict]] = field(default_factory=dict)  # bench -> its options
    #   from cfg.task, where the task shapes a benchmark of the same problems (arith: digits, ops, size)
    hub_dataset: Callable[[Any], str | None] = lambda _task: None  # cfg.task -> the Hugging Face dataset it reads
    #   (None: none, or a local file): what `gspo fetch` downloads and an offline run checks for first


TASKS: dict[str, TaskKind] = {}


def register_task(kind: str, build: Callable[[Any], Task], *, on_tiny: str = REFUSES,
                  bench_options: Mapping[str, Callable[[Any], dict]] | None = None,
                  hub_dataset: Callable[[Any], str | None] | None = None) -> None:
    """Make `task.kind=<kind>` build its Task with `build(cfg.task)`; `hub_dataset(cfg.task)`: the hub dataset
    it reads (None: none)."""
    if kind in TASKS:
        raise ValueError(f"task kind {kind!r} is already registered")
    if on_tiny not in (TRAINS, WARNS, REFUSES):
        raise ValueError(f"task kind {kind!r}: on_tiny={on_tiny!r}, use {TRAINS}, {WARNS} or {REFUSES}")
    TASKS[kind] = TaskKind(kind, build, on_tiny, dict(bench_options or {}),
                           *([hub_dataset] if hub_dataset is not None else []))


def task_kind(kind: str) -> TaskKind:
    """The registered kind; a one-line error naming the known ones otherwise (a preset whose kind no module registers)."""
    if kind not in TASKS:
        raise GspoError(f"task.kind={kind!r} has no registered task; known: {', '.join(sorted(TASKS))}")
    return TASKS[kind]


def build_task(cfg) -> Task:
    """A Task from the `task` config group."""
    return task_kind(cfg.kind).build(cfg)


def bench_options(cfg, bench: str) -> dict:
    """Options benchmark `bench` takes from the run's task (e.g. the arith bench from an arith task), else none."""
    make = task_kind(cfg.task.kind).bench_options.get(bench)
    return make(cfg.task) if make is not None else {}


def _arith_task(cfg) -> Task:
    opts = {"min_digits": cfg.min_digits, "max_digits": cfg.max_digits, "ops": cfg.ops}
    held_out = [Item(p.prompt, p.gold) for p in make_split("test", cfg.eval_size, seed=0, **opts)]

    def draw(rng: random.Random, n: int) -> list[Item]:
        out: list[Item] = []
        while len(out) < n:
            p = sample_problem(rng, **opts)
            if not is_held_out(p):
                out.append(Item(p.prompt, p.gold))
        return out

    return Task(name=cfg.name, eval_items=held_out, _draw=draw, _score=graded_by(grade_arith), grader="arith",
                _steps=grade_steps, _components=arith_components)


def arith_components(response: str, gold: str) -> tuple[float, float]:
    """(correctness, format) of an arith answer: 1 if right, and 1 if it ends in a `#<integer>` answer at all."""
    return float(grade_arith(response, gold)), float(extract_answer(response) is not None)


def _math_task(cfg) -> Task:
    require_dataset(cfg)
    rows = _load_rows(cfg.dataset, cfg.subset, cfg.split)
    items = [_math_item(cfg, row, i) for i, row in rows]
    if cfg.eval_split:
        held_out = [_math_item(cfg, r, i) for i, r in _load_rows(cfg.dataset, cfg.subset, cfg.eval_split)]
        held_out = held_out[: cfg.eval_size]
    else:
        items, held_out = hold_out(items, cfg.eval_size)
    return Task(name=cfg.name, eval_items=held_out, _draw=uniform_draw(items), _score=graded_by(grade_math), grader="math")


def _math_item(cfg, row: dict, number: int) -> Item:
    missing = [f for f in (cfg.question_field, cfg.answer_field) if f not in row]
    if missing:
        raise GspoError(f"task.dataset row {number} has no field {missing[0]!r} (fields: {', '.join(row)}); "
                        f"set task.question_field / task.answer_field")
    empty = [f for f in (cfg.question_field, cfg.answer_field) if row[f] is None]
    if empty:
        raise GspoError(f"task.dataset row {number}: field {empty[0]!r} is null; give it a value or drop the row")
    return Item(fill_template(cfg.prompt_template, row[cfg.question_field]), str(row[cfg.answer_field]))


def fill_template(template: str, question) -> str:
    """task.prompt_template with {question} filled in (str.format); any other field, or a lone brace, is one
    line that says how to write literal braces."""
    try:
        return template.format(question=question)
    except KeyError as e:
        what = f"names {{{e.args[0]}}}"
    except IndexError:
        what = "has a bare {}"
    except (ValueError, AttributeError) as e:
        what = f"is not a template ({e})"
    raise GspoError(f"task.prompt_template={template!r} {what}: the only field is {{question}}; write a literal "
                    "brace as {{ or }} (as in \\boxed{{}})")


def _load_rows(dataset: str, subset: str | None, split: str) -> list[tuple[int, dict]]:
    """(row number, row) of a local .jsonl/.json file or a Hugging Face dataset split."""
    if is_local(dataset):
        return read_records(Path(dataset).expanduser())
    return list(enumerate(load_hub_rows(dataset, split=split, subsets=[subset]), start=1))


def _arith_bench(task) -> dict:
    return {"min_digits": task.min_digits, "max_digits": task.max_digits, "ops": task.ops, "n": task.eval_size}


register_task("arith", _arith_task, on_tiny=TRAINS, bench_options={"arith": _arith_bench})
def dataset_on_hub(cfg) -> str | None:
    """`task.dataset` when it names a Hugging Face dataset (math, code), None when unset or a local file."""
    return cfg.dataset if cfg.dataset and not is_local(cfg.dataset) else None


register_task("math", _math_task, hub_dataset=dataset_on_hub)
register_task("code", code_task, on_tiny=WARNS, hub_dataset=dataset_on_hub)
