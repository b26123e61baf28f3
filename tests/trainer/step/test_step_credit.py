"""Advantage estimators and algorithms that own their options, end to end:

- the `step` estimator (per-token credit from each graded scratchpad step), hand-computed;
- arith's step grader and the char-to-token mapping of step ends;
- GSPO-token with per-step credit (algo=gspo_token_step) trains on the embedded task and its update
  differs from GSPO's on the same rollout;
- a throwaway algorithm, registered here with an option and a metric of its own and declared by one
  yaml file on Hydra's search path, trains a step through `gspo train` without a line of the trainer
  knowing it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from gspo.algos import ALGOS, estimate, policy_loss, register, step_advantages
from gspo.evals.arith import ALPHABET, ArithProblem, grade_steps
from gspo.trainer import loop
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.model.models import build_char_tokenizer
from gspo.trainer.step.advantages import step_tensors
from gspo.vocab.reductions import SEQ_MEAN
from tests.conftest import LEARNING_SEED

ONE_STEP = (f"seed={LEARNING_SEED}", "train.steps=1", "train.eval_every=0", "logger.progress=false",
            "logger.samples_per_step=8")


def test_step_advantages_by_hand():
    # one group of two; sequence 0: steps end at t=1 (right) and t=3 (wrong); sequence 1: t=2, t=3 (right)
    rewards = torch.tensor([[0, 1.0, 0, 0], [0, 0, 1.0, 1.0]])
    ends = torch.tensor([[0, 1, 0, 1], [0, 0, 1, 1]]).bool()
    # step rewards {1, 0, 1, 1}: mean 0.75, Bessel std 0.5 -> normalised 0.5 (right), -1.5 (wrong)
    # A_it = sum of the normalised rewards of the steps ending at or after t
    want = torch.tensor([[0.5 - 1.5, 0.5 - 1.5, -1.5, -1.5], [1.0, 1.0, 1.0, 0.5]])
    torch.testing.assert_close(step_advantages(rewards, ends, 2, eps=0.0), want, atol=1e-6, rtol=0)
    # scale none: centred only (0.25, -0.75)
    torch.testing.assert_close(step_advantages(rewards, ends, 2, scale="none"),
                               torch.tensor([[-0.5, -0.5, -0.75, -0.75], [0.5, 0.5, 0.5, 0.25]]))
    # all steps right: no signal, exactly 0; and the registry reaches the same function
    assert torch.equal(step_advantages(ends.float(), ends, 2), torch.zeros(2, 4))
    torch.testing.assert_close(estimate("step", torch.zeros(2), 2, eps=0.0, scale="std", steps=(rewards, ends)), want,
                               atol=1e-6, rtol=0)


def test_grade_steps_credits_each_worked_line():
    problem = ArithProblem(482, 7, "*")  # 2*7+0=14|8*7+1=57|4*7+5=33|#3374
    assert grade_steps(problem.prompt, problem.solution) == [(9, 1.0), (18, 1.0), (27, 1.0), (32, 1.0)]
    wrong_middle = "2*7+0=14|8*7+1=56|4*7+5=33|#3364"
    assert [r for _, r in grade_steps(problem.prompt, wrong_middle)] == [1.0, 0.0, 1.0, 0.0]
    assert [r for _, r in grade_steps(problem.prompt, "2*7+0=14|#14")] == [1.0, 0.0]


def test_step_ends_land_on_the_tokens_that_finish_each_step():
    tok = build_char_tokenizer(ALPHABET)
    text = "8+9+0=17|4+3+1=07|#77"
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    n = len(ids)
    rollout = Rollout(input_ids=torch.tensor([ids + [tok.pad_token_id] * 2]), attention_mask=torch.ones(1, n + 2),
                      completion_mask=torch.tensor([[1.0] * n + [0.0, 0.0]]), texts=[text],
                      truncated=torch.tensor([False]))
    rewards, ends = step_tensors([grade_steps("48+39=", text)], rollout, tok)
    assert ends[0].nonzero().flatten().tolist() == [8, 17, n - 1]  # the two '|' and the end-of-sequence token
    assert rewards[0, [8, 17, n - 1]].tolist() == [1.0, 0.0, 0.0]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_gspo_token_with_step_credit_differs_from_gspo(gspo, tmp_path, monkeypatch):
    seen = []
    real = loop.run_updates
    monkeypatch.setattr(loop, "run_updates", lambda ctx, batch, **k: (seen.append(batch.advantages.clone()), real(ctx, batch, **k))[1])
    runs = {algo: gspo.train(tmp_path, algo, *ONE_STEP, f"algo={algo}") for algo in ("gspo", "gspo_token_step")}
    samples = {a: [(s["completion"], s["reward"]) for s in _rows(r / "samples.jsonl")] for a, r in runs.items()}
    assert samples["gspo"] == samples["gspo_token_step"]  # the same rollout ...
    group, step = seen
    assert group.dim() == 1 and step.dim() == 2
    per_token = [row[m.bool()] for row, m in zip(step, _mask(step), strict=True)]
    assert any(len(set(v.tolist())) > 1 for v in per_token)  # credit varies inside a sequence
    rows = {a: _rows(r / "metrics.jsonl")[1] for a, r in runs.items()}
    assert rows["gspo"]["loss/policy"] != pytest.approx(rows["gspo_token_step"]["loss/policy"], abs=1e-6)  # ... another update
    assert rows["gspo"]["clip/token_frac"] != rows["gspo_token_step"]["clip/token_frac"] or \
        rows["gspo"]["ratio/seq_mean"] != rows["gspo_token_step"]["ratio/seq_mean"]


def _mask(adv: torch.Tensor) -> torch.Tensor:
    return adv != 0


def test_step_credit_needs_an_algorithm_that_takes_token_advantages(gspo, tmp_path):
    result = gspo.invoke("train", "-q", f"output_dir={tmp_path}", "algo=gspo", "algo.advantage=step")
    assert "which gspo does not take: use algo=gspo_token_step" in str(result.exception)  # main() prints it, exit 2
    assert not any(tmp_path.iterdir())


@dataclass(frozen=True)
class ScaledOptions:
    scale: float = 1.0  # multiplies GSPO's loss

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ValueError(f"scale must be > 0, got {self.scale}")


def scaled_gspo(*, logp, old_logp, advantages, mask, clip_low, clip_high, seq_denominator=None, scale=1.0):
    """A throwaway algorithm: GSPO's loss times `scale`, with a metric of its own."""
    loss, metrics = policy_loss("gspo", logp=logp, old_logp=old_logp, advantages=advantages, mask=mask,
                                clip_low=clip_low, clip_high=clip_high, seq_denominator=seq_denominator)
    return scale * loss, {**metrics, "loss/policy": scale * metrics["loss/policy"],
                          "toy/scale": torch.tensor(scale)}


def test_a_new_algorithm_is_one_function_one_registry_line_and_one_yaml(gspo, tmp_path):
    conf = tmp_path / "conf"
    (conf / "algo").mkdir(parents=True)
    (conf / "algo" / "toy.yaml").write_text("name: toy\nclip_low: 3.0e-4\nclip_high: 4.0e-4\noptions:\n  scale: 3.0\n")
    register("toy", options=ScaledOptions, metrics={**ALGOS["gspo"].metrics, "toy/scale": SEQ_MEAN})(scaled_gspo)
    try:
        search = f"hydra.searchpath=[file://{conf}]"
        one_update = "train.minibatches=1"  # the loss is logged before any update changes the weights
        run = gspo.train(tmp_path, "toy", *ONE_STEP, one_update, search, "algo=toy")
        base = gspo.train(tmp_path, "base", *ONE_STEP, one_update, "algo=gspo")
        row, base_row = _rows(run / "metrics.jsonl")[1], _rows(base / "metrics.jsonl")[1]
        assert row["toy/scale"] == 3.0  # the algorithm's own option and metric went through the trainer
        assert row["loss/policy"] == pytest.approx(3.0 * base_row["loss/policy"], rel=1e-5, abs=1e-9)
        bad = gspo.invoke("train", "-q", f"output_dir={tmp_path / 'bad'}", search, "algo=toy", "algo.options.scale=-1")
        assert "algo.options: scale must be > 0" in str(bad.exception) and not (tmp_path / "bad").exists()
    finally:
        del ALGOS["toy"]
