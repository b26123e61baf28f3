"""Training tasks: where prompts come from, how a completion is rewarded, what is held out for eval.

A task hands out prompts for each step (deterministically from the run's seed and the step, so a
resumed run sees what an uninterrupted one would) and grades completions with the same grader that
`gspo eval` uses (gspo.evals), so what is optimised is what is measured.
"""

from __future__ import annotations

import random
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.evals.arith import grade_arith, grade_steps, is_held_out, make_split, sample_problem
from gspo.evals.graders.math import grade_math
from gspo.evals.records import load_hub_rows, read_records
from gspo.trainer.code_task import code_task
from gspo.trainer.task_types import Item, Task, graded_by, hold_out, uniform_draw


def build_task(cfg) -> Task:
    """A Task from the `task` config group."""
    if cfg.kind == "arith":
        return _arith_task(cfg)
    if cfg.kind == "code":
        return code_task(cfg)
    return _math_task(cfg)


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
                _steps=grade_steps)


def _math_task(cfg) -> Task:
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
    return Item(cfg.prompt_template.format(question=row[cfg.question_field]), str(row[cfg.answer_field]))


def _load_rows(dataset: str, subset: str | None, split: str) -> list[tuple[int, dict]]:
    """(row number, row) of a local .jsonl/.json file or a Hugging Face dataset split."""
    path = Path(dataset).expanduser()
    if path.suffix in (".jsonl", ".json") or path.exists():
        return read_records(path)
    return list(enumerate(load_hub_rows(dataset, split=split, subsets=[subset]), start=1))
