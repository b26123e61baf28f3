"""Training tasks: where prompts come from, how a completion is rewarded, what is held out for eval.

A task hands out prompts for each step (deterministically from the run's seed and the step, so a
resumed run sees what an uninterrupted one would) and grades completions with the same grader that
`gspo eval` uses (gspo.evals), so what is optimised is what is measured.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.evals.arith import grade_arith, grade_steps, is_held_out, make_split, sample_problem
from gspo.evals.benchmarks import load_hub_rows, read_records


@dataclass(frozen=True)
class Item:
    prompt: str
    gold: str  # the answer, or (code) the problem's id
    system: str | None = None  # a system message for chat templates (the code benchmarks' own)


Scorer = Callable[[list[str], list[str]], list[float]]  # (responses, golds) -> rewards
StepGrader = Callable[[str, str], list[tuple[int, float]]]  # (prompt, response) -> (end char, reward) per step


@dataclass
class Task:
    name: str  # metric names: reward/<name>, eval/<name>/accuracy
    eval_items: list[Item]
    _draw: Callable[[random.Random, int], list[Item]]
    _score: Scorer
    _steps: StepGrader | None = None  # grades each worked step (the `step` advantage estimator)

    def train_items(self, *, seed: int, step: int, n: int) -> list[Item]:
        """The `n` prompts of training step `step`; the same for the same (seed, step)."""
        return self._draw(random.Random(f"{seed}:train:{step}"), n)

    def rewards(self, responses: list[str], golds: list[str]) -> list[float]:
        """Rewards of a batch of responses, in order (a code task grades them in parallel)."""
        return self._score(responses, golds)

    @property
    def has_steps(self) -> bool:
        return self._steps is not None

    def steps(self, prompts: list[str], responses: list[str]) -> list[list[tuple[int, float]]]:
        """Per response, each worked step's (end character, reward); see gspo.evals.arith.grade_steps."""
        if self._steps is None:
            raise GspoError(f"task {self.name} does not grade worked steps")
        return [self._steps(p, r) for p, r in zip(prompts, responses, strict=True)]


def graded_by(grader: Callable[[str, str], bool]) -> Scorer:
    """A scorer giving 1 where `grader(response, gold)` holds, else 0."""
    return lambda responses, golds: [float(grader(r, g)) for r, g in zip(responses, golds, strict=True)]


def hold_out(items: list[Item], eval_size: int) -> tuple[list[Item], list[Item]]:
    """(training items, held-out items): `eval_size` items drawn by a fixed seed, kept in their order."""
    if len(items) <= eval_size:
        raise GspoError(f"task.dataset has {len(items)} rows: too few to hold out task.eval_size={eval_size}")
    order = list(range(len(items)))
    random.Random("heldout").shuffle(order)
    held = set(order[:eval_size])
    return [it for i, it in enumerate(items) if i not in held], [items[i] for i in sorted(held)]


def uniform_draw(items: list[Item]) -> Callable[[random.Random, int], list[Item]]:
    return lambda rng, n: [items[rng.randrange(len(items))] for _ in range(n)]


def build_task(cfg) -> Task:
    """A Task from the `task` config group."""
    if cfg.kind == "arith":
        return _arith_task(cfg)
    if cfg.kind == "code":
        from gspo.trainer.code_task import code_task

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

    return Task(name=cfg.name, eval_items=held_out, _draw=draw, _score=graded_by(grade_arith), _steps=grade_steps)


def _math_task(cfg) -> Task:
    from gspo.evals import grade_math

    rows = _load_rows(cfg.dataset, cfg.subset, cfg.split)
    items = [_math_item(cfg, row, i) for i, row in rows]
    if cfg.eval_split:
        held_out = [_math_item(cfg, r, i) for i, r in _load_rows(cfg.dataset, cfg.subset, cfg.eval_split)]
        held_out = held_out[: cfg.eval_size]
    else:
        items, held_out = hold_out(items, cfg.eval_size)
    return Task(name=cfg.name, eval_items=held_out, _draw=uniform_draw(items), _score=graded_by(grade_math))


def _math_item(cfg, row: dict, number: int) -> Item:
    missing = [f for f in (cfg.question_field, cfg.answer_field) if f not in row or row[f] is None]
    if missing:
        raise GspoError(f"task.dataset row {number} has no field {missing[0]!r} (fields: {', '.join(row)}); "
                        f"set task.question_field / task.answer_field")
    return Item(cfg.prompt_template.format(question=row[cfg.question_field]), str(row[cfg.answer_field]))


def _load_rows(dataset: str, subset: str | None, split: str) -> list[tuple[int, dict]]:
    """(row number, row) of a local .jsonl/.json file or a Hugging Face dataset split."""
    path = Path(dataset).expanduser()
    if path.suffix in (".jsonl", ".json") or path.exists():
        return read_records(path)
    return list(enumerate(load_hub_rows(dataset, split=split, subsets=[subset]), start=1))
