"""Chunked per-token log-probs against the plain reference: one full forward, log_softmax, gather.

float64 models, so the comparison can be tight (1e-10): any chunking slip (an off-by-one position, a
chunk boundary, a lost temperature) shows up far above that.
"""

from __future__ import annotations

import os

import pytest
import torch

from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.model.models import build_tiny_qwen3

TOL = {"rtol": 0, "atol": 1e-10}
N, P, T, V = 3, 5, 6, 17  # N*T = 18 tokens


@pytest.fixture(scope="module")
def model():
    return build_tiny_qwen3(V, hidden_size=32, num_layers=2, intermediate_size=64, num_heads=4, num_kv_heads=2,
                            seed=0).double().eval()


@pytest.fixture(scope="module")
def batch():
    """Prompts left-padded (pad id 0), completions right-padded after their eos (id 1)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, V, (N, P + T), generator=g)
    attention = torch.ones(N, P + T, dtype=torch.long)
    attention[0, :2] = 0  # prompt of 3 tokens
    attention[2, :4] = 0  # prompt of 1 token
    ids[attention == 0] = 0
    ids[1, P + 3] = 1  # row 1 ends after 4 completion tokens
    attention[1, P + 4 :] = 0
    ids[1, P + 4 :] = 0
    return ids, attention


def _reference(model, ids, attention, temperature=1.0):
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=position_ids).logits  # [N, P+T, V]
    logp_all = torch.log_softmax(logits[:, P - 1 : -1] / temperature, dim=-1)  # [N, T, V]
    logp = logp_all.gather(-1, ids[:, P:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@pytest.mark.parametrize("chunk", [1, 4, 7, 18, 1024])  # 4 and 7 do not divide N*T = 18
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_logprobs_and_entropy_equal_the_reference(model, batch, chunk, temperature):
    ids, attention = batch
    with torch.no_grad():
        ref_logp, ref_entropy = _reference(model, ids, attention, temperature)
        logp, entropy = completion_logprobs(model, ids, attention, T, temperature=temperature, chunk=chunk,
                                            with_entropy=True)
    assert logp.shape == entropy.shape == (N, T) and logp.dtype == torch.float64
    torch.testing.assert_close(logp, ref_logp, **TOL)
    torch.testing.assert_close(entropy, ref_entropy, **TOL)
    assert (logp < 0).all() and (entropy > 0).all()


@pytest.mark.parametrize("chunk", [5, 18])
def test_gradients_equal_the_reference(model, batch, chunk):
    ids, attention = batch
    weights = torch.linspace(-1, 2, N * T, dtype=torch.float64).view(N, T)  # any fixed mix of tokens

    def grads(fn):
        model.zero_grad(set_to_none=True)
        (fn() * weights).sum().backward()
        return {k: p.grad.clone() for k, p in model.named_parameters()}

    ref = grads(lambda: _reference(model, ids, attention, 0.8)[0])
    got = grads(lambda: completion_logprobs(model, ids, attention, T, temperature=0.8, chunk=chunk)[0])
    assert ref.keys() == got.keys()
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], **TOL, msg=k)
    assert sum(g.abs().sum() for g in ref.values()) > 0
    model.zero_grad(set_to_none=True)


def test_entropy_is_detached_and_logp_is_not(model, batch):
    ids, attention = batch
    logp, entropy = completion_logprobs(model, ids, attention, T, chunk=4, with_entropy=True)
    assert logp.requires_grad and not entropy.requires_grad
    assert completion_logprobs(model, ids, attention, T)[1] is None


def test_the_head_never_sees_more_than_a_chunk(model, batch):
    """The LM head runs on at most `chunk` positions at a time: no [N, T, V] logits."""
    ids, attention = batch
    rows = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _out: rows.append(args[0].shape[0]))
    try:
        logp, _ = completion_logprobs(model, ids, attention, T, chunk=7)
        logp.sum().backward()  # the checkpointed backward recomputes each chunk
    finally:
        hook.remove()
        model.zero_grad(set_to_none=True)
    assert max(rows) == 7 and sum(rows) == 2 * N * T


@pytest.mark.slow  # ~30-100 s on 2 CPU cores: torch.compile's inductor builds C++ kernels
def test_compiled_body_scores_what_the_eager_one_does():
    """train.compile=true: completion_logprobs goes through a torch.compile'd copy of the body, same
    values and gradients (fp32 tolerance), at two widths (dynamic shapes); the model's state dict is
    unchanged (checkpoints keep their keys)."""
    from gspo.evals.arith import ALPHABET
    from gspo.trainer.model.logprobs import _COMPILED, compile_body
    from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3

    model = build_tiny_qwen3(len(build_char_tokenizer(ALPHABET)), hidden_size=32, num_layers=1,
                             intermediate_size=64, num_heads=2, num_kv_heads=1, seed=0)
    keys = list(model.state_dict())
    results = {}
    for name in ("eager", "compiled"):
        if name == "compiled":
            compile_body(model)
        for width in (7, 11):
            g = torch.Generator().manual_seed(width)
            ids = torch.randint(3, 17, (4, 5 + width), generator=g)
            mask = torch.ones_like(ids)
            mask[0, :2] = 0  # a left-padded prompt
            model.zero_grad()
            logp, _ = completion_logprobs(model, ids, mask, width, chunk=16)
            logp.sum().backward()
            results[name, width] = (logp.detach(), model.lm_head.weight.grad.clone())
    assert model in _COMPILED and list(model.state_dict()) == keys
    for width in (7, 11):
        for a, b in zip(results["eager", width], results["compiled", width], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_compiled_kernels_are_kept_under_the_cache_dir(tmp_path, monkeypatch):
    """train.compile=true keeps what torch compiles under <cache dir>/inductor, so the later runs of a sweep read
    it back; a TORCHINDUCTOR_CACHE_DIR the user set wins. (torch.compile is lazy: nothing compiles here.)"""
    from gspo.trainer.model.logprobs import INDUCTOR_CACHE_ENV, compile_body

    model = build_tiny_qwen3(17, hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, num_kv_heads=1, seed=0)
    monkeypatch.delenv(INDUCTOR_CACHE_ENV, raising=False)
    compile_body(model, tmp_path)
    assert INDUCTOR_CACHE_ENV == "TORCHINDUCTOR_CACHE_DIR"
    assert os.environ[INDUCTOR_CACHE_ENV] == str(tmp_path / "inductor")
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert cache_dir() == str(tmp_path / "inductor")  # where torch itself will write
    monkeypatch.setenv(INDUCTOR_CACHE_ENV, "/elsewhere")
    compile_body(model, tmp_path)
    assert os.environ[INDUCTOR_CACHE_ENV] == "/elsewhere"
