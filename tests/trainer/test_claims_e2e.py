"""The paper's claims as runs: engine log-probs from an fp32 and a bf16 sampler, and a tiny MoE with and
without Routing Replay, each through `gspo train` on the TINY config."""

from __future__ import annotations

from conftest import LEARNING_SEED

from gspo.trainer.run.rundir import read_jsonl

MOE = ["model=tiny-moe", "model.tiny.num_experts=4", "model.tiny.moe_intermediate_size=16"]


def _rows(gspo, tmp_path, run_id, *overrides, seed=LEARNING_SEED):
    run = gspo.train(tmp_path, run_id, f"seed={seed}", "train.steps=1", *overrides)
    return read_jsonl(run / "metrics.jsonl")[1:]


def test_engine_logprobs_fp32_sampler_matches_the_trainer(gspo, tmp_path):
    (row,) = _rows(gspo, tmp_path, "fp32", "algo.old_logp_source=engine")
    assert row["mismatch/logp_abs_diff"] < 1e-5
    assert row["mismatch/seq_ratio_std"] < 1e-5 and row["mismatch/seq_out_of_band_frac"] == 0.0


def test_engine_logprobs_bf16_sampler_makes_a_real_mismatch(gspo, tmp_path):
    (row,) = _rows(gspo, tmp_path, "bf16", "algo.old_logp_source=engine", "rollout.dtype=bfloat16")
    assert row["mismatch/logp_abs_diff"] > 1e-4  # bf16 keeps 8 bits of mantissa: the gap is real
    assert row["mismatch/seq_ratio_std"] > 0
    # and the update ran on the engine's log-probs: the same draws with recomputed old log-probs give other ratios
    (recomputed,) = _rows(gspo, tmp_path, "bf16-recompute", "algo.old_logp_source=recompute", "rollout.dtype=bfloat16")
    assert recomputed["reward/mean"] == row["reward/mean"]  # the same samples
    assert abs(row["ratio/seq_mean"] - recomputed["ratio/seq_mean"]) > 1e-6


def test_tiny_moe_trains_and_replay_changes_the_update(gspo, tmp_path):
    # seed 1 with 4 prompts has groups with unequal rewards on tiny-moe, and lr 2e-2 moves the routers within the
    # step's minibatches, so routing decisions change (measured: 32% of them without replay)
    rows = {replay: _rows(gspo, tmp_path, f"moe-{replay}", *MOE, "algo=grpo", "train.lr=2e-2",
                          "train.prompts_per_step=4", f"algo.routing_replay={replay}", seed=1)[0]
            for replay in ("none", "trainer", "rollout")}
    for row in rows.values():
        assert 1.0 <= row["moe/load_max"] <= 4.0  # 1: balanced, 4: everything on one of the 4 experts
        assert any(k.startswith("diag/token_logratio_var") for k in row)
    assert rows["none"]["moe/routing_changed_frac"] > 0  # the routers moved ...
    # ... so replaying the old experts (R2) or the sampler's (R3) makes another update than the current routing
    for replay in ("trainer", "rollout"):
        assert rows[replay]["reward/mean"] == rows["none"]["reward/mean"]  # the same samples
        assert rows[replay]["policy/kl_old"] != rows["none"]["policy/kl_old"], replay
