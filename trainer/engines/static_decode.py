"""The lean sampler's fixed-shape decoding (`rollout.kv_cache=static`): transformers' StaticCache of one width per
bucket, and each decode step a function of buffers allocated once, replayed as one captured CUDA graph on CUDA.

Why a graph: on a GPU the eager loop is launch- and Python-bound (a 0.6B model's decode step is ~600 kernels
launched from Python across 28 layers, plus a host sync per token, against a weight-read floor under 1 ms).
Captured once, a step is one `graph.replay()`. Explicit `torch.cuda.CUDAGraph` capture rather than
`torch.compile(mode="reduce-overhead")`: no compile on the first call (transformers' compiled static decode
paid 38 s on an H100), no recompile per bucket, and the sampler's own ops (the row-seeded SplitMix64 draw,
searchsorted) captured as they are. Its risk, a host sync somewhere in a model's forward (MoE expert loops),
makes the capture raise; the decoder then runs the same step eagerly (same tokens, no graph).

Same tokens as the eager loop (hf_engine.HFEngine._decode): the same `pick` of each token from the same
logits, the uniform of row i at token t from (seed + i, t), a row's tokens after its eos replaced by pad,
and the completion cut where the eager loop stops (the first token at which every row has ended). The
logits themselves differ from the eager loop's only in rounding: attention runs over the bucket's width with
the positions not yet written masked out, rather than over the positions written so far.
"""

from __future__ import annotations

import logging

import torch
from transformers import StaticCache

from gspo.trainer.engines.rollout import RowSampler
from gspo.trainer.model.logprobs import sampling_logits

BUCKET = 64  # cache widths are multiples of this: the prompts of one run (a few widths) share a few graphs
CHECK_EVERY = 8  # tokens between two "has every row ended?" host syncs (the only syncs of the loop)

log = logging.getLogger(__name__)


def bucket(width: int) -> int:
    """Positions the cache holds for a prompt of P tokens and T new ones (P + T): rounded up to BUCKET."""
    return -(-width // BUCKET) * BUCKET


def pick(logits: torch.Tensor, sampler: RowSampler | None, temperature: float, top_p: float,
         step: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """[N, V] raw logits of the next token -> (token [N], its log-prob [N], the entropy [N] of the sampling
    distribution); greedy (sampler None): the argmax, and no log-probs. Both decoding loops pick with this."""
    logits = sampling_logits(logits.float(), temperature, top_p)
    if sampler is None:
        return logits.argmax(-1), None, None
    probs, logp = torch.softmax(logits, -1), torch.log_softmax(logits, -1)
    token = sampler.draw(probs, step)  # row i at its own uniform, as generate draws it
    return token, logp.gather(-1, token.unsqueeze(-1)).squeeze(-1), -(probs * logp).sum(-1)


def _params_at(model) -> tuple[int, ...]:
    """Where every parameter's storage is: a captured graph reads the weights there."""
    return tuple(p.data_ptr() for p in model.parameters())


class StaticDecoder:
    """Decoding N rows into a cache of `capacity` positions, at most `max_new_tokens` new tokens each.

    Every tensor a decode step reads or writes is allocated here once: the cache (transformers' StaticCache,
    written at its device-side length), the attention mask [N, capacity], the last token and position [N, 1],
    the token index t (0-dim), the ended flags [N], and the outputs [N, max_new_tokens]. A later generation
    of the same shape reuses all of it (and the graph) after `start` refills the inputs.
    """

    def __init__(self, model, *, n: int, capacity: int, max_new_tokens: int, device: torch.device,
                 cache_keyword: str, eos_ids: list[int], pad_id: int, temperature: float, top_p: float,
                 greedy: bool, graphs: bool):
        self.model, self.kw, self.pad, self.greedy = model, cache_keyword, pad_id, greedy
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.key = (n, capacity, max_new_tokens, greedy, device, tuple(eos_ids))
        self.cache = StaticCache(config=model.config, max_cache_len=capacity)
        self.eos = torch.tensor(eos_ids, device=device)
        self.mask = torch.ones(n, capacity, dtype=torch.long, device=device)
        self.token = torch.zeros(n, 1, dtype=torch.long, device=device)
        self.position = torch.zeros(n, 1, dtype=torch.long, device=device)
        self.t = torch.zeros((), dtype=torch.long, device=device)
        self.done = torch.zeros(n, dtype=torch.bool, device=device)
        self.tokens = torch.zeros(n, max_new_tokens, dtype=torch.long, device=device)
        self.logps = torch.zeros(n, max_new_tokens, device=device)
        self.ents = torch.zeros(n, max_new_tokens, device=device)
        self.sampler = None if greedy else RowSampler([0] * n, device, temperature=temperature, top_p=top_p)
        self.graphs = graphs and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.warm = 0  # eager steps run since the buffers were made (the graph is captured after one)
        self.params = _params_at(model)

    def fits(self, key: tuple, model) -> bool:
        """Whether this decoder serves a generation of shape `key` on `model`'s weights where they are now."""
        return key == self.key and _params_at(model) == self.params

    def decode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, seeds: torch.Tensor | None,
               ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """[N, P] left-padded prompts -> what HFEngine._decode returns for them: completion ids [N, T'], and
        when sampling the chosen tokens' log-probs and the entropies [N, T']; T' as the eager loop's."""
        self._start(input_ids, attention_mask, seeds)
        decoded = 1
        while decoded < self.max_new_tokens:
            if decoded % CHECK_EVERY == 0 and bool(self.done.all()):
                break
            self._advance()
            decoded += 1
        return self._outputs(decoded)

    def _start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, seeds: torch.Tensor | None) -> None:
        """Refill the inputs in place, prefill the prompts (eagerly: their width varies), pick token 0."""
        width = input_ids.shape[1]
        self.cache.reset()
        self.mask[:, :width].copy_(attention_mask)
        self.mask[:, width:].fill_(1)  # generated positions; those not yet written are masked as the future
        position = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        self.done.zero_()
        self.t.zero_()
        if self.sampler is not None:
            self.sampler.seeds.copy_(seeds)
        out = self.model(input_ids=input_ids, attention_mask=self.mask, position_ids=position,
                         **{self.kw: self.cache}, use_cache=True, logits_to_keep=1)
        self.position.copy_(position[:, -1:])
        self._select(out.logits[:, -1])

    def _step(self) -> None:
        """One decode step, reading and writing only this decoder's buffers (what the graph replays)."""
        out = self.model(input_ids=self.token, attention_mask=self.mask, position_ids=self.position,
                         **{self.kw: self.cache}, use_cache=True)
        self._select(out.logits[:, -1])

    def _select(self, logits: torch.Tensor) -> None:
        """Pick token t from `logits` [N, V], write it (pad where a row has ended) and its log-prob and entropy
        into column t, and move the inputs on to token t + 1."""
        token, logp, ent = pick(logits, self.sampler, self.temperature, self.top_p, self.t)
        token = token.masked_fill(self.done, self.pad)
        column = self.t.view(1, 1).expand(token.shape[0], 1)
        self.tokens.scatter_(1, column, token.unsqueeze(1))
        if logp is not None:
            self.logps.scatter_(1, column, logp.unsqueeze(1))
            self.ents.scatter_(1, column, ent.unsqueeze(1))
        self.done |= torch.isin(token, self.eos)
        self.token.copy_(token.unsqueeze(1))
        self.position += 1
        self.t += 1

    def _advance(self) -> None:
        """One decode step: the graph's replay where one is captured, else eagerly (the first step of a
        fresh decoder is the warm-up the capture needs: lazy initialisations, allocator, library handles)."""
        if self.graph is not None:
            self.graph.replay()
            return
        if not self.graphs or self.warm == 0:
            self._eager_step()
            return
        try:
            self.graph = self._capture()
        except Exception as err:  # a host sync or an uncapturable op in the model's forward: stay eager
            log.warning("decode step not captured as a CUDA graph (%s); decoding eagerly", str(err).splitlines()[0])
            self.graphs = False
            torch.cuda.synchronize()
            self._eager_step()
            return
        self.graph.replay()  # a capture records the step without running it

    def _eager_step(self) -> None:
        if self.graphs:  # warm up on a side stream, as torch.cuda.graphs' documentation asks
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._step()
            torch.cuda.current_stream().wait_stream(side)
        else:
            self._step()
        self.warm += 1

    def _capture(self) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        device = self.t.device.type
        # autocast's cache of cast weights would live outside the graph's memory pool: casts are recorded
        autocast = torch.autocast(device, dtype=torch.get_autocast_dtype(device), cache_enabled=False,
                                  enabled=torch.is_autocast_enabled(device))
        with autocast, torch.cuda.graph(graph):
            self._step()
        return graph

    def _outputs(self, decoded: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The first `decoded` columns, cut where the eager loop stops: one past the last row's first eos."""
        tokens = self.tokens[:, :decoded]
        is_eos = torch.isin(tokens, self.eos)
        first = torch.where(is_eos.any(-1), is_eos.long().argmax(-1), decoded - 1)
        width = int(first.max()) + 1
        if self.greedy:
            return tokens[:, :width], None, None
        return tokens[:, :width], self.logps[:, :width], self.ents[:, :width]
