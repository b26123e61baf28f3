"""Progress bars: an ETA from the first steps however slow they are, labelled numbers, the phase shown,
and the cold start's bar and first line (where it is cached, that it is built once, when it stops)."""

from __future__ import annotations

from conftest import TINY

from gspo.conf import compose_config
from gspo.trainer.coldstart import cold_start_path
from gspo.trainer.policy import tiny_spec
from gspo.trainer.run.progress import Progress, train_stats


def test_eta_is_there_after_two_slow_steps():
    """rich's default 30 s speed window left ETA at -:--:-- while steps took longer than that."""
    now = [0.0]
    bar = Progress(10, enabled=False, clock=lambda: now[0])
    for _ in range(2):
        now[0] += 120.0  # two-minute steps
        bar.advance({})
    assert bar.bar.tasks[0].time_remaining == 8 * 120.0


def test_training_numbers_carry_their_metric_names():
    assert train_stats({"reward/mean": 0.5, "clip/token_frac": 0.25}) == "reward/mean 0.500  clip/token_frac 0.2500"


def test_phase_shows_an_eval_and_the_next_step_clears_it():
    bar = Progress(5, enabled=False)
    bar.phase("eval at step 5")
    assert bar.bar.tasks[0].description == "train (eval at step 5)"
    bar.advance({})
    assert bar.bar.tasks[0].description == "train"


def test_cold_start_says_where_it_is_cached_and_when_it_stops(tmp_path):
    spec = tiny_spec(compose_config([*TINY, "model.tiny.sft_max_steps=2", "model.tiny.sft_eval_every=2"]))
    lines: list[str] = []
    folder = cold_start_path(spec, str(tmp_path), lines.append, progress=True)
    assert lines[0].startswith("cold start: none shipped or cached for these settings")
    assert f"M parameters) into {folder}; it stops" in lines[1]
    assert "stops when the dev sampled accuracy reaches 0.20 (checked every 2 steps) or at step 2" in lines[1]
    assert lines[-1].startswith("cold start: done")
    lines.clear()
    assert cold_start_path(spec, str(tmp_path), lines.append) == folder and lines == []  # built once


def test_an_eval_in_chunks_draws_what_one_batch_draws_and_counts_problems():
    """The eval bar advances per chunk of whole problems; prompt i still draws with seed + i, so the
    samples are those of one call."""
    from gspo.evals.arith import ALPHABET
    from gspo.evals.benchmarks.arith import arith_benchmark
    from gspo.trainer.engines.hf_engine import HFEngine
    from gspo.trainer.evaluate import eval_benchmark
    from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3

    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=1, intermediate_size=64, num_heads=2,
                             num_kv_heads=1, seed=0).eval()
    engine = HFEngine(model, tokenizer, temperature=1.0, top_p=1.0, max_new_tokens=6, batch_size=64)
    bench = arith_benchmark(n=7, min_digits=1, max_digits=1)
    counted: list[int] = []
    whole = eval_benchmark(engine, bench, k=2, seed=3, chat=False)
    chunked = eval_benchmark(engine, bench, k=2, seed=3, chat=False, chunk=5, done=lambda by: counted.append(by))
    assert chunked == whole
    assert counted == [2, 2, 2, 1]  # 5 completions a chunk: 2 whole problems of k=2
    assert len({s["response"] for s in whole[1]}) > 1  # sampled, not one repeated text
