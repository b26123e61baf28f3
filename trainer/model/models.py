"""Models and tokenizers: the embedded tiny Qwen3 with a character tokenizer, or any Hugging Face model.

The tiny model is built here from a config with random weights (nothing is downloaded); its cold start
(a short supervised fine-tune, `trainer.coldstart`) is cached on disk and loaded like any local model.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from gspo.conf.errors import GspoError

PAD, EOS = "<pad>", "<eos>"  # distinct: masking pads must never mask a real end of sequence
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_char_tokenizer(alphabet: str, *, size: int | None = None) -> PreTrainedTokenizerFast:
    """A tokenizer with one token per character of `alphabet`, plus pad and end-of-sequence (and filler
    tokens `<fN>` up to `size`, which encoding never produces)."""
    tokens = [PAD, EOS, *alphabet]
    vocab = {tok: i for i, tok in enumerate(tokens + [f"<f{i}>" for i in range(len(tokens), size or len(tokens))])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=PAD, eos_token=EOS, padding_side="left")


def build_tiny_qwen3(vocab_size: int, *, hidden_size: int, num_layers: int, intermediate_size: int,
                     num_heads: int, num_kv_heads: int, seed: int, max_positions: int = 256,
                     head_dim: int | None = None, num_experts: int = 0, experts_per_token: int = 2,
                     moe_intermediate_size: int = 0) -> Qwen3ForCausalLM | Qwen3MoeForCausalLM:
    """A Qwen3-architecture causal LM with random weights drawn from `seed`; with `num_experts` > 0 a
    Qwen3-MoE (every layer sparse, `experts_per_token` experts of `moe_intermediate_size` per token)."""
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim or hidden_size // num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    if num_experts:
        cfg, arch = Qwen3MoeConfig(**common, num_experts=num_experts, num_experts_per_tok=experts_per_token,
                                   moe_intermediate_size=moe_intermediate_size, norm_topk_prob=True,
                                   decoder_sparse_step=1, mlp_only_layers=[]), Qwen3MoeForCausalLM
    else:
        cfg, arch = Qwen3Config(**common), Qwen3ForCausalLM
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return arch(cfg)


# Qwen/Qwen3-0.6B's config.json: the shape used to test and measure at a real model's size, offline (perf/,
# tests/trainer/test_gpu.py)
QWEN3_0_6B = {"vocab_size": 151936, "hidden_size": 1024, "num_layers": 28, "intermediate_size": 3072, "num_heads": 16,
              "num_kv_heads": 8, "head_dim": 128}


def save_random_qwen3_0_6b(folder: Path, alphabet: str, *, dtype: str = "bfloat16", seed: int = 0) -> Path:
    """A randomly initialised model of Qwen3-0.6B's shape with a character tokenizer over `alphabet` whose
    vocabulary is padded to the model's (filler tokens `<fN>`), saved to `folder`; nothing is downloaded.
    Used by the GPU tests and by perf/trl_vs_gspo.py --model qwen3-0.6b-random."""
    q = QWEN3_0_6B
    tokenizer = build_char_tokenizer(alphabet, size=q["vocab_size"])
    model = build_tiny_qwen3(q["vocab_size"], hidden_size=q["hidden_size"], num_layers=q["num_layers"],
                             intermediate_size=q["intermediate_size"], num_heads=q["num_heads"],
                             num_kv_heads=q["num_kv_heads"], head_dim=q["head_dim"], seed=seed, max_positions=40960)
    model.to(DTYPES[dtype]).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def cache_root(configured: str | None) -> Path:
    return Path(configured or os.environ.get("GSPO_CACHE") or Path.home() / ".cache" / "gspo")


def load_pretrained(name: str, *, dtype: str = "float32", trust_remote_code: bool = False,
                    attn_implementation: str | None = None, gradient_checkpointing: bool = False):
    """(model, tokenizer) from a local path or a Hugging Face id, with a one-line error when neither."""
    looks_local = name.startswith((".", "/", "~")) or os.sep in name and Path(name).expanduser().exists()
    if looks_local and not Path(name).expanduser().exists():
        raise GspoError(f"model path not found: {name}")
    kwargs = {"dtype": DTYPES[dtype], "trust_remote_code": trust_remote_code}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GspoError(f"cannot load model {name!r}: {first}") from None
    if tokenizer.pad_token_id is None:
        # a separate pad would change the vocabulary; reuse eos for padding only; masks come from
        # the first eos position, never from comparing tokens with pad
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    disable_dropout(model)
    if gradient_checkpointing:
        # active only in training mode, which the update (and nothing else) turns on
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model.eval(), tokenizer


def disable_dropout(model: torch.nn.Module) -> None:
    """No dropout anywhere: old log-probs (scored in eval mode) and new ones (in training mode, where
    gradient checkpointing acts) must come from the same function, or the ratio is noise at step 0."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as e:
        raise GspoError(f"device={device!r}: {e}") from None
