"""Load the policy a run trains: the embedded cold-started tiny model, a checkpoint, or a Hugging Face model."""

from __future__ import annotations

from collections.abc import Callable

from gspo.conf.errors import GspoError
from gspo.trainer.coldstart import ColdStartSpec, cold_start_path
from gspo.trainer.models import DTYPES, load_pretrained
from gspo.trainer.precision import check_precision, resolve_precision


def load_policy(cfg, log: Callable[[str], None] = print, *, path: str | None = None):
    """(model, tokenizer) for `cfg.model`; `path` (a checkpoint folder) overrides where weights come from."""
    m = cfg.model
    if path is None and m.name == "tiny":
        if cfg.task.kind == "math":
            raise GspoError("model=tiny speaks only the embedded arith task: use task=arith, or a real model")
        if cfg.task.kind == "code":
            log("model=tiny knows only arithmetic: on task=code it writes no code (an end-to-end check of the "
                "task, not training)")
        path = str(cold_start_path(tiny_spec(cfg), m.tiny.cache_dir, log))
    return load_pretrained(path or m.name, dtype=m.dtype, trust_remote_code=m.trust_remote_code,
                           attn_implementation=m.attn_implementation,
                           gradient_checkpointing=m.gradient_checkpointing)


def tiny_spec(cfg) -> ColdStartSpec:
    t = cfg.model.tiny
    return ColdStartSpec(
        hidden_size=t.hidden_size, num_layers=t.num_layers, intermediate_size=t.intermediate_size,
        num_heads=t.num_heads, num_kv_heads=t.num_kv_heads, num_experts=t.num_experts,
        experts_per_token=t.experts_per_token, moe_intermediate_size=t.moe_intermediate_size, sft_lr=t.sft_lr, sft_batch_size=t.sft_batch_size,
        sft_max_steps=t.sft_max_steps, sft_eval_every=t.sft_eval_every, sft_eval_max_loss=t.sft_eval_max_loss,
        sft_target_accuracy=t.sft_target_accuracy, sft_seed=t.sft_seed, min_digits=cfg.task.min_digits,
        max_digits=cfg.task.max_digits, ops=cfg.task.ops, max_new_tokens=cfg.rollout.max_new_tokens,
    )


def checked_precision(cfg, device) -> str:
    """`train.precision` resolved against the storage dtype `model.dtype` and checked on `device`."""
    storage = DTYPES[cfg.model.dtype]
    precision = resolve_precision(cfg.train.precision, storage)
    check_precision(precision, storage, device)
    return precision
