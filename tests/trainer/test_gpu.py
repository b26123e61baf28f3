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


def _cuda_pair(model, tokenizer, prompts, *, seed, max_new_tokens, **kw):
    """The growing cache's eager loop and the CUDA graph's replays on the same prompts: (dynamic, static, engine)."""
    from gspo.trainer.engines.hf_engine import HFEngine

    opts = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": max_new_tokens, "batch_size": 256,
            "want_logprobs": True} | kw
    engine = HFEngine(model, tokenizer, kv_cache="static", **opts)
    static = engine.generate(prompts, seed=seed)
    dynamic = HFEngine(model, tokenizer, kv_cache="dynamic", **opts).generate(prompts, seed=seed)
    return dynamic, static, engine


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8)])
def test_graph_decoding_draws_the_eager_tokens_on_cuda(temperature, top_p):
    """The captured decode step (one CUDA graph per token) draws token for token what the eager loop draws, in
    fp32; its log-probs are the trainer's within 1e-5 (the first update's ratio is 1); a second generation of
    the same bucket replays the same graph."""
    from gspo.trainer.model.logprobs import completion_logprobs
    from tests.trainer.engines.test_rollout import _tiny
    from tests.trainer.engines.test_static_decode import WIDE

    model, tokenizer = _tiny()
    model.cuda()
    dynamic, static, engine = _cuda_pair(model, tokenizer, WIDE * 8, seed=3, max_new_tokens=40,
                                         temperature=temperature, top_p=top_p)
    assert engine.static.captured  # captured, not the eager fallback
    assert torch.equal(dynamic.input_ids, static.input_ids)
    torch.testing.assert_close(static.engine_logp, dynamic.engine_logp, rtol=0, atol=1e-5)
    with torch.no_grad():
        logp = completion_logprobs(model, static.input_ids, static.attention_mask, static.n_completion,
                                   temperature=temperature, top_p=top_p, chunk=64)
    mask = static.completion_mask.bool()
    assert (torch.exp(logp - static.engine_logp)[mask] - 1).abs().max() < 1e-5
    graphs = dict(engine.static.captured)
    again = engine.generate(WIDE * 8, seed=3)
    assert torch.equal(again.input_ids, static.input_ids)
    assert all(engine.static.captured[shape] is graph for shape, graph in graphs.items())  # replayed, not recaptured


def test_graphs_of_growing_windows_and_compacted_batches_draw_the_eager_tokens_on_cuda():
    """One graph per (rows, width): windows of 16 positions and batches halved down to 2 rows (issue 61) replay
    token for token what the eager loop draws in fp32, rows ending at different tokens; a second generation
    replays the graphs it captured."""
    from tests.trainer.engines.test_rollout import _tiny
    from tests.trainer.engines.test_static_decode import WIDE

    model, tokenizer = _tiny()
    model.cuda()
    dynamic, static, engine = _cuda_pair(model, tokenizer, WIDE * 8, seed=3, max_new_tokens=60, temperature=0.7,
                                         window=16, min_rows=2)
    assert torch.equal(dynamic.input_ids, static.input_ids)
    torch.testing.assert_close(static.engine_logp, dynamic.engine_logp, rtol=0, atol=1e-5)
    graphs = dict(engine.static.captured)
    shapes = set(graphs)
    assert len({rows for rows, _ in shapes}) >= 2 and len({width for _, width in shapes}) >= 2, shapes
    again = engine.generate(WIDE * 8, seed=3)
    assert torch.equal(again.input_ids, static.input_ids) and shapes <= set(engine.static.captured)
    assert all(engine.static.captured[shape] is graph for shape, graph in graphs.items())  # replayed, not recaptured


def _qwen3_0_6b_shape(dtype):
    from gspo.evals.arith import ALPHABET
    from gspo.trainer.model.models import QWEN3_0_6B as Q
    from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3

    tokenizer = build_char_tokenizer(ALPHABET, size=Q["vocab_size"])
    model = build_tiny_qwen3(Q["vocab_size"], hidden_size=Q["hidden_size"], num_layers=Q["num_layers"],
                             intermediate_size=Q["intermediate_size"], num_heads=Q["num_heads"],
                             num_kv_heads=Q["num_kv_heads"], head_dim=Q["head_dim"], seed=0, max_positions=4096)
    return model.to("cuda", dtype).eval(), tokenizer


def test_graph_decoding_at_qwen3_0_6b_shape_same_tokens_in_fp32_and_faster_in_bf16():
    """At a real model's shape: fp32, the graph's tokens are the eager loop's; bf16, a graph step costs less
    than half an eager one (the eager loop is launch-bound there: 35 ms per step in fp32, issue 43)."""
    import time

    from tests.trainer.engines.test_static_decode import WIDE

    model, tokenizer = _qwen3_0_6b_shape(torch.float32)
    dynamic, static, engine = _cuda_pair(model, tokenizer, WIDE * 4, seed=1, max_new_tokens=32)
    assert engine.static.captured
    assert torch.equal(dynamic.input_ids, static.input_ids)
    torch.testing.assert_close(static.engine_logp, dynamic.engine_logp, rtol=0, atol=1e-4)
    model = model.to(torch.bfloat16)
    _, _, engine = _cuda_pair(model, tokenizer, WIDE * 20, seed=1, max_new_tokens=64)
    engine.eos_ids = [-1]  # every row decodes 64 tokens
    seconds = {}
    for kv_cache in ("static", "dynamic", "static"):
        engine.kv_cache = kv_cache
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        engine.generate(WIDE * 20, seed=2)
        torch.cuda.synchronize()
        seconds[kv_cache] = time.perf_counter() - t0  # the second static run: the graph already captured
    assert seconds["static"] < 0.5 * seconds["dynamic"], seconds


def test_a_qwen3_moe_decode_step_on_cuda_draws_the_eager_tokens():
    """transformers' default grouped_mm experts read nothing back to the host: the step is captured. Its eager
    expert loop does (nonzero), which a capture cannot hold: the capture raises and the decoder runs the step
    uncaptured. The eager loop's tokens either way."""
    from gspo.evals.arith import ALPHABET
    from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3
    from tests.trainer.engines.test_static_decode import WIDE

    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2,
                             num_kv_heads=1, seed=3, num_experts=8, experts_per_token=2,
                             moe_intermediate_size=16).cuda().eval()
    dynamic, static, engine = _cuda_pair(model, tokenizer, WIDE * 4, seed=2, max_new_tokens=24)
    assert torch.equal(dynamic.input_ids, static.input_ids)
    assert engine.static.captured
    model.set_experts_implementation("eager")
    dynamic, static, engine = _cuda_pair(model, tokenizer, WIDE * 4, seed=2, max_new_tokens=24)
    assert torch.equal(dynamic.input_ids, static.input_ids)
    assert not engine.static.captured and not engine.static.graphs  # fell back, and said so
