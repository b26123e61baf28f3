"""The lean sampler's fixed-shape decoding (trainer/engines/static_decode.py, rollout.kv_cache=static) against the
growing-cache loop (kv_cache=dynamic), on tiny random Qwen3 and Qwen3-MoE models on the CPU (no graphs there;
the CUDA graph's replays are tests/trainer/test_gpu.py's): the same tokens from the same seeds, log-probs and
entropies to fp32 tolerance, over several widths and buckets, left padding, rows ending mid-batch, top-p and
temperatures.
"""

from __future__ import annotations

import traceback

import pytest
import torch

from gspo.conf import compose_config
from gspo.trainer.engines.registry import make_engine
from gspo.trainer.engines.rollout import row_uniforms
from gspo.trainer.engines.static_decode import BUCKET, CHECK_EVERY, bucket
from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.model.models import build_tiny_qwen3
from tests.trainer.engines.test_rollout import PROMPTS, _engine, _tiny

WIDE = ["1+2=", "12+345=", "99*99+1=", "4021*3-17=", "7=", "123456789+987654321="]  # widths 2..21: left padding


@pytest.fixture(scope="module")
def tiny():
    return _tiny()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """A tiny model's ops are too small to share across threads: on the shared 2-core VM at load ~10, one thread
    decoded these rollouts ~20x faster in wall time than two (1 s against 20 s for 18 rows x 48 tokens)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _pair(model, tokenizer, prompts, seed, greedy=False, **kw):
    """The same prompts through the growing cache and the fixed-shape one (a fresh engine each)."""
    outs = [_engine(model, tokenizer, kv_cache=c, want_logprobs=True, **kw).generate(prompts, seed=seed, greedy=greedy)
            for c in ("dynamic", "static")]
    return outs


def _same(dynamic, static, greedy=False):
    assert torch.equal(dynamic.input_ids, static.input_ids)  # same tokens, same completion width
    assert torch.equal(dynamic.completion_mask, static.completion_mask) and dynamic.texts == static.texts
    assert torch.equal(dynamic.truncated, static.truncated)
    if not greedy:
        torch.testing.assert_close(static.engine_logp, dynamic.engine_logp, rtol=0, atol=1e-5)
        torch.testing.assert_close(static.engine_entropy, dynamic.engine_entropy, rtol=0, atol=1e-5)


def test_bucket_rounds_prompt_plus_new_tokens_up_to_a_multiple_of_64():
    assert BUCKET == 64
    assert [bucket(w) for w in (1, 63, 64, 65, 128, 129, 600)] == [64, 64, 64, 128, 128, 192, 640]


def test_row_uniforms_at_a_device_step_are_those_at_the_int_step():
    """A captured step reads its token index from a 0-dim int64 tensor: its wrapped product must give the very
    uniforms the Python int gives (where (step + 1) * golden overflows int64 too)."""
    seeds = torch.tensor([0, 1, 12345, 2**40 + 7, 2**62 + 5])
    for step in (0, 1, 2, 7, 63, 511, 10**6):
        assert torch.equal(row_uniforms(seeds, torch.tensor(step)), row_uniforms(seeds, step))


@pytest.mark.parametrize(("temperature", "top_p", "max_new_tokens"),
                         [(1.0, 1.0, 24), (0.7, 1.0, 40), (1.0, 0.8, 24), (1.3, 0.9, 60), (0.5, 0.6, 7)])
def test_static_decoding_draws_the_eager_tokens(tiny, temperature, top_p, max_new_tokens):
    """Widths 2..21 left-padded, caches of 64 and 128 positions, top-p and temperatures, max_new_tokens not a
    multiple of the all-ended check: token for token what the growing cache draws, with rows ending mid-batch."""
    model, tokenizer = tiny
    dynamic, static = _pair(model, tokenizer, WIDE * 3, 11, temperature=temperature, top_p=top_p,
                            max_new_tokens=max_new_tokens)
    _same(dynamic, static)
    lengths = dynamic.completion_mask.sum(-1)
    assert lengths.min() < lengths.max()  # rows end at different tokens: the check sees pads after eos
    assert (~dynamic.truncated).any()


def test_static_decoding_stops_where_the_eager_loop_stops(tiny):
    """Every row ends long before max_new_tokens: the fixed-shape loop checks only every CHECK_EVERY tokens
    but returns the eager loop's width (one past the last row's first eos), not its own decoded count."""
    model, tokenizer = tiny
    dynamic, static = _pair(model, tokenizer, PROMPTS * 2, 3, temperature=0.3, max_new_tokens=200)
    _same(dynamic, static)
    assert not dynamic.truncated.any() and dynamic.n_completion < 200
    assert dynamic.n_completion % CHECK_EVERY != 0  # the cut is not one of the checks' columns


@pytest.mark.parametrize("pad_is_eos", [False, True], ids=["pad!=eos", "pad==eos"])
def test_static_greedy_and_pad_as_eos(pad_is_eos):
    model, tokenizer = _tiny(pad_is_eos=pad_is_eos)
    for greedy in (False, True):
        dynamic, static = _pair(model, tokenizer, WIDE * 2, 5, greedy=greedy)
        _same(dynamic, static, greedy)


def test_a_reused_decoder_draws_what_a_fresh_one_draws(tiny):
    """The engine keeps its buffers for the next generation of the same bucket (other prompts, widths, seeds):
    each generation is what a fresh engine draws; a new bucket, or weights moved elsewhere, get new buffers."""
    model, tokenizer = tiny
    engine = _engine(model, tokenizer, kv_cache="static", want_logprobs=True)
    first = engine.generate(WIDE, seed=1)
    decoder = engine.static
    for prompts, seed in ((PROMPTS + PROMPTS[:2], 2), (WIDE[::-1], 1)):
        again = engine.generate(prompts, seed=seed)
        assert engine.static is decoder  # same rows, same bucket: reused
        _same(_engine(model, tokenizer, kv_cache="dynamic", want_logprobs=True).generate(prompts, seed=seed), again)
    assert not torch.equal(first.input_ids[:, -5:], again.input_ids[:, -5:])  # prompts reversed: rows moved
    engine.generate(WIDE, seed=1, max_new_tokens=100)  # 121 positions: the 128 bucket
    assert engine.static is not decoder and engine.static.key[1] == 128
    decoder = engine.static
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # same values, new storage
    _same(_engine(model, tokenizer, kv_cache="dynamic", want_logprobs=True).generate(WIDE, seed=4, max_new_tokens=100),
          engine.generate(WIDE, seed=4, max_new_tokens=100))
    assert engine.static is not decoder
    decoder = engine.static
    engine.eos_ids = [-1]  # nothing ends a row now (the benchmarks' full length): not the decoder that stops on eos
    assert engine.generate(WIDE, seed=1, max_new_tokens=100).n_completion == 100 and engine.static is not decoder


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8)])
def test_static_logprobs_are_the_trainers_so_the_first_ratio_is_one(tiny, temperature, top_p):
    """fp32: the sampler's log-probs are the trainer's scoring pass's within 1e-5, so at the first update
    exp(logp_new - logp_old) is 1 within 1e-5 (algo.old_logp_source=auto takes the sampler's)."""
    model, tokenizer = tiny
    out = _engine(model, tokenizer, kv_cache="static", want_logprobs=True, temperature=temperature,
                  top_p=top_p).generate(WIDE * 3, seed=7)
    with torch.no_grad():
        logp, entropy = completion_logprobs(model, out.input_ids, out.attention_mask, out.n_completion,
                                            temperature=temperature, top_p=top_p, chunk=32, with_entropy=True)
    mask = out.completion_mask.bool()
    ratio = torch.exp(logp - out.engine_logp)[mask]
    assert (ratio - 1).abs().max() < 1e-5
    torch.testing.assert_close(out.engine_entropy, entropy * mask, rtol=0, atol=1e-5)
    assert logp[mask].abs().sum() > 1  # not a comparison of zeros


def test_a_qwen3_moe_decodes_into_the_static_cache():
    """transformers' StaticCache under a Qwen3-MoE: the same tokens; when the engine records the experts
    (routing_replay=rollout) it decodes with the growing cache, whose forwards it counts."""
    from gspo.evals.arith import ALPHABET
    from gspo.trainer.model.models import build_char_tokenizer

    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2,
                             num_kv_heads=1, seed=3, num_experts=8, experts_per_token=2, moe_intermediate_size=16).eval()
    dynamic, static = _pair(model, tokenizer, WIDE * 2, 9, top_p=0.9)
    _same(dynamic, static)
    engine = _engine(model, tokenizer, kv_cache="static", record_routing=True)
    out = engine.generate(WIDE, seed=9)
    assert engine.static is None and out.routing is not None
    assert torch.equal(out.input_ids, _engine(model, tokenizer, kv_cache="dynamic").generate(WIDE, seed=9).input_ids)


@pytest.mark.parametrize(("value", "device", "static"),
                         [("auto", "cpu", False), ("auto", "cuda", True), ("static", "cpu", True),
                          ("dynamic", "cuda", False)])
def test_rollout_kv_cache_reaches_the_engine(tiny, value, device, static):
    """One switch, rollout.kv_cache (conf/schema.py): auto is static on CUDA only (the CPU's growing cache
    measured faster, docs/performance.md)."""
    model, tokenizer = tiny
    cfg = compose_config([f"rollout.kv_cache={value}"])
    engine = make_engine(cfg, model, tokenizer)
    assert engine.kv_cache == value and engine._static_on(torch.device(device)) is static


def test_a_bad_kv_cache_is_one_line():
    from gspo.conf.errors import GspoError

    with pytest.raises(GspoError, match="rollout.kv_cache"):
        compose_config(["rollout.kv_cache=fixed"])


HOST_READS = ["item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero"]


def _host_reads(decoder) -> list[str]:
    """The tensor methods that read a value back to the host (a sync on CUDA, which a graph capture cannot hold)
    called during one decode step, where they were called from."""
    seen, saved = [], {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def spy(name):
        def method(self, *args, **kwargs):
            seen.append(f"{name} in {traceback.extract_stack(limit=2)[0].name}")
            return saved[name](self, *args, **kwargs)
        return method

    for name in HOST_READS:
        setattr(torch.Tensor, name, spy(name))
    try:
        with torch.inference_mode():
            decoder.t.fill_(1)
            decoder._step()
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
    return seen


def test_a_decode_step_reads_nothing_back_to_the_host(tiny):
    """What the CUDA graph captures must not sync with the host: one step of the dense model and of a Qwen3-MoE
    (transformers' grouped_mm experts) reads no tensor value back; the MoE's eager expert loop does (nonzero),
    the case whose capture falls back to the uncaptured step."""
    model, tokenizer = tiny
    engine = _engine(model, tokenizer, kv_cache="static")
    engine.generate(WIDE, seed=1)
    assert _host_reads(engine.static) == []
    moe = build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2,
                           num_kv_heads=1, seed=3, num_experts=8, experts_per_token=2, moe_intermediate_size=16).eval()
    engine = _engine(moe, tokenizer, kv_cache="static")
    engine.generate(WIDE, seed=1)
    assert _host_reads(engine.static) == []
    moe.set_experts_implementation("eager")
    engine = _engine(moe, tokenizer, kv_cache="static")
    engine.generate(WIDE, seed=1)
    assert any(read.startswith("nonzero") for read in _host_reads(engine.static))
