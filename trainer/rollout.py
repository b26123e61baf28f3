"""Rollout engines: turn prompts into sampled completions with correct masks.

A completion's mask covers every generated token up to and including its first end-of-sequence token;
what comes after is padding. The mask is never derived by comparing tokens with the pad id, because
many tokenizers (Qwen's among them) pad with their end-of-sequence token, and masking every eos would
hide the real end of each answer from the loss (tiny-grpo's bug).
"""

from __future__ import annotations

import dataclasses
import inspect
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList

from gspo.trainer import fsdp
from gspo.trainer.logprobs import sampling_logits
from gspo.trainer.moe import DecodeRouting


@dataclass
class Rollout:
    """One batch of sampled completions. N sequences, P prompt tokens (left-padded), T completion tokens."""

    input_ids: torch.Tensor  # [N, P+T] prompt then completion
    attention_mask: torch.Tensor  # [N, P+T] 1 on real prompt tokens and on the completion up to its eos
    completion_mask: torch.Tensor  # [N, T] float, 1 up to and including the first eos
    texts: list[str]  # decoded completions, special tokens removed
    truncated: torch.Tensor  # [N] bool: no eos within max_new_tokens
    engine_logp: torch.Tensor | None = None  # [N, T] the sampler's log-probs of the chosen tokens
    engine_entropy: torch.Tensor | None = None  # [N, T] the sampler's entropy at each completion position
    routing: torch.Tensor | None = None  # [N, P+T, layers, k] MoE: the experts the sampler chose per token, -1 where none (R3)

    @property
    def n_completion(self) -> int:
        return self.completion_mask.shape[1]

    def to(self, device: torch.device) -> Rollout:
        """The same rollout with every tensor on `device` (an engine may build it elsewhere: vLLM on the CPU)."""
        move = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **move)

    def select(self, rows: list[int]) -> Rollout:
        """The rollout's rows `rows`, in that order (widths unchanged)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.completion_mask.device)
        pick = {f.name: getattr(self, f.name)[index] for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, texts=[self.texts[i] for i in rows], **pick)


def eos_ids_of(model, tokenizer) -> list[int]:
    """Every id that ends a completion: the tokenizer's eos and the model's generation eos ids (Qwen3's
    generation config lists both <|im_end|> and <|endoftext|>). Every engine stops on this set."""
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    ids = {tokenizer.eos_token_id} | set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted(i for i in ids if i is not None)


def completion_mask_from_eos(completion: torch.Tensor, eos_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, T] token ids -> (mask [N, T] float with 1 up to and including the first eos, truncated [N])."""
    is_eos = torch.isin(completion, torch.tensor(eos_ids, device=completion.device))
    seen_before = (is_eos.long().cumsum(-1) - is_eos.long()) > 0  # an eos occurred strictly earlier
    mask = (~seen_before).float()
    return mask, ~is_eos.any(-1)


class HFEngine:
    """Sampling with the trained transformers model itself, on any device.

    `sampler="lean"` (the default) runs its own decoding loop: one prefill, then one forward per new token
    on a KV cache, drawing each token from softmax(sampling_logits(logits)), the distribution the trainer
    scores, with row i's own counter-based uniforms (`RowSampler`, seeded seed + i), exactly as `generate` draws it
    through the same sampler (same tokens from the same seed). It
    also returns the log-prob of each chosen token and the entropy of each step's distribution, from the
    logits it samples from: at the trainer's precision these are the old policy's (algo.old_logp_source=
    auto). `sampler="generate"` calls transformers' `generate`, the general reference.
    """

    def __init__(self, model, tokenizer, *, temperature: float, top_p: float, max_new_tokens: int,
                 batch_size: int, want_logprobs: bool = False, autocast_dtype: torch.dtype | None = None,
                 sampler: str = "lean", record_routing: bool = False):
        self.model, self.tokenizer, self.sampler = model, tokenizer, sampler
        self.record_routing = record_routing  # MoE, lean sampler: keep the experts each decoding forward chose (R3)
        # a sampler in lower precision than the trainer (rollout.dtype): the mismatch inference engines have
        self.autocast_dtype = autocast_dtype
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.batch_size, self.want_logprobs = batch_size, want_logprobs
        self.eos_ids = eos_ids_of(model, tokenizer)
        self.cache_keyword = cache_keyword(model)

    def _generation_config(self, max_new_tokens: int) -> GenerationConfig:
        # always transformers' greedy search: when sampling, RowSampler has already reduced each row's
        # scores to the one token it drew
        return _neutral_config(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=self.eos_ids,
                               pad_token_id=self.tokenizer.pad_token_id, return_dict_in_generate=True,
                               output_logits=self.want_logprobs)

    def sync_weights(self, model) -> None:
        """Nothing to do: generation runs on the trained model itself."""

    @torch.no_grad()
    def generate(self, prompts: list[str], *, seed: int, greedy: bool = False,
                 max_new_tokens: int | None = None) -> Rollout:
        """Complete each prompt once (repeat a prompt G times for a group); prompt i samples with seed + i (as
        the vLLM engine's requests do), so a completion does not depend on the batch it shares: a rank that
        generates rows [a, b) of a step with seed + a draws what one process generating them all draws."""
        parts = [
            self._generate_batch(prompts[i : i + self.batch_size], seed=seed + i, greedy=greedy,
                                 max_new_tokens=max_new_tokens or self.max_new_tokens)
            for i in range(0, len(prompts), self.batch_size)
        ]
        return parts[0] if len(parts) == 1 else concat_rollouts(parts, self.tokenizer.pad_token_id)

    def _generate_batch(self, prompts: list[str], *, seed: int, greedy: bool, max_new_tokens: int) -> Rollout:
        device = next(self.model.parameters()).device
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        config = self._generation_config(max_new_tokens)
        sampler = None if greedy else RowSampler([seed + j for j in range(len(prompts))], device,
                                                 temperature=self.temperature, top_p=self.top_p)
        was_training, saved = self.model.training, self.model.generation_config
        self.model.eval()
        # transformers fills any value left at its global default from the model's own generation config
        # (Qwen3 ships top_k=20, top_p=0.95, ...), so the neutral config stands in for it during the call:
        # the sampler must draw from softmax(logits / T) (with top-p) exactly, as the trainer scores it
        self.model.generation_config = config
        engine_logp = engine_entropy = routing = None
        try:
            with torch.autocast(device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
                if self.sampler == "lean":
                    with DecodeRouting(self.model) if self.record_routing else nullcontext() as experts:
                        completion, engine_logp, engine_entropy = self._decode(
                            enc.input_ids, enc.attention_mask, sampler=sampler, max_new_tokens=max_new_tokens,
                            experts=experts)
                    if experts is not None:
                        routing = experts.experts(enc.input_ids.shape[1] + completion.shape[1])
                else:
                    out = self.model.generate(**enc, generation_config=config, synced_gpus=fsdp.is_sharded(self.model),
                                              logits_processor=LogitsProcessorList([sampler] if sampler else []))
                    completion = out.sequences[:, enc.input_ids.shape[1]:]  # [N, T]
        finally:
            self.model.generation_config = saved
            self.model.train(was_training)
            fsdp.reshard(self.model)
        mask, truncated = completion_mask_from_eos(completion, self.eos_ids)
        completion = torch.where(mask.bool(), completion, torch.full_like(completion, self.tokenizer.pad_token_id))
        if self.sampler != "lean" and self.want_logprobs:
            logits = sampling_logits(torch.stack(out.logits, dim=1), self.temperature, self.top_p)  # [N, T, V]
            engine_logp = torch.log_softmax(logits, -1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        return Rollout(
            input_ids=torch.cat([enc.input_ids, completion], dim=1),
            attention_mask=torch.cat([enc.attention_mask, mask.long()], dim=1),
            completion_mask=mask,
            texts=self.tokenizer.batch_decode(completion, skip_special_tokens=True),
            truncated=truncated,
            engine_logp=engine_logp * mask if engine_logp is not None else None,
            engine_entropy=engine_entropy * mask if engine_entropy is not None else None,
            routing=routing,
        )

    def _decode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, sampler: RowSampler | None,
                max_new_tokens: int, experts: DecodeRouting | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The lean sampling loop: [N, P] left-padded prompts -> completion ids [N, T] (pad after a row's
        eos; T <= max_new_tokens, shorter when every row ended), and when sampling (`sampler` given; None is
        greedy) the chosen tokens' log-probs [N, T] and the entropies [N, T] of the sampling distribution.
        Row i draws with its own uniforms (`sampler`, seeded seed + i), the draws `generate` makes with the
        same sampler, token for token; ended rows keep their place, and it checks once per token whether
        every row has ended (one host sync per token). Under FSDP every rank decodes until all ranks' rows
        have ended (each forward is a collective), as transformers' synced_gpus does."""
        greedy = sampler is None
        lockstep = fsdp.is_sharded(self.model)
        n = input_ids.shape[0]
        pad = self.tokenizer.pad_token_id
        eos = torch.tensor(self.eos_ids, device=input_ids.device)
        position = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        if experts is not None:
            experts.next_forward(n)
        kv = {self.cache_keyword: cache}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position, **kv,
                         use_cache=True, logits_to_keep=1)
        position = position[:, -1:]
        ones = attention_mask.new_ones(n, 1)
        done = torch.zeros(n, dtype=torch.bool, device=input_ids.device)
        tokens, logps, ents = [], [], []
        for t in range(max_new_tokens):
            logits = sampling_logits(out.logits[:, -1].float(), self.temperature, self.top_p)  # [N, V]
            if greedy:
                token = logits.argmax(-1)
            else:
                probs, logp = torch.softmax(logits, -1), torch.log_softmax(logits, -1)
                token = sampler.draw(probs)  # row i at its own uniform, as generate draws it
                logps.append(logp.gather(-1, token.unsqueeze(-1)).squeeze(-1))
                ents.append(-(probs * logp).sum(-1))
            token = token.masked_fill(done, pad)
            tokens.append(token)
            done = done | torch.isin(token, eos)
            if t + 1 == max_new_tokens or (fsdp.all_done(bool(done.all())) if lockstep else bool(done.all())):
                break
            attention_mask = torch.cat([attention_mask, ones], dim=1)
            position = position + 1
            if experts is not None:
                experts.next_forward(n)
            out = self.model(input_ids=token.unsqueeze(1), attention_mask=attention_mask, position_ids=position, **kv,
                             use_cache=True)
        completion = torch.stack(tokens, dim=1)
        if greedy:
            return completion, None, None
        return completion, torch.stack(logps, dim=1), torch.stack(ents, dim=1)


def cache_keyword(model) -> str:
    """The keyword the model's forward takes its KV cache by: `cache` where the installed transformers has
    it (5.x deprecates `past_key_values`, with a FutureWarning in every process), else `past_key_values`
    (older versions). A LoRA model is asked through its base model, whose forward names its arguments."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _int64(c: int) -> int:
    """A 64-bit constant as the signed value torch's int64 holds (arithmetic wraps modulo 2**64)."""
    return c - (1 << 64) if c >= 1 << 63 else c


_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, _int64(0xBF58476D1CE4E5B9), _int64(0x94D049BB133111EB)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic on signed integers)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser (Steele, Lea, Flood 2014), elementwise on int64."""
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    return x ^ _shr(x, 31)


def row_uniforms(seeds: torch.Tensor, step: int) -> torch.Tensor:
    """[n] int64 seeds, a token index -> [n] float64 uniforms in [0, 1): a counter-based draw (SplitMix64
    of the seed's own stream at position `step`), so row i's draw at token t depends on (seeds[i], t) alone,
    whatever else is in the batch, on any device, in one vectorised op."""
    x = _mix(_mix(seeds) + _int64((step + 1) * _GOLDEN % (1 << 64)))
    return _shr(x, 11).double() * 2.0**-53


class RowSampler(LogitsProcessor):
    """Draws every row's next token from softmax(logits / T) with top-p (`sampling_logits`, the distribution
    the trainer scores) by the inverse CDF at the row's own uniform (`row_uniforms` of its seed `seeds[i]`
    and the token index); returns scores that keep only the drawn token, so transformers' greedy search
    picks it. A row's completion thus depends on its seed and its prompt alone, not on which rows share its
    batch, its process or its rank (vLLM's per-request seeds give its engine the same property)."""

    def __init__(self, seeds: list[int], device: torch.device, *, temperature: float, top_p: float):
        self.seeds = torch.tensor(seeds, dtype=torch.long, device=device)
        self.temperature, self.top_p = temperature, top_p
        self.step = 0  # the next token's index: the lean loop and generate both ask once per token

    def draw(self, probs: torch.Tensor) -> torch.Tensor:
        """[n, V] probabilities -> [n] token ids: the first token whose cumulative probability exceeds the
        row's uniform (a zero-probability token, outside the nucleus, is never the first)."""
        cdf = probs.float().cumsum(-1)  # [n, V] fp32: a float64 cumsum costs ~13x more over a 32k vocabulary
        total = cdf[:, -1]
        # strictly below the total, so the token found has probability > 0 even where rounding reaches it
        u = torch.minimum(row_uniforms(self.seeds, self.step).float() * total, torch.nextafter(total, total.new_zeros(())))
        self.step += 1
        return torch.searchsorted(cdf, u.unsqueeze(-1), right=True).squeeze(-1)  # [n]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(sampling_logits(scores.float(), self.temperature, self.top_p), dim=-1)  # [n, V]
        chosen = self.draw(probs).unsqueeze(-1)  # [n, 1]
        return torch.full_like(scores, float("-inf")).scatter_(-1, chosen, 0.0)


def _neutral_config(**values) -> GenerationConfig:
    return GenerationConfig(repetition_penalty=1.0, no_repeat_ngram_size=0, min_p=None,
                            typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0, length_penalty=1.0, **values)


def concat_rollouts(parts: list[Rollout], pad_id: int) -> Rollout:
    """Join rollouts whose prompt and completion widths differ: prompts pad left, completions right."""
    p = max(r.input_ids.shape[1] - r.n_completion for r in parts)
    t = max(r.n_completion for r in parts)

    def fit(x: torch.Tensor, n_prompt: int, value) -> torch.Tensor:
        left, right = x[:, :n_prompt], x[:, n_prompt:]
        left = torch.nn.functional.pad(left, (p - left.shape[1], 0), value=value)
        right = torch.nn.functional.pad(right, (0, t - right.shape[1]), value=value)
        return torch.cat([left, right], dim=1)

    def pad_t(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, t - x.shape[1]))

    return Rollout(
        input_ids=torch.cat([fit(r.input_ids, r.input_ids.shape[1] - r.n_completion, pad_id) for r in parts]),
        attention_mask=torch.cat([fit(r.attention_mask, r.input_ids.shape[1] - r.n_completion, 0) for r in parts]),
        completion_mask=torch.cat([pad_t(r.completion_mask) for r in parts]),
        texts=[s for r in parts for s in r.texts],
        truncated=torch.cat([r.truncated for r in parts]),
        engine_logp=torch.cat([pad_t(r.engine_logp) for r in parts]) if parts[0].engine_logp is not None else None,
        engine_entropy=(torch.cat([pad_t(r.engine_entropy) for r in parts])
                        if parts[0].engine_entropy is not None else None),
        routing=(torch.cat([_fit_columns(r.routing, r.input_ids.shape[1] - r.n_completion, p, t) for r in parts])
                 if parts[0].routing is not None else None),
    )


def _fit_columns(routing: torch.Tensor, n_prompt: int, p: int, t: int) -> torch.Tensor:
    """[N, P+T, layers, k] -> [N, p+t, layers, k]: prompt columns padded left, completion right, with -1."""
    left, right = routing[:, :n_prompt], routing[:, n_prompt:]
    left = torch.nn.functional.pad(left, (0, 0, 0, 0, p - left.shape[1], 0), value=-1)
    right = torch.nn.functional.pad(right, (0, 0, 0, 0, 0, t - right.shape[1]), value=-1)
    return torch.cat([left, right], dim=1)
