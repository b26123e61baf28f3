"""The hf engine: sampling with the trained transformers model itself (`rollout.engine=hf`), built by
`registry.make_engine` as the vLLM engine (vllm_engine.py) is. Its rows are `Rollout`s (rollout.py), drawn
with the per-row counter-based sampler `RowSampler`."""

from __future__ import annotations

import inspect
from contextlib import nullcontext

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList

try:  # the cache layer a DynamicCache is made of (transformers >= 4.56)
    from transformers.cache_utils import DynamicLayer
except ImportError:  # pragma: no cover - older transformers: the growing cache is used as it is
    DynamicLayer = None

from gspo.trainer.engines.base import Capabilities
from gspo.trainer.engines.rollout import (
    Rollout,
    RowSampler,
    completion_mask_from_eos,
    concat_rollouts,
    eos_ids_of,
)
from gspo.trainer.engines.static_decode import MIN_ROWS, WINDOW, StaticDecoder, bucket, pick
from gspo.trainer.model.logprobs import sampling_logits
from gspo.trainer.model.models import DTYPES
from gspo.trainer.parallel import fsdp
from gspo.trainer.parallel.moe import DecodeRouting
from gspo.vocab.choices import KvCache, Replay, RolloutDtype, Sampler


def capabilities(rollout) -> Capabilities:
    """The lean sampler's log-probs are the trained model's own at its precision (rollout.dtype=auto), and it
    records the experts each decoding step chose; both samplers run on the trained model itself, adapters,
    shards and all."""
    lean = rollout.sampler == Sampler.LEAN
    return Capabilities(logprobs=True, exact_logprobs=lean and rollout.dtype == RolloutDtype.AUTO, records_routing=lean,
                        lora=True, sharded_policy=True, lagged_copy=True)


def build(cfg, model, tokenizer, *, want_logprobs: bool) -> HFEngine:
    r = cfg.rollout
    return HFEngine(model, tokenizer, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                    batch_size=r.batch_size, want_logprobs=want_logprobs,
                    autocast_dtype=DTYPES[r.dtype] if r.dtype != RolloutDtype.AUTO else None, sampler=r.sampler,
                    record_routing=cfg.algo.routing_replay == Replay.ROLLOUT, kv_cache=r.kv_cache)


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
                 sampler: str = "lean", record_routing: bool = False, kv_cache: str = "auto",
                 window: int | None = WINDOW, min_rows: int | None = MIN_ROWS):
        self.model, self.tokenizer, self.sampler = model, tokenizer, sampler
        self.kv_cache = kv_cache  # lean sampler: static, dynamic, or auto (static on CUDA); see _static_for
        # the static cache's attention window and smallest compacted batch (None: the whole bucket, every row)
        self.window, self.min_rows = window, min_rows
        self.static: StaticDecoder | None = None  # the last shape's buffers (and graph), reused while it fits
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
                if self.sampler == Sampler.LEAN:
                    # inference mode: ~10% less per-op overhead than no_grad in the decode forwards (the
                    # embedded model's, measured); what leaves it is cloned into ordinary tensors, which
                    # the update may save for backward (an inference tensor may not be). Not under FSDP,
                    # whose all-gathered weights would become inference tensors the update writes to
                    with torch.inference_mode(not fsdp.is_sharded(self.model)), \
                            DecodeRouting(self.model) if self.record_routing else nullcontext() as experts:
                        decoded = self._decode(enc.input_ids, enc.attention_mask, sampler=sampler,
                                               max_new_tokens=max_new_tokens, experts=experts)
                        if experts is not None:
                            routing = experts.experts(enc.input_ids.shape[1] + decoded[0].shape[1])
                    completion, engine_logp, engine_entropy = (x.clone() if x is not None else None for x in decoded)
                    routing = routing.clone() if routing is not None else None
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
        if self.sampler != Sampler.LEAN and self.want_logprobs:
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
        have ended (each forward is a collective), as transformers' synced_gpus does. With a fixed-shape cache
        (`_static_on`; not under FSDP, nor while recording MoE routing) a StaticDecoder draws the same tokens,
        one CUDA graph per token on CUDA and a host sync every few tokens, attending over the positions written so
        far (in windows) and over the rows not yet ended (static_decode.py)."""
        greedy = sampler is None
        lockstep = fsdp.is_sharded(self.model)
        if experts is None and not lockstep and self._static_on(input_ids.device):
            return self._static_for(input_ids.shape, max_new_tokens, greedy).decode(
                input_ids, attention_mask, None if greedy else sampler.seeds)
        n = input_ids.shape[0]
        pad = self.tokenizer.pad_token_id
        eos = torch.tensor(self.eos_ids, device=input_ids.device)
        position = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        cache = preallocated_cache(self.model.config, input_ids.shape[1] + max_new_tokens)
        if experts is not None:
            experts.next_forward(n)
        kv = {self.cache_keyword: cache}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position, **kv,
                         use_cache=True, logits_to_keep=1)
        position = position[:, -1:]
        # the mask of every position the loop can reach, written once: step t reads a view of its first columns
        width = attention_mask.shape[1]
        full_mask = torch.cat([attention_mask, attention_mask.new_ones(n, max_new_tokens)], dim=1)
        done = torch.zeros(n, dtype=torch.bool, device=input_ids.device)
        tokens, logps, ents = [], [], []
        for t in range(max_new_tokens):
            token, logp, ent = pick(out.logits[:, -1], sampler, self.temperature, self.top_p)  # [N] each
            if not greedy:
                logps.append(logp)
                ents.append(ent)
            token = token.masked_fill(done, pad)
            tokens.append(token)
            done = done | torch.isin(token, eos)
            if t + 1 == max_new_tokens or (fsdp.all_done(bool(done.all())) if lockstep else bool(done.all())):
                break
            attention_mask = full_mask[:, : width + t + 1]
            position = position + 1
            if experts is not None:
                experts.next_forward(n)
            out = self.model(input_ids=token.unsqueeze(1), attention_mask=attention_mask, position_ids=position, **kv,
                             use_cache=True)
        completion = torch.stack(tokens, dim=1)
        if greedy:
            return completion, None, None
        return completion, torch.stack(logps, dim=1), torch.stack(ents, dim=1)

    def _static_on(self, device: torch.device) -> bool:
        """Whether the lean loop decodes into a fixed-shape cache: rollout.kv_cache=static, or auto on CUDA (where
        the graph pays; on the CPU the growing cache measured faster, docs/performance.md)."""
        return self.kv_cache == KvCache.STATIC or (self.kv_cache == KvCache.AUTO and device.type == "cuda")

    def _static_for(self, shape: torch.Size, max_new_tokens: int, greedy: bool) -> StaticDecoder:
        """The decoder for N prompts of width P ([N, P]): the last one where its shape and weights still fit,
        else a new one (the old one's buffers dropped first, so two caches never coexist)."""
        n, width = shape
        device = next(self.model.parameters()).device
        key = (n, bucket(width + max_new_tokens), max_new_tokens, greedy, device, tuple(self.eos_ids), self.window,
               self.min_rows)
        if self.static is None or not self.static.fits(key, self.model):
            self.static = None
            self.static = StaticDecoder(self.model, n=n, capacity=key[1], max_new_tokens=max_new_tokens, device=device,
                                        cache_keyword=self.cache_keyword, eos_ids=self.eos_ids,
                                        pad_id=self.tokenizer.pad_token_id, temperature=self.temperature,
                                        top_p=self.top_p, greedy=greedy, graphs=True, window=self.window,
                                        min_rows=self.min_rows)
        return self.static


class PreallocatedLayer(DynamicLayer or object):
    """A DynamicCache layer that writes each step's keys and values into buffers allocated once for the whole
    generation (`capacity` positions) and hands attention views of the positions written so far: the same
    tensors a growing cache returns, without the copy of the whole cache that each step's concatenation
    makes (~4% of the lean sampler's time on the embedded model, measured A/B). Everything else (sequence length,
    mask sizes) is DynamicLayer's, read from those views."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            shape = key_states.shape[:2]
            self._keys = key_states.new_empty(*shape, self.capacity, key_states.shape[-1])
            self._values = value_states.new_empty(*shape, self.capacity, value_states.shape[-1])
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache full: {end} positions written into {self.capacity}")
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values


def preallocated_cache(config, capacity: int) -> DynamicCache:
    """A DynamicCache for `config`'s model whose full-attention layers are PreallocatedLayers of `capacity`
    positions (prompt + new tokens); sliding-window and other layer kinds keep transformers' own."""
    cache = DynamicCache(config=config)
    if DynamicLayer is not None:
        cache.layers = [PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def cache_keyword(model) -> str:
    """The keyword the model's forward takes its KV cache by: `cache` where the installed transformers has
    it (5.x deprecates `past_key_values`, with a FutureWarning in every process), else `past_key_values`
    (older versions). A LoRA model is asked through its base model, whose forward names its arguments."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _neutral_config(**values) -> GenerationConfig:
    return GenerationConfig(repetition_penalty=1.0, no_repeat_ngram_size=0, min_p=None,
                            typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0, length_penalty=1.0, **values)
