"""With rollout.top_p < 1 the trainer scores the nucleus the sampler drew from, renormalised."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import TopPLogitsWarper

from gspo.evals.arith import ALPHABET
from gspo.trainer.engines.hf_engine import HFEngine
from gspo.trainer.model.logprobs import OUTSIDE_NUCLEUS, completion_logprobs, sampling_logits
from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3


def test_nucleus_by_hand():
    logits = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.2)]])
    # top_p = 0.7: 0.5 alone is not enough, 0.5 + 0.3 is; 0.2 is dropped and the rest renormalised
    logp = torch.log_softmax(sampling_logits(logits, 1.0, 0.7), -1)
    assert logp[0, :2].tolist() == pytest.approx([math.log(0.5 / 0.8), math.log(0.3 / 0.8)], abs=1e-6)
    assert logp[0, 2].exp().item() == 0.0 and math.isfinite(logp[0, 2].item())
    assert torch.equal(sampling_logits(logits, 2.0, 1.0), logits / 2.0)  # top_p = 1: temperature only


def test_nucleus_equals_transformers_top_p_warper():
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))
    ours = sampling_logits(logits, 0.7, 0.8)
    theirs = TopPLogitsWarper(0.8)(None, logits / 0.7)
    kept = torch.isfinite(theirs)
    assert torch.equal(ours != OUTSIDE_NUCLEUS, kept)
    assert 1 < kept.sum(-1).min() and kept.sum(-1).max() < 40  # the cut is neither empty nor everything
    assert torch.allclose(torch.log_softmax(ours, -1)[kept], torch.log_softmax(theirs, -1)[kept], atol=1e-6)


def test_every_sampled_token_lies_in_the_nucleus_the_trainer_scores():
    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=1, intermediate_size=64, num_heads=2,
                             num_kv_heads=1, seed=0).eval()
    engine = HFEngine(model, tokenizer, temperature=1.0, top_p=0.5, max_new_tokens=12, batch_size=64,
                      want_logprobs=True)
    out = engine.generate(["12+345=", "7*8="] * 4, seed=1)
    with torch.no_grad():
        nucleus, _ = completion_logprobs(model, out.input_ids, out.attention_mask, out.n_completion, top_p=0.5)
        full, _ = completion_logprobs(model, out.input_ids, out.attention_mask, out.n_completion)
    valid = out.completion_mask.bool()
    assert (nucleus[valid] > -100).all()  # no sampled token fell outside the trainer's nucleus
    assert torch.allclose(nucleus[valid], out.engine_logp[valid], atol=1e-5)  # the engine reports the same
    assert (nucleus[valid] > full[valid] + 1e-3).any()  # renormalised: the full softmax would differ
