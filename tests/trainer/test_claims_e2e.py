"""The paper's claims as runs: engine log-probs from an fp32 and a bf16 sampler, and a tiny MoE with and
without Routing Replay, each through `gspo train` on the TINY config."""

from __future__ import annotations

import pytest
from conftest import LEARNING_SEED

from gspo.trainer.rundir import read_jsonl

MOE = ["model=tiny-moe", "model.tiny.num_experts=4", "model.tiny.moe_intermediate_size=16"]


def _rows(gspo, tmp_path, run_id, *overrides):
    run = gspo.train(tmp_path, run_id, f"seed={LEARNING_SEED}", "train.steps=1", *overrides)
    return read_jsonl(run / "metrics.jsonl")[1:]


def test_engine_logprobs_fp32_sampler_matches_the_trainer(gspo, tmp_path):
    (row,) = _rows(gspo, tmp_path, "fp32", "algo.old_logp_source=engine")
    assert row["mismatch/logp_abs_diff"] < 1e-5
    assert row["mismatch/seq_ratio_std"] < 1e-5 and row["mismatch/seq_out_of_band_frac"] == 0.0


def test_engine_logprobs_bf16_sampler_makes_a_real_mismatch(gspo, tmp_path):
    (row,) = _rows(gspo, tmp_path, "bf16", "algo.old_logp_source=engine", "rollout.dtype=bfloat16")
    assert row["mismatch/logp_abs_diff"] > 1e-4  # bf16 keeps 8 bits of mantissa: the gap is real
    assert row["mismatch/seq_ratio_std"] > 0
    assert row["ratio/seq_mean"] > 0  # and the update ran on the engine's log-probs


@pytest.mark.parametrize("replay", ["none", "trainer", "rollout"])
def test_tiny_moe_trains_with_and_without_replay(gspo, tmp_path, replay):
    (row,) = _rows(gspo, tmp_path, f"moe-{replay}", *MOE, "algo=grpo", f"algo.routing_replay={replay}")
    assert 0.0 <= row["moe/routing_changed_frac"] <= 1.0
    assert 1.0 <= row["moe/load_max"] <= 4.0  # 1: balanced, 4: everything on one of the 4 experts
    assert any(k.startswith("diag/token_logratio_var") for k in row)
