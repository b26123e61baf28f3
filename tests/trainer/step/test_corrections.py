"""Mismatch corrections through `gspo train` on TINY (algo.correction, trainer/step/advantages.corrected): refused
without engine log-probs; with an fp32 sampler (the sampler's log-probs are the trainer's to fp tolerance)
the weights are 1 and the update is the uncorrected one; with a bf16 sampler the weights move, the
advantages the update gets are the hand-computed A_i x c_it, and the run trains."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer import loop
from gspo.trainer.step.advantages import check_algorithm, correction_bounds
from gspo.trainer.tasks.registry import build_task
from tests.conftest import LEARNING_SEED, TINY

TWO_STEPS = (f"seed={LEARNING_SEED}", "train.steps=2", "train.eval_every=0", "logger.samples_per_step=8")
ENGINE = ("algo.old_logp_source=engine",)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("overrides, words", [
    (["algo.correction.kind=tis"], "needs algo.old_logp_source=engine (got auto)"),
    (["algo=gspo", "algo.correction.kind=mis", "algo.correction.level=token", *ENGINE],
     "use algo.correction.level=auto, sequence or geometric"),
    (["algo.correction.kind=geo_rs", "algo.correction.level=sequence", *ENGINE], "cannot apply (use auto or geometric)"),
])
def test_a_correction_without_its_inputs_is_one_error_line(overrides, words):
    cfg = compose_config([*TINY, *overrides])
    with pytest.raises(GspoError, match=re.escape(words)):
        check_algorithm(cfg.algo, build_task(cfg.task))


@pytest.mark.parametrize("algo, kind, level, bounds", [
    ("gspo", "tis", "geometric", (1.001, 0.999, 1.001)),  # GSPO's ratio is the geometric mean: so is its correction
    ("gmpo", "mis", "geometric", (1.001, 0.999, 1.001)),
    ("grpo", "tis", "token", (2.0, 0.5, 2.0)),
    ("grpo", "geo_rs", "geometric", (1.001, 0.999, 1.001)),
    # OPSM's ratio is GRPO's, per token, and it takes the [N, T] advantages a token weight makes (TRL combines OPSM
    # with its token-level TIS): auto is token, as every token-ratio algorithm
    ("opsm", "tis", "token", (2.0, 0.5, 2.0)),
    # MIS at token level is IcePop: its band [0.5, 5] (arXiv 2510.18855, verl decoupled_token_icepop); mask keeps [0.5, 2]
    ("grpo", "mis", "token", (2.0, 0.5, 5.0)),
    ("grpo", "mask", "token", (2.0, 0.5, 2.0)),
])
def test_the_level_follows_the_algorithms_ratio_and_each_level_has_its_bounds(algo, kind, level, bounds):
    cfg = compose_config([*TINY, f"algo={algo}", f"algo.correction.kind={kind}", *ENGINE])
    check_algorithm(cfg.algo, build_task(cfg.task))  # `algo=gspo algo.correction.kind=tis` just works
    b = correction_bounds(cfg.algo)
    assert (b.level, (b.cap, b.low, b.high)) == (level, bounds)
    explicit = correction_bounds(compose_config([*TINY, f"algo={algo}", f"algo.correction.kind={kind}",
                                                 "algo.correction.level=sequence" if kind != "geo_rs" else
                                                 "algo.correction.level=geometric", "algo.correction.cap=3.0",
                                                 *ENGINE]).algo)
    assert explicit.cap == 3.0 and explicit.level == ("geometric" if kind == "geo_rs" else "sequence")


@pytest.mark.slow  # three short TINY runs
@pytest.mark.parametrize("kind", ["tis", "mis"])
def test_fp32_sampler_weights_are_one_and_the_update_is_the_uncorrected_one(gspo, tmp_path, kind):
    plain = _rows(gspo.train(tmp_path, "plain", *TWO_STEPS, "algo=grpo", "algo.old_logp_source=recompute")
                  / "metrics.jsonl")
    fixed = _rows(gspo.train(tmp_path, kind, *TWO_STEPS, "algo=grpo", *ENGINE, f"algo.correction.kind={kind}")
                  / "metrics.jsonl")
    for a, b in zip(plain[1:], fixed[1:], strict=True):
        assert b["correction/weight_mean"] == pytest.approx(1.0, abs=1e-5)
        assert b["correction/weight_max"] == pytest.approx(1.0, abs=1e-5)
        assert b.get("correction/truncated_frac", 0.0) == 0.0 and b.get("correction/masked_frac", 0.0) == 0.0
        for key in ("loss/policy", "optim/grad_norm", "ratio/token_mean", "clip/token_frac", "reward/mean"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_bf16_sampler_tis_weights_by_hand_and_the_run_trains(gspo, tmp_path, monkeypatch):
    batches = []
    real = loop.run_updates
    monkeypatch.setattr(loop, "run_updates", lambda ctx, batch, **k: (batches.append(batch), real(ctx, batch, **k))[1])
    run = gspo.train(tmp_path, "tis", *TWO_STEPS, "algo=grpo", *ENGINE, "rollout.dtype=bfloat16",
                     "algo.correction.kind=tis", "algo.correction.cap=1.001")
    rows = _rows(run / "metrics.jsonl")[1:]
    assert [r["step"] for r in rows] == [1, 2] and json.loads((run / "run.json").read_text())["status"] == "finished"
    for row in rows:
        assert row["correction/weight_max"] > 1.001 and row["correction/weight_mean"] != pytest.approx(1.0, abs=1e-6)
        assert 0 < row["correction/truncated_frac"] < 1
        assert math.isfinite(row["loss/policy"])
    assert rows[0]["optim/grad_norm"] > 0  # LEARNING_SEED's step 1 has a mixed group: the weights move
    # step 1's advantages: A_i (group-normalised rewards) x min(exp(old_trainer - engine), cap), per token
    batch = batches[0]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()][:8]
    rewards = torch.tensor([s["reward"] for s in samples], dtype=torch.float64).view(2, 4)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)).flatten()
    mask = batch.rollout.completion_mask.bool()
    weight = torch.exp(batch.old_logp.double() - batch.rollout.engine_logp.double()).clamp(max=1.001)
    want = adv[:, None] * weight
    assert adv.abs().sum() > 0, "LEARNING_SEED: a group with a right and a wrong answer at step 1"
    torch.testing.assert_close(batch.advantages.double()[mask], want[mask], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_bf16_sampler_mis_at_sequence_level_masks_sequences(gspo, tmp_path):
    run = gspo.train(tmp_path, "mis", *TWO_STEPS, "algo=gspo", *ENGINE, "rollout.dtype=bfloat16",
                     "algo.correction.kind=mis", "algo.correction.level=sequence", "algo.correction.low=0.9999",
                     "algo.correction.high=1.0001")
    for row in _rows(run / "metrics.jsonl")[1:]:
        assert 0 < row["correction/masked_frac"] <= 1 and math.isfinite(row["loss/policy"])
