"""The lean sampler's fixed-shape decoding (`rollout.kv_cache=static`): transformers' StaticCache of one width per
bucket, and each decode step a function of buffers allocated once, replayed as a captured CUDA graph on CUDA.

Why a graph: on a GPU the eager loop is launch- and Python-bound (a 0.6B model's decode step is ~600 kernels
launched from Python across 28 layers, plus a host sync per token, against a weight-read floor under 1 ms).
Captured once, a step is one `graph.replay()`. Explicit `torch.cuda.CUDAGraph` capture rather than
`torch.compile(mode="reduce-overhead")`: no compile on the first call (transformers' compiled static decode
paid 38 s on an H100), no recompile per bucket, and the sampler's own ops (the row-seeded SplitMix64 draw,
searchsorted) captured as they are. Its risk, a host sync somewhere in a model's forward (MoE expert loops),
makes the capture raise; the decoder then runs the same step eagerly (same tokens, no graph).

Reading only what a step needs (issue 61): beyond ~100 tokens at 128 rows the KV cache, not the weights, is what
a step reads. So attention reads the cache in windows (`WINDOW` positions): a step attends over the smallest
multiple of the window that covers the positions written so far, not the whole bucket; and rows that have ended
are dropped: at each all-ended check the live rows are moved to the front of every buffer and the step runs on
the first `size` rows, `size` one of a few (`compact_sizes`: the batch halved while the live rows fit). Each
(rows, width) pair is its own fixed shape, so on CUDA its own graph (captured on its second step; all graphs
share one memory pool, their scratch never alive between steps); on the CPU the same steps run eagerly. A row
keeps its seed and the token index is shared, so its counter-based draws are the same wherever it sits.

Same tokens as the eager loop (hf_engine.HFEngine._decode): the same `pick` of each token from the same
logits, the uniform of row i at token t from (seed + i, t), a row's tokens after its eos replaced by pad,
and the completion cut where the eager loop stops (the first token at which every row has ended). The
logits themselves differ from the eager loop's only in rounding: attention runs over the window's width with
the positions not yet written masked out, rather than over the positions written so far.
"""

from __future__ import annotations

import logging

import torch
from transformers import StaticCache
from transformers.cache_utils import StaticLayer

from gspo.trainer.engines.rollout import RowSampler
from gspo.trainer.model.logprobs import sampling_logits

BUCKET = 64  # cache widths are multiples of this: the prompts of one run (a few widths) share a few graphs
CHECK_EVERY = 8  # tokens between two "how many rows are left?" host syncs (the only syncs of the loop)
WINDOW = 256  # attention widths are multiples of this (or the bucket): ~9 widths, so ~9 graphs, at 2,048 tokens
MIN_ROWS = 8  # compaction halves the batch down to this many rows (fewer would not read the weights any faster)

log = logging.getLogger(__name__)


def bucket(width: int) -> int:
    """Positions the cache holds for a prompt of P tokens and T new ones (P + T): rounded up to BUCKET."""
    return -(-width // BUCKET) * BUCKET


def attention_width(written: int, capacity: int, window: int | None) -> int:
    """The positions a step attends over once `written` are in the cache: the smallest multiple of `window` that
    covers them, at most the bucket's `capacity` (the whole bucket where `window` is None)."""
    return capacity if window is None else min(capacity, -(-written // window) * window)


def compact_sizes(n: int, min_rows: int | None) -> list[int]:
    """The batch sizes a batch of n rows is compacted to, largest first: n, then halved (rounded up) while at least
    `min_rows` ([n] where `min_rows` is None: no compaction)."""
    sizes = [n]
    while min_rows is not None and (half := -(-sizes[-1] // 2)) >= min_rows and half < sizes[-1]:
        sizes.append(half)
    return sizes


class WindowLayer(StaticLayer):
    """transformers' StaticLayer, of which a step reads a corner: the first rows (the batch left after compaction,
    taken from the step's own keys) and the first `width` positions (set by the decoder before each step)."""

    def __init__(self, max_cache_len: int, **kwargs):
        super().__init__(max_cache_len, **kwargs)
        self.width = max_cache_len

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        rows, length = key_states.shape[0], key_states.shape[-2]
        at = torch.arange(length, device=self.device) + self.cumulative_length  # device-side: no host sync
        self.cumulative_length.add_(length)
        keys, values = self.keys[:rows], self.values[:rows]  # [rows, heads, capacity, head_dim] views
        keys.index_copy_(2, at, key_states)
        values.index_copy_(2, at, value_states)
        return keys[:, :, : self.width], values[:, :, : self.width]

    def get_mask_sizes(self, *args, **kwargs) -> tuple[int, int]:
        return self.width, 0


def window_cache(config, capacity: int) -> StaticCache:
    """transformers' StaticCache for `config`'s model of `capacity` positions, its full-attention layers
    WindowLayers (sliding-window and other layer kinds keep transformers' own, and turn windows off)."""
    cache = StaticCache(config=config, max_cache_len=capacity)
    cache.layers = [WindowLayer(capacity) if type(layer) is StaticLayer else layer for layer in cache.layers]
    return cache


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

    Every tensor a decode step reads or writes is allocated here once: the cache (WindowLayers, written at their
    device-side length), the attention mask [N, capacity], the last token and position [N, 1], the token index
    t (0-dim), the ended flags [N], each slot's row and seed [N], and the outputs [N, max_new_tokens] (by row).
    A step runs on the first `rows` slots and `width` positions: `window` positions at a time (None: the whole
    bucket) and `min_rows` the smallest compacted batch (None: no compaction). A later generation of the same
    shape reuses all of it (and the graphs) after `start` refills the inputs.
    """

    def __init__(self, model, *, n: int, capacity: int, max_new_tokens: int, device: torch.device,
                 cache_keyword: str, eos_ids: list[int], pad_id: int, temperature: float, top_p: float,
                 greedy: bool, graphs: bool, window: int | None = WINDOW, min_rows: int | None = MIN_ROWS):
        self.model, self.kw, self.pad, self.greedy = model, cache_keyword, pad_id, greedy
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.key = (n, capacity, max_new_tokens, greedy, device, tuple(eos_ids), window, min_rows)
        self.cache = window_cache(model.config, capacity)
        windowed = all(isinstance(layer, WindowLayer) for layer in self.cache.layers)
        self.window = window if windowed else None
        self.sizes = compact_sizes(n, min_rows if windowed else None)
        self.capacity, self.rows, self.width, self.prompt = capacity, n, capacity, 0
        self.eos = torch.tensor(eos_ids, device=device)
        self.mask = torch.ones(n, capacity, dtype=torch.long, device=device)
        self.token = torch.zeros(n, 1, dtype=torch.long, device=device)
        self.position = torch.zeros(n, 1, dtype=torch.long, device=device)
        self.t = torch.zeros((), dtype=torch.long, device=device)
        self.done = torch.zeros(n, dtype=torch.bool, device=device)
        self.row = torch.arange(n, device=device)  # the row each slot holds (slots move when the batch compacts)
        self.tokens = torch.zeros(n, max_new_tokens, dtype=torch.long, device=device)
        self.logps = torch.zeros(n, max_new_tokens, device=device)
        self.ents = torch.zeros(n, max_new_tokens, device=device)
        self.sampler = None if greedy else RowSampler([0] * n, device, temperature=temperature, top_p=top_p)
        self.seeds = None if greedy else self.sampler.seeds  # each slot's seed; the sampler reads its first rows
        self.graphs = graphs and device.type == "cuda"
        self.captured: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # (rows, width) -> its step's graph
        self.warm: set[tuple[int, int]] = set()  # shapes run once eagerly (a capture's warm-up)
        self.pool = None  # the captured graphs' one memory pool
        self.reads = 0  # KV positions x rows the attention of the last generation's decode steps read, per layer
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
            if decoded % CHECK_EVERY == 0:
                live = int((~self.done[: self.rows]).sum())  # the loop's one host sync every CHECK_EVERY tokens
                if live == 0:
                    break
                self._compact(live)
            self._advance(self.prompt + decoded)
            decoded += 1
        return self._outputs(decoded)

    def _start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, seeds: torch.Tensor | None) -> None:
        """Refill the inputs in place, prefill the prompts (eagerly: their width varies), pick token 0."""
        self.prompt = width = input_ids.shape[1]
        self.cache.reset()
        self._resize(len(self.row), attention_width(width, self.capacity, self.window))
        self.mask[:, :width].copy_(attention_mask)
        self.mask[:, width:].fill_(1)  # generated positions; those not yet written are masked as the future
        position = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        self.done.zero_()
        self.t.zero_()
        self.row.copy_(torch.arange(len(self.row), device=self.row.device))
        self.tokens.fill_(self.pad)  # a row dropped from the batch keeps pad after its eos, as the eager loop writes
        self.logps.zero_()
        self.ents.zero_()
        self.reads = 0
        if self.sampler is not None:
            self.seeds.copy_(seeds)
        out = self.model(input_ids=input_ids, attention_mask=self.mask[:, : self.width], position_ids=position,
                         **{self.kw: self.cache}, use_cache=True, logits_to_keep=1)
        self.position.copy_(position[:, -1:])
        self._select(out.logits[:, -1])

    def _resize(self, rows: int, width: int) -> None:
        """Steps from now on run on the first `rows` slots and attend over the first `width` positions."""
        self.rows, self.width = rows, width
        for layer in self.cache.layers:
            layer.width = width
        if self.sampler is not None:
            self.sampler.seeds = self.seeds[:rows]

    def _compact(self, live: int) -> None:
        """Where the `live` rows left fit a smaller size, move them (stably) to the first slots of every buffer
        the step reads, the cache's written positions included, and run the steps from now on with that size."""
        size = min(s for s in self.sizes if s >= live)
        if size >= self.rows:
            return
        rows = self.rows
        order = torch.argsort(self.done[:rows].to(torch.uint8), stable=True)[:size]  # the live slots first
        for layer in self.cache.layers:
            for kv in (layer.keys, layer.values):
                kv[:size, :, : self.width].copy_(kv[:rows, :, : self.width].index_select(0, order))
        for buffer in (self.mask, self.token, self.position, self.done, self.row, self.seeds):
            if buffer is not None:
                buffer[:size].copy_(buffer[:rows].index_select(0, order))
        self._resize(size, self.width)

    def _step(self) -> None:
        """One decode step, reading and writing only this decoder's buffers (what a graph replays)."""
        rows = self.rows
        out = self.model(input_ids=self.token[:rows], attention_mask=self.mask[:rows, : self.width],
                         position_ids=self.position[:rows], **{self.kw: self.cache}, use_cache=True)
        self._select(out.logits[:, -1])

    def _select(self, logits: torch.Tensor) -> None:
        """Pick token t from `logits` [rows, V], write it (pad where a row has ended) and its log-prob and entropy
        into column t of each slot's row, and move the inputs on to token t + 1."""
        rows = self.rows
        token, logp, ent = pick(logits, self.sampler, self.temperature, self.top_p, self.t)
        done = self.done[:rows]
        token = token.masked_fill(done, self.pad)
        at = self.row[:rows] * self.max_new_tokens + self.t  # flat index of (row, t) in the outputs
        self.tokens.view(-1).scatter_(0, at, token)
        if logp is not None:
            self.logps.view(-1).scatter_(0, at, logp)
            self.ents.view(-1).scatter_(0, at, ent)
        done |= torch.isin(token, self.eos)
        self.token[:rows].copy_(token.unsqueeze(1))
        self.position[:rows] += 1
        self.t += 1

    def _advance(self, written: int) -> None:
        """One decode step, after which `written` positions are in the cache: the graph of its (rows, width) where
        one is captured, else eagerly (a shape's first step is the warm-up its capture needs: lazy
        initialisations, allocator, library handles)."""
        width = attention_width(written, self.capacity, self.window)
        if width != self.width:
            self._resize(self.rows, width)
        self.reads += self.rows * width
        shape = (self.rows, width)
        if shape in self.captured:
            self.captured[shape].replay()
            return
        if not self.graphs or shape not in self.warm:
            self._eager_step(shape)
            return
        try:
            self.captured[shape] = self._capture()
        except Exception as err:  # a host sync or an uncapturable op in the model's forward: stay eager
            log.warning("decode step not captured as a CUDA graph (%s); decoding eagerly", str(err).splitlines()[0])
            self.graphs = False
            torch.cuda.synchronize()
            self._eager_step(shape)
            return
        self.captured[shape].replay()  # a capture records the step without running it

    def _eager_step(self, shape: tuple[int, int]) -> None:
        if self.graphs:  # warm up on a side stream, as torch.cuda.graphs' documentation asks
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._step()
            torch.cuda.current_stream().wait_stream(side)
        else:
            self._step()
        self.warm.add(shape)

    def _capture(self) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        device = self.t.device.type
        # autocast's cache of cast weights would live outside the graph's memory pool: casts are recorded
        autocast = torch.autocast(device, dtype=torch.get_autocast_dtype(device), cache_enabled=False,
                                  enabled=torch.is_autocast_enabled(device))
        # one pool for every shape's graph: a step's scratch is dead once it returns (its outputs are this
        # decoder's buffers), and the graphs replay one at a time on one stream
        self.pool = self.pool or torch.cuda.graph_pool_handle()
        with autocast, torch.cuda.graph(graph, pool=self.pool):
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
