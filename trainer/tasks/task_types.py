"""What a training task is: its items (prompt, gold), how it draws a step's prompts, how it rewards a
completion and, where it can, grades each worked step; and the helpers task builders share."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gspo.conf.errors import GspoError


@dataclass(frozen=True)
class Item:
    prompt: str
    gold: str  # the answer, or (code) the problem's id
    system: str | None = None  # a system message for chat templates (the code benchmarks' own)


def prompt_text(tokenizer, prompt: str, system: str | None, *, chat: bool) -> str:
    """What the model is given: the prompt as is, or with `chat` in the tokenizer's chat template with the
    system message (training prompts and benchmark prompts alike)."""
    if not chat:
        return prompt
    messages = [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


Scorer = Callable[[list[str], list[str]], list[float]]  # (responses, golds) -> rewards
StepGrader = Callable[[str, str], list[tuple[int, float]]]  # (prompt, response) -> (end char, reward) per step
Components = Callable[[str, str], tuple[float, ...]]  # (response, gold) -> the reward's components (GDPO)


@dataclass
class Task:
    name: str  # metric names: reward/<name>, eval/<name>/accuracy
    eval_items: list[Item]
    _draw: Callable[[random.Random, int], list[Item]]
    _score: Scorer
    grader: str  # what rewards it, as samples.jsonl says for `gspo grade`: arith, math or code
    _steps: StepGrader | None = None  # grades each worked step (the `step` advantage estimator)
    _components: Components | None = None  # the reward's components (the `gdpo` advantage estimator)

    def train_items(self, *, seed: int, step: int, n: int, draw: int = 0) -> list[Item]:
        """The `n` prompts of training step `step`; the same for the same (seed, step). `draw` k > 0: the k-th
        further round of the step (dynamic sampling's refills), its own prompts from (seed, step, k)."""
        return self._draw(random.Random(f"{seed}:train:{step}" + (f":{draw}" if draw else "")), n)

    def rewards(self, responses: list[str], golds: list[str]) -> list[float]:
        """Rewards of a batch of responses, in order (a code task grades them in parallel)."""
        return self._score(responses, golds)

    @property
    def has_components(self) -> bool:
        return self._components is not None

    def components(self, responses: list[str], golds: list[str]) -> list[tuple[float, ...]]:
        """Per response, its reward's components (arith: correctness, format), for GDPO's normalisation."""
        if self._components is None:
            raise GspoError(f"task {self.name} has no reward components")
        return [self._components(r, g) for r, g in zip(responses, golds, strict=True)]

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


def is_local(dataset: str) -> bool:
    """`task.dataset` names a local file (it exists, or ends in .jsonl / .json), not a Hugging Face dataset id."""
    return Path(dataset).expanduser().exists() or dataset.endswith((".jsonl", ".json"))


def require_dataset(cfg) -> None:
    """A task read from a dataset fails, before anything is written, when `task.dataset` is unset."""
    if not cfg.dataset:
        raise GspoError(f"task.dataset is required for a {cfg.kind} task: a Hugging Face id or a local .jsonl")
