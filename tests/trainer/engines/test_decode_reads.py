"""The fixed-shape decoding that reads only what it needs (trainer/engines/static_decode.py, issue 61): attention
over windows of the cache that grow with the step, and rows that have ended dropped from the batch (compaction), on
tiny random Qwen3 models on the CPU (the same code path a CUDA graph captures per (rows, width); the graphs'
replays are tests/trainer/test_gpu.py's). The same tokens as the growing-cache loop from the same seeds, with rows
ending at different steps, widths crossing window boundaries and the batch shrinking mid-rollout; and the
positions the attention is handed, counted at torch's SDPA, are the fewer ones the design says.
"""

from __future__ import annotations

import pytest
import torch

from gspo.trainer.engines.static_decode import (
    BUCKET,
    MIN_ROWS,
    WINDOW,
    attention_width,
    bucket,
    compact_sizes,
)
from gspo.trainer.model.models import build_tiny_qwen3
from tests.trainer.engines.test_rollout import _engine, _tiny
from tests.trainer.engines.test_static_decode import WIDE, _host_reads, _pair, _same, one_thread  # noqa: F401

SMALL = {"window": 16, "min_rows": 2}  # windows and sizes small enough for a tiny rollout to cross several


@pytest.fixture(scope="module")
def tiny():
    return _tiny()


def test_attention_width_is_the_smallest_window_multiple_covering_what_is_written():
    assert [attention_width(w, 384, 256) for w in (1, 255, 256, 257, 383, 384)] == [256, 256, 256, 384, 384, 384]
    assert [attention_width(w, 128, 16) for w in (21, 32, 33, 120)] == [32, 32, 48, 128]
    assert attention_width(5, 128, None) == 128  # no window: the whole bucket
    assert WINDOW % BUCKET == 0  # a window boundary is a bucket boundary: no width between buckets


def test_compact_sizes_halve_while_at_least_min_rows():
    assert compact_sizes(128, MIN_ROWS) == [128, 64, 32, 16, 8]
    assert compact_sizes(18, 2) == [18, 9, 5, 3, 2]
    assert compact_sizes(12, 8) == [12]  # half of 12 is under 8
    assert compact_sizes(1, 1) == [1] and compact_sizes(64, None) == [64]


def _shapes(engine) -> tuple[set[int], set[int]]:
    """The batch sizes and attention widths the engine's decoder stepped at (every shape it ran eagerly)."""
    return {rows for rows, _ in engine.static.warm}, {width for _, width in engine.static.warm}


@pytest.mark.parametrize(("temperature", "top_p", "max_new_tokens"), [(0.7, 1.0, 60), (1.3, 0.9, 45), (0.5, 0.6, 30)])
def test_windows_and_compaction_draw_the_eager_tokens(tiny, temperature, top_p, max_new_tokens):
    """18 rows of widths 2..21 ending at different tokens, windows of 16 positions, batches halved down to 2 rows:
    token for token what the growing cache draws; the rollout crossed several widths and shrank mid-way."""
    model, tokenizer = tiny
    dynamic, static = _pair(model, tokenizer, WIDE * 3, 11, temperature=temperature, top_p=top_p,
                            max_new_tokens=max_new_tokens, **SMALL)
    _same(dynamic, static)
    lengths = dynamic.completion_mask.sum(-1)
    assert lengths.min() < lengths.max() and (~dynamic.truncated).any()  # rows ended at different tokens
    engine = _engine(model, tokenizer, kv_cache="static", want_logprobs=True, temperature=temperature,
                     top_p=top_p, max_new_tokens=max_new_tokens, **SMALL)
    engine.generate(WIDE * 3, seed=11)
    sizes, widths = _shapes(engine)
    assert 18 in sizes and len(sizes) >= 3, sizes  # compaction changed the batch size more than once
    assert len(widths) >= 2, widths  # the width grew across a window boundary


def test_a_compacted_row_draws_what_it_draws_alone(tiny):
    """A row's draws depend on its seed and the token index alone, wherever compaction moves it: the rows of a
    compacted batch are the completions each prompt gets decoded by itself with its own seed."""
    model, tokenizer = tiny
    engine = _engine(model, tokenizer, kv_cache="static", temperature=0.7, max_new_tokens=60, **SMALL)
    batch = engine.generate(WIDE * 3, seed=5)
    assert len(_shapes(engine)[0]) >= 3
    longest = batch.completion_mask.sum(-1).argsort(descending=True)[:3].tolist()  # moved by every compaction
    for i in longest + [0]:
        alone = engine.generate([(WIDE * 3)[i]], seed=5 + i)
        length = int(batch.completion_mask[i].sum())
        assert int(alone.completion_mask.sum()) == length
        assert torch.equal(alone.input_ids[0, -alone.n_completion:][:length],
                           batch.input_ids[i, -batch.n_completion:][:length])


def _decode_reads(engine, prompts, seed, monkeypatch) -> tuple[object, int, int]:
    """One generation, with every decode step's attention counted where torch's SDPA receives it: (rollout,
    rows x key positions summed over the decode steps per layer, decode steps)."""
    seen, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, *args, **kwargs):
        seen.append(key.shape[0] * key.shape[-2])
        return sdpa(query, key, value, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
        out = engine.generate(prompts, seed=seed)
    layers = engine.model.config.num_hidden_layers
    seen = seen[layers:]  # the prefill's calls come first, one per layer
    assert seen and len(seen) % layers == 0
    return out, sum(seen) // layers, len(seen) // layers


def test_the_attention_reads_only_the_windows_and_the_rows_left(tiny, monkeypatch):
    """Counted at SDPA: the whole bucket reads rows x capacity per step; windows read rows x the window covering
    what is written (hand-computed); compaction reads fewer rows; both together fewest. Each arm draws the same
    tokens, and the decoder's own count (perf/ prints it) is what the attention saw."""
    model, tokenizer = tiny
    prompts, new = WIDE * 3, 60
    width = max(len(prompt) for prompt in prompts)  # the padded prompt (one token per character)
    capacity = bucket(width + new)
    arms = {"bucket": {"window": None, "min_rows": None}, "window": {"window": 16, "min_rows": None},
            "compact": {"window": None, "min_rows": 2}, "both": SMALL}
    reads, outs = {}, {}
    for name, opts in arms.items():
        engine = _engine(model, tokenizer, kv_cache="static", temperature=0.7, max_new_tokens=new, **opts)
        outs[name], reads[name], steps = _decode_reads(engine, prompts, 3, monkeypatch)
        assert engine.static.reads == reads[name]
        assert torch.equal(outs[name].input_ids, outs["bucket"].input_ids)
    assert steps > 40 and capacity == 128
    assert reads["bucket"] == steps * 18 * capacity
    assert reads["window"] == sum(18 * min(capacity, -(-(width + d) // 16) * 16) for d in range(1, steps + 1))
    assert reads["window"] < 0.6 * reads["bucket"]
    assert reads["compact"] < 0.8 * reads["bucket"]
    assert reads["both"] < min(reads["window"], reads["compact"])


@pytest.mark.slow
def test_the_default_window_crosses_its_boundary_with_the_eager_tokens(tiny):
    """The shipped WINDOW (256): 300 new tokens after a 20-token prompt fill a 320-position bucket, read at width
    256 and then 320, every row to the end (nothing ends them); the same tokens as the growing cache."""
    model, tokenizer = _tiny_long()
    engines = [_engine(model, tokenizer, kv_cache=c, want_logprobs=True, max_new_tokens=300) for c in ("dynamic", "static")]
    for engine in engines:
        engine.eos_ids = [-1]
    dynamic, static = (engine.generate(WIDE, seed=2) for engine in engines)
    _same(dynamic, static)
    assert static.n_completion == 300 and _shapes(engines[1]) == ({6}, {WINDOW, bucket(20 + 300)})


def _tiny_long():
    """The tiny model with room for 320 positions."""
    model, tokenizer = _tiny()
    return build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2,
                            num_kv_heads=1, seed=0, max_positions=512).eval(), tokenizer


def test_a_compacted_windowed_step_reads_nothing_back_to_the_host(tiny):
    """What a graph captures at a smaller batch and a narrower width syncs with the host no more than the full
    step: the compacted decoder's step reads no tensor value back."""
    model, tokenizer = tiny
    engine = _engine(model, tokenizer, kv_cache="static", temperature=0.7, max_new_tokens=60, **SMALL)
    engine.generate(WIDE * 3, seed=11)
    decoder = engine.static
    with torch.inference_mode():  # as the engine decodes
        decoder._compact(1)
    assert decoder.rows == 2 and decoder.width < decoder.capacity
    assert _host_reads(decoder) == []
