"""GPU tests (`pytest -m gpu`), skipped without CUDA: `gspo train` on a CUDA device for a few steps.

On the embedded model (TINY) and on a randomly initialised model of Qwen3-0.6B's shape (no hub access),
under fp32 and bf16, with the hf engine and with vLLM (when installed), and a checkpoint resumed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SHORT = ["device=cuda", "train.steps=2", "train.save_every=1", "train.eval_every=0"]


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _check_trained(run: Path, steps: int) -> None:
    rows = _rows(run)
    assert [r["step"] for r in rows] == list(range(steps + 1))
    for row in rows[1:]:
        assert all(math.isfinite(v) for k, v in row.items() if isinstance(v, float)), row
        assert row["ratio/token_max"] < 1e3  # (finite above; a norm is >= 0 by construction)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_train_the_embedded_model_on_cuda_and_resume(gspo, tmp_path, precision):
    run = gspo.train(tmp_path, precision, *SHORT, f"train.precision={precision}")
    _check_trained(run, 2)
    gspo.train(tmp_path, precision, *SHORT, f"train.precision={precision}", "train.steps=3", "resume=true")
    _check_trained(run, 3)


FAMILY = ["grpo", "gspo", "gspo_token", "gspo_token_step", "dapo", "dr_grpo", "gmpo", "cispo", "sapo", "dppo_tv",
          "dppo_kl", "opsm", "maxrl", "gdpo"]  # every preset of conf/algo but grpo_replay (it needs an MoE model)


@pytest.mark.parametrize("algo", FAMILY)
def test_every_algorithm_trains_in_bf16_on_cuda(gspo, tmp_path, algo):
    """Each member's loss, advantage and corrections on CUDA tensors in bf16 autocast, with a bf16 sampler whose
    log-probs stand for pi_old (so the ratios and the TIS correction see a real mismatch)."""
    run = gspo.train(tmp_path, algo, *SHORT, f"algo={algo}", "train.precision=bf16", "train.save_every=0",
                     "rollout.dtype=bfloat16", "algo.old_logp_source=engine", "algo.correction.kind=tis")
    _check_trained(run, 2)


def test_train_lora_adapters_on_cuda(gspo, tmp_path):
    run = gspo.train(tmp_path, "lora", *SHORT, "model.lora.r=8", "algo.kl_beta=0.05", "train.precision=bf16")
    _check_trained(run, 2)
    assert (run / "checkpoints" / "step_000002" / "adapter_config.json").exists()


@pytest.fixture(scope="module")
def qwen3_shaped(tmp_path_factory) -> Path:
    from gspo.evals.arith import ALPHABET
    from gspo.trainer.model.models import save_random_qwen3_0_6b

    return save_random_qwen3_0_6b(tmp_path_factory.mktemp("qwen3_0_6b_random"), ALPHABET, dtype="bfloat16")


@pytest.mark.parametrize(("dtype", "precision"), [("float32", "fp32"), ("bfloat16", "bf16")])
def test_train_a_random_qwen3_0_6b_shaped_model(gspo, tmp_path, qwen3_shaped, dtype, precision):
    run = gspo.train(tmp_path, precision, *SHORT, "model=hf", f"model.name={qwen3_shaped}", f"model.dtype={dtype}",
                     "model.chat_template=false", "model.gradient_checkpointing=true", f"train.precision={precision}")
    _check_trained(run, 2)


def test_train_with_vllm_rollouts(gspo, tmp_path):
    pytest.importorskip("vllm")
    run = gspo.train(tmp_path, "vllm", *SHORT, "rollout=vllm", "rollout.gpu_memory_utilization=0.3")
    _check_trained(run, 2)


def test_gradient_checkpointing_lowers_peak_memory_at_qwen3_0_6b_shape():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "perf"))
    from checkpointing_memory import measure

    plain = measure(checkpointing=False, n=4, t=256)
    checkpointed = measure(checkpointing=True, n=4, t=256)
    assert checkpointed["peak_above_base_gib"] < 0.5 * plain["peak_above_base_gib"], (plain, checkpointed)
