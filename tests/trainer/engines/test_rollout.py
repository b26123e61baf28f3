"""Rollout masks and the HF engine, on hand-made tensors and a tiny random Qwen3 built in-process.

The regression pinned first is tiny-grpo's: with `pad_token = eos`, masking every eos hides the real
end of each answer from the loss. A completion's mask must keep its first eos and drop what follows.
"""

from __future__ import annotations

import pytest
import torch

from gspo.evals.arith import ALPHABET
from gspo.trainer.engines.hf_engine import HFEngine
from gspo.trainer.engines.rollout import Rollout, completion_mask_from_eos, concat_rollouts
from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3

PROMPTS = ["12+345=", "7*8=", "9+9=", "4021*3="]  # different lengths: the batch is left-padded


def test_mask_keeps_the_first_eos_and_drops_the_padding_after_it():
    eos, pad = 1, 0
    completion = torch.tensor([
        [5, 6, eos, pad, pad],
        [eos, pad, pad, pad, pad],  # an empty answer is still one token: the eos
        [5, 6, 7, 8, 9],  # no eos: truncated
        [5, 6, 7, 8, eos],  # eos in the last slot: complete, not truncated
    ])
    mask, truncated = completion_mask_from_eos(completion, [eos])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert mask.dtype == torch.float32
    assert truncated.tolist() == [False, False, True, False]


def test_mask_when_pad_is_eos_qwen_style():
    eos = pad = 2  # Qwen's tokenizer pads with its end-of-sequence token
    completion = torch.tensor([
        [5, 6, eos, pad, pad],
        [5, eos, pad, pad, pad],
        [eos, pad, pad, pad, pad],
        [5, 6, 7, 8, 9],
    ])
    mask, truncated = completion_mask_from_eos(completion, [eos])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert truncated.tolist() == [False, False, False, True]
    tiny_grpo = (completion != pad).float()  # the peer bug: the real end token is masked out
    assert tiny_grpo[0].tolist() == [1, 1, 0, 0, 0] and mask[0, 2] == 1


def test_mask_with_several_eos_ids_stops_at_the_first_of_any():
    im_end, endoftext = 3, 2  # Qwen chat models end with <|im_end|>; <|endoftext|> also ends a sequence
    completion = torch.tensor([[5, im_end, endoftext, 0], [5, 6, endoftext, im_end], [5, 6, 7, 8]])
    mask, truncated = completion_mask_from_eos(completion, [endoftext, im_end])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert truncated.tolist() == [False, False, True]


def _tiny(seed: int = 0, *, pad_is_eos: bool = False):
    tokenizer = build_char_tokenizer(ALPHABET)
    if pad_is_eos:
        tokenizer.pad_token = tokenizer.eos_token
    model = build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2,
                             num_kv_heads=1, seed=seed).eval()
    return model, tokenizer


def _engine(model, tokenizer, **kw) -> HFEngine:
    opts = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 24, "batch_size": 64} | kw
    return HFEngine(model, tokenizer, **opts)


@pytest.fixture(scope="module")
def tiny():
    return _tiny()


def _check_rollout(out: Rollout, tokenizer, n_prompt: int) -> None:
    """Masks cover each completion up to and including its first eos; texts are the masked tokens."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    completion = out.input_ids[:, n_prompt:]
    assert out.attention_mask[:, n_prompt:].tolist() == out.completion_mask.long().tolist()
    for row, mask, truncated, text in zip(completion.tolist(), out.completion_mask.tolist(), out.truncated.tolist(),
                                          out.texts, strict=True):
        length = int(sum(mask))
        assert mask == [1.0] * length + [0.0] * (len(mask) - length)
        kept, rest = row[:length], row[length:]
        assert all(t == pad for t in rest)
        if truncated:
            assert eos not in kept and length == len(row)
        else:
            assert kept[-1] == eos and eos not in kept[:-1]
        body = kept if truncated else kept[:-1]
        # a random model also samples <pad> mid-answer: decoding drops every special token
        assert text == tokenizer.decode(body, skip_special_tokens=True) and "<eos>" not in text and "<pad>" not in text


@pytest.mark.parametrize("pad_is_eos", [False, True], ids=["pad!=eos", "pad==eos"])
def test_engine_masks_and_texts(pad_is_eos):
    model, tokenizer = _tiny(pad_is_eos=pad_is_eos)
    prompts = PROMPTS * 4
    out = _engine(model, tokenizer).generate(prompts, seed=3)
    n_prompt = out.input_ids.shape[1] - out.n_completion
    _check_rollout(out, tokenizer, n_prompt)
    assert out.input_ids.shape[0] == len(prompts) == len(out.texts)
    # the random model must produce both ends, or this test would check nothing
    assert out.truncated.any() and (~out.truncated).any()
    # prompts are left-padded and kept verbatim
    for i, p in enumerate(prompts):
        ids = out.input_ids[i, :n_prompt][out.attention_mask[i, :n_prompt].bool()]
        assert tokenizer.decode(ids) == p


def test_engine_truncated_flags_with_a_short_budget(tiny):
    model, tokenizer = tiny
    out = _engine(model, tokenizer, max_new_tokens=2).generate(PROMPTS * 8, seed=0)
    ended = (out.input_ids[:, -2:] == tokenizer.eos_token_id).any(-1)
    assert out.truncated.tolist() == (~ended).tolist()
    assert out.truncated.any()
    assert out.completion_mask[out.truncated].eq(1).all()


def test_engine_same_seed_same_output(tiny):
    model, tokenizer = tiny
    engine = _engine(model, tokenizer)
    a, b, c = (engine.generate(PROMPTS * 2, seed=s) for s in (7, 7, 8))
    assert torch.equal(a.input_ids, b.input_ids) and a.texts == b.texts
    assert a.texts != c.texts
    greedy = [engine.generate(PROMPTS, seed=s, greedy=True).texts for s in (1, 2)]
    assert greedy[0] == greedy[1]


def test_model_generation_defaults_do_not_leak_into_sampling():
    """Hub models ship sampling defaults (Qwen3: top_k=20, top_p=0.95; Qwen2.5-Instruct: repetition_penalty
    1.05). transformers fills every value a caller does not pass from them, so the sampler would draw from
    another distribution than softmax(logits / T), the one the trainer scores. Spy on the config that
    generate() really resolves."""
    model, tokenizer = _tiny(5)
    model.generation_config.top_k = 1
    model.generation_config.top_p = 0.01
    model.generation_config.repetition_penalty = 3.0
    model.generation_config.min_p = 0.5
    resolved = []
    prepare = model._prepare_generation_config

    def spy(*args, **kwargs):
        out = prepare(*args, **kwargs)
        resolved.append(out[0])
        return out

    model._prepare_generation_config = spy
    _engine(model, tokenizer, max_new_tokens=4, temperature=0.7, sampler="generate").generate(PROMPTS, seed=0)
    (config,) = resolved
    # greedy search over RowSampler's scores (one token left per row): no warper of the model's runs
    assert not config.do_sample and config.repetition_penalty == 1.0 and config.min_p is None
    assert (model.generation_config.top_k, model.generation_config.repetition_penalty) == (1, 3.0)  # restored


def test_generation_leaves_the_global_rng_alone(tiny):
    model, tokenizer = tiny
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _engine(model, tokenizer).generate(PROMPTS, seed=0)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_logprobs_equal_the_trainers(tiny, temperature):
    model, tokenizer = tiny
    engine = _engine(model, tokenizer, temperature=temperature, want_logprobs=True)
    out = engine.generate(PROMPTS * 2, seed=5)
    with torch.no_grad():
        logp, _ = completion_logprobs(model, out.input_ids, out.attention_mask, out.n_completion,
                                      temperature=temperature, chunk=64)
    mask = out.completion_mask
    assert out.engine_logp.shape == mask.shape
    assert out.engine_logp[mask == 0].eq(0).all()
    torch.testing.assert_close(out.engine_logp, logp * mask, rtol=0, atol=1e-5)
    assert (logp * mask).abs().sum() > 1  # not a comparison of zeros


def _rollout(prompt_ids, completion_ids, mask, texts, truncated, logp) -> Rollout:
    prompt_ids, completion_ids, mask = torch.tensor(prompt_ids), torch.tensor(completion_ids), torch.tensor(mask)
    attention = torch.cat([(prompt_ids != 0).long(), mask.long()], dim=1)
    return Rollout(input_ids=torch.cat([prompt_ids, completion_ids], dim=1), attention_mask=attention,
                   completion_mask=mask.float(), texts=texts, truncated=torch.tensor(truncated),
                   engine_logp=torch.tensor(logp))


def test_concat_pads_prompts_left_and_completions_right():
    a = _rollout([[0, 7, 8]], [[5, 1]], [[1, 1]], ["a"], [False], [[-0.5, -0.25]])  # P=3, T=2
    b = _rollout([[9, 9, 9, 9], [0, 0, 4, 4]], [[6, 6, 1], [1, 0, 0]], [[1, 1, 1], [1, 0, 0]], ["b", "c"], [False, False],
                 [[-1.0, -2.0, -3.0], [-4.0, 0.0, 0.0]])  # P=4, T=3
    out = concat_rollouts([a, b], pad_id=0)
    assert out.input_ids.tolist() == [[0, 0, 7, 8, 5, 1, 0], [9, 9, 9, 9, 6, 6, 1], [0, 0, 4, 4, 1, 0, 0]]
    assert out.attention_mask.tolist() == [[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0, 0]]
    assert out.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert out.n_completion == 3 and out.texts == ["a", "b", "c"]
    assert out.truncated.tolist() == [False, False, False]
    assert out.engine_logp.tolist() == [[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0], [-4.0, 0.0, 0.0]]


def test_generate_in_several_batches_concatenates_consistently(tiny):
    """batch_size < N: parts of different widths are joined, and the trainer's log-probs on the joined
    batch still equal the sampler's (extra left padding and right padding change nothing)."""
    model, tokenizer = tiny
    engine = _engine(model, tokenizer, batch_size=3, want_logprobs=True)
    prompts = ["1+2=", "12345+67890=", "3*4=", "9+9=", "88*7="]
    out = engine.generate(prompts, seed=11)
    parts = [engine.generate(prompts[i : i + 3], seed=11 + i) for i in (0, 3)]
    assert out.texts == parts[0].texts + parts[1].texts
    assert out.input_ids.shape[1] - out.n_completion == max(p.input_ids.shape[1] - p.n_completion for p in parts)
    n_prompt = out.input_ids.shape[1] - out.n_completion
    _check_rollout(out, tokenizer, n_prompt)
    with torch.no_grad():
        logp, _ = completion_logprobs(model, out.input_ids, out.attention_mask, out.n_completion, chunk=16)
    torch.testing.assert_close(out.engine_logp, logp * out.completion_mask, rtol=0, atol=1e-5)


@pytest.mark.parametrize("sampler", ["lean", "generate"])
def test_a_rows_completion_does_not_depend_on_its_batch(tiny, sampler):
    """Row i samples with seed + i whatever shares its batch: the rows [2, 8) of one call are the rows of a
    call on those prompts alone with seed + 2, and of calls with another batch size (what makes a rank's
    share of a step's rollout equal to the same rows of a one-process rollout), with either sampler."""
    model, tokenizer = tiny
    prompts = PROMPTS * 2
    whole = _engine(model, tokenizer, sampler=sampler).generate(prompts, seed=7)
    tail = _engine(model, tokenizer, sampler=sampler).generate(prompts[2:], seed=9)
    small = _engine(model, tokenizer, batch_size=3, sampler=sampler).generate(prompts, seed=7)
    assert tail.texts == whole.texts[2:] and small.texts == whole.texts
    assert len(set(whole.texts)) > 1


def test_row_sampler_draws_from_the_tempered_nucleus():
    """RowSampler keeps exactly one token per row, drawn from softmax(logits / T) restricted to the top-p
    nucleus: over 4000 seeded rows the frequencies match those probabilities (a 4-sigma band)."""
    from gspo.trainer.engines.rollout import RowSampler
    from gspo.trainer.model.logprobs import sampling_logits

    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, -3.0])
    n, temperature, top_p = 4000, 0.8, 0.9
    sampler = RowSampler(list(range(n)), torch.device("cpu"), temperature=temperature, top_p=top_p)
    scores = sampler(torch.zeros(n, 1, dtype=torch.long), logits.expand(n, -1).clone())
    kept = torch.isfinite(scores)
    assert kept.sum(-1).eq(1).all()
    freq = torch.bincount(kept.float().argmax(-1), minlength=5).double() / n
    probs = torch.softmax(sampling_logits(logits, temperature, top_p), -1).double()
    assert probs[-1] == 0 and freq[-1] == 0  # outside the nucleus: never drawn
    assert torch.all((freq - probs).abs() <= 4 * (probs * (1 - probs) / n).sqrt() + 1e-12)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8)])
def test_lean_sampler_draws_what_generate_draws(tiny, temperature, top_p):
    """The lean loop draws each token from the same distribution in the same way as transformers' generate
    (row i from its own generator seeded seed + i, RowSampler, on the same probabilities; the model's own
    sampling defaults, top_k=1 here, reach neither): on a fixed seed it returns the same tokens and the same log-probs of them. Greedy
    decoding agrees."""
    model, tokenizer = tiny
    saved, model.generation_config.top_k = model.generation_config.top_k, 1
    try:
        out = {s: _engine(model, tokenizer, temperature=temperature, top_p=top_p, want_logprobs=True,
                          sampler=s).generate(PROMPTS * 2, seed=3) for s in ("lean", "generate")}
        greedy = {s: _engine(model, tokenizer, sampler=s).generate(PROMPTS, seed=0, greedy=True).texts
                  for s in ("lean", "generate")}
    finally:
        model.generation_config.top_k = saved
    lean, ref = out["lean"], out["generate"]
    assert torch.equal(lean.input_ids, ref.input_ids) and lean.texts == ref.texts
    assert torch.equal(lean.completion_mask, ref.completion_mask) and torch.equal(lean.truncated, ref.truncated)
    assert len(set(lean.texts)) > 2  # sampled, not one greedy answer per prompt
    torch.testing.assert_close(lean.engine_logp, ref.engine_logp, rtol=0, atol=1e-6)
    assert greedy["lean"] == greedy["generate"]


def test_lean_sampler_token_statistics_match_generate():
    """256 completions each from the lean loop and from generate on a peaked model (output layer x6): the
    unigram token frequencies agree (total variation ~0.03-0.05 between two samples of one distribution)
    and the mean lengths too, while generate at 1.3x the temperature is told apart (~0.13)."""
    model, tokenizer = _tiny(3)
    with torch.no_grad():
        model.lm_head.weight.mul_(6)

    def sample(sampler: str, temperature: float) -> tuple[torch.Tensor, float]:
        r = _engine(model, tokenizer, temperature=temperature, sampler=sampler).generate(PROMPTS * 64, seed=3)
        ids = r.input_ids[:, -r.n_completion :][r.completion_mask.bool()]
        return torch.bincount(ids, minlength=len(tokenizer)).float() / ids.numel(), r.completion_mask.sum(-1).mean()

    (lean, lean_len), (ref, ref_len), (hot, _) = sample("lean", 1.0), sample("generate", 1.0), sample("generate", 1.3)
    assert 0.5 * (lean - ref).abs().sum() < 0.08 < 0.5 * (hot - ref).abs().sum()
    assert abs(lean_len - ref_len) < 0.1 * ref_len


def test_lean_sampler_first_token_frequencies_follow_the_softmax(tiny):
    """Token statistics, independent of generate: 2048 one-token draws for one prompt land on each token
    as often as softmax(logits / T) says (total variation under 0.05; a wrong temperature gives ~0.2)."""
    model, tokenizer = tiny
    engine = _engine(model, tokenizer, temperature=0.5, max_new_tokens=1, batch_size=2048)
    out = engine.generate(["12+34="] * 2048, seed=1)
    counts = torch.bincount(out.input_ids[:, -1], minlength=len(tokenizer)).float() / 2048
    enc = tokenizer(["12+34="], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        probs = torch.softmax(model(**enc).logits[0, -1] / 0.5, -1)
    assert 0.5 * (counts - probs).abs().sum() < 0.05


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8)])
def test_lean_sampler_logprobs_and_entropy_are_the_trainers(tiny, temperature, top_p):
    """What the sampler computes while it draws is what the trainer's scoring pass computes on the finished
    batch (algo.old_logp_source=auto relies on this): log-probs and entropy to fp32 tolerance."""
    model, tokenizer = tiny
    out = _engine(model, tokenizer, temperature=temperature, top_p=top_p).generate(PROMPTS * 3, seed=7)
    with torch.no_grad():
        logp, entropy = completion_logprobs(model, out.input_ids, out.attention_mask, out.n_completion,
                                            temperature=temperature, top_p=top_p, chunk=32, with_entropy=True)
    mask = out.completion_mask
    torch.testing.assert_close(out.engine_logp, logp * mask, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.engine_entropy, entropy * mask, rtol=0, atol=1e-5)
    assert (logp * mask).abs().sum() > 1 and (entropy * mask).sum() > 1  # not a comparison of zeros


def test_row_uniforms_are_splitmix64_of_seed_and_token_index():
    """The sampler's counter-based uniforms equal a pure-Python SplitMix64 (64-bit wrapping arithmetic,
    logical shifts), for seeds up to 2**62 and token indices up to 10**6: torch's int64 ops wrap as the
    reference does, and a row's uniform depends on its seed and token index alone."""
    from gspo.trainer.engines.rollout import row_uniforms

    mask = (1 << 64) - 1

    def mix(x: int) -> int:
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & mask
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & mask
        return x ^ (x >> 31)

    def reference(seed: int, step: int) -> float:
        return (mix((mix(seed) + (step + 1) * 0x9E3779B97F4A7C15) & mask) >> 11) * 2.0**-53

    seeds = [0, 1, 2, 12345, 2**32 - 1, 2**40 + 7, 2**62 + 5]
    for step in (0, 1, 7, 10**6):
        assert row_uniforms(torch.tensor(seeds), step).tolist() == [reference(s, step) for s in seeds]
    alone = row_uniforms(torch.tensor([12345]), 7)
    assert alone.item() == row_uniforms(torch.tensor(seeds), 7)[3].item()
    u = row_uniforms(torch.arange(20000), 3)
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.003


def test_row_sampler_never_draws_a_zero_probability_token_at_the_top_of_the_cdf(monkeypatch):
    """A uniform that rounds up to the total (1 - 2**-53 in fp32) still lands on the last token with
    probability > 0, not on the zero-probability tail (outside the nucleus)."""
    from gspo.trainer.engines import rollout

    monkeypatch.setattr(rollout, "row_uniforms", lambda seeds, step: torch.full(seeds.shape, 1 - 2**-53, dtype=torch.float64))
    sampler = rollout.RowSampler([0, 1], torch.device("cpu"), temperature=1.0, top_p=1.0)
    assert sampler.draw(torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.1, 0.2, 0.7, 0.0]])).tolist() == [1, 2]


def test_lean_sampler_warns_nothing_and_draws_what_the_old_keyword_drew(tiny):
    """transformers 5.x deprecates `past_key_values=` with a FutureWarning in every process: the decoding
    loop passes the KV cache by the keyword the forward names (`cache` there), with the same tokens."""
    import warnings

    model, tokenizer = tiny
    engine = _engine(model, tokenizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        new = engine.generate(PROMPTS * 2, seed=5)
    if engine.cache_keyword == "cache":  # an older transformers has only past_key_values
        engine.cache_keyword = "past_key_values"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            old = engine.generate(PROMPTS * 2, seed=5)
        assert torch.equal(new.input_ids, old.input_ids) and torch.equal(new.engine_logp, old.engine_logp)


def test_a_lora_model_is_asked_through_its_base():
    """PeftModel.forward takes **kwargs: the keyword is the base model's."""
    import inspect

    from peft import LoraConfig, get_peft_model

    from gspo.trainer.engines.hf_engine import cache_keyword

    model, _ = _tiny()
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    expected = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    assert cache_keyword(lora) == cache_keyword(model) == expected
