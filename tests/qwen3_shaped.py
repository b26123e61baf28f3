"""Test-only: a randomly initialised model of Qwen3-0.6B's shape, for the GPU tests (tests/test_gpu.py)."""

from __future__ import annotations

from pathlib import Path

from gspo.trainer.models import DTYPES, QWEN3_0_6B, build_char_tokenizer, build_tiny_qwen3


def save_random_qwen3_0_6b(folder: Path, alphabet: str, *, dtype: str = "bfloat16", seed: int = 0) -> Path:
    """A randomly initialised model of Qwen3-0.6B's shape with a character tokenizer over `alphabet` whose
    vocabulary is padded to the model's (filler tokens `<fN>`), saved to `folder`; nothing is downloaded."""
    q = QWEN3_0_6B
    tokenizer = build_char_tokenizer(alphabet, size=q["vocab_size"])
    model = build_tiny_qwen3(q["vocab_size"], hidden_size=q["hidden_size"], num_layers=q["num_layers"],
                             intermediate_size=q["intermediate_size"], num_heads=q["num_heads"],
                             num_kv_heads=q["num_kv_heads"], head_dim=q["head_dim"], seed=seed, max_positions=40960)
    model.to(DTYPES[dtype]).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
